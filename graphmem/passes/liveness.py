"""Liveness over a schedule: what is alive at every step, the peak, and a lower bound.

Conventions (stated in the report too):
- residents (graph inputs, parameters, buffers, constants) are live for the whole run;
- an activation is live from the step of its producer to the step of its last consumer,
  inclusive: at a step, the node's inputs and outputs are live together;
- graph outputs stay live from their producer to the end;
- an output no node reads is live only at the step that makes it;
- a view or in-place result (`Value.alias_of`) allocates nothing: it keeps the tensor that owns
  its storage alive until the alias's own last use;
- where the importer knows that the framework holds a tensor longer (`Value.held_until`:
  eager PyTorch keeps it while a Python variable refers to it), it lives until then.
Last uses come from one reverse walk over the schedule, and every total from one forward
sweep of its events (graphmem/passes/memory_model.py). What-ifs pass `aliases` (outputs that
would share an input's storage) instead of changing the graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple, cast

from graphmem.core.ir import Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt, sum_sizes, symint_max
from graphmem.passes.memory_model import (
    PROBE_DIM_VALUE,
    Aliases,
    Buffers,
    MemorySweep,
    find_buffers,
    sweep_buffers,
)
from graphmem.passes.role_timeline import (
    PhaseSpan,
    RoleNumbers,
    RoleTimeline,
    phase_spans,
    timeline_numbers,
    timeline_of,
)


@dataclass(frozen=True)
class LiveTensor:
    name: str
    nbytes: SymInt
    role: Role
    dtype: str
    shape: str
    producer: str | None  # node name; None for residents
    last_consumer: str | None  # the node that keeps it alive (None: stays to the end)


@dataclass(frozen=True)
class LivenessResult:
    order: tuple[str, ...]  # node names in schedule order
    resident_bytes: SymInt
    live_bytes_per_step: tuple[SymInt, ...]  # residents + activations live during each step
    peak_bytes: SymInt  # the live total at peak_step
    peak_candidates: tuple[SymInt, ...]  # with free dims: steps that may be the peak (max of)
    peak_step: int
    activation_peak_bytes: SymInt  # peak_bytes less residents
    breakdown_at_peak: dict[Role, SymInt]
    live_at_peak: tuple[LiveTensor, ...]  # largest first
    lower_bound_bytes: SymInt  # residents + the largest single node's inputs and outputs
    lower_bound_step: int
    unknown_size_values: tuple[str, ...]  # counted as 0 bytes: their shape is unknown
    # forward, backward and optimizer spans of a training step over `order` (() inference)
    phases: tuple[PhaseSpan, ...] = ()
    # the swept events, for the views below (not part of the result's value)
    sweep: MemorySweep | None = field(default=None, repr=False, compare=False)

    @cached_property
    def role_timeline(self) -> RoleTimeline:
        """Live bytes at each step by role; they add up to `live_bytes_per_step`."""
        if self.sweep is None:
            raise ValueError("this liveness result was built without its sweep")
        return timeline_of(self.sweep)

    @cached_property
    def role_numbers(self) -> RoleNumbers | None:
        """`role_timeline` in integers where every size is one (a bound graph), else None."""
        if self.sweep is None:
            raise ValueError("this liveness result was built without its sweep")
        return timeline_numbers(self.sweep)

    @cached_property
    def step_numbers(self) -> list[int] | None:
        """`live_bytes_per_step` as integers where each is one (a bound graph: the sweep's
        totals, which those sizes were made from), else None: the writers' timelines read
        them instead of turning 10^5 sizes back into numbers."""
        totals = self.sweep.totals if self.sweep is not None else None
        if totals is None or len(totals) != len(self.live_bytes_per_step) or not all(
                map(int.__instancecheck__, totals)):  # a sub-byte total: rounded up there
            return None
        return cast(list[int], totals)


def analyze_liveness(
    graph: Graph,
    sizes: Mapping[str, SymInt | None],
    order: Sequence[Node] | None = None,
    dims: Mapping[str, int] | None = None,
    aliases: Aliases | None = None,
) -> LivenessResult:
    """Live memory over `order` (default: the model's order); `dims` only label shapes;
    `aliases` (value -> the value whose storage it would share) override `Value.alias_of`."""
    if not (order if order is not None else graph.nodes):
        raise ValueError(f"graph {graph.name} has no nodes to schedule")
    buffers = find_buffers(graph, aliases)
    sweep = sweep_buffers(buffers, sizes, order)
    resident_bytes = sum_sizes(sweep.resident_sizes)
    totals = sweep.totals  # numbers where every size is one (a bound graph)
    steps = (list(map(SymInt.const, totals)) if totals is not None
             else [s[0] for s in sweep.profile((resident_bytes,))])
    peak_step, candidates = _choose_peak(steps)
    lower_bound, lower_bound_step = _lower_bound(buffers, sweep, resident_bytes)
    live = _live_at(sweep, peak_step)
    schedule = sweep.order
    return LivenessResult(
        order=tuple(n.name for n in schedule),
        resident_bytes=resident_bytes,
        live_bytes_per_step=tuple(steps),
        peak_bytes=steps[peak_step],
        peak_candidates=tuple(candidates),
        peak_step=peak_step,
        activation_peak_bytes=steps[peak_step] - resident_bytes,
        breakdown_at_peak=_by_role(live),
        live_at_peak=_describe_live(live, dims or {}),
        lower_bound_bytes=lower_bound,
        lower_bound_step=lower_bound_step,
        unknown_size_values=tuple(sorted(n for n, size in sizes.items() if size is None)),
        phases=phase_spans(schedule),
        sweep=sweep,
    )


def _choose_peak(steps: list[SymInt]) -> tuple[int, list[SymInt]]:
    """The peak step; with free dims, the step largest at a probe value among candidates."""
    candidates = symint_max(steps)
    probe = {name: PROBE_DIM_VALUE for c in candidates for name in c.free_symbols()}
    best = max(candidates, key=lambda c: c.evaluate(probe))
    return steps.index(best), candidates


def _lower_bound(buffers: Buffers, sweep: MemorySweep,
                 resident_bytes: SymInt) -> tuple[SymInt, int]:
    """No order can do better than the largest node's working set on top of the residents."""
    touches, sizes = buffers.touches, sweep.buffer_sizes
    if resident_bytes.is_constant and sweep.buffers is buffers and (
            numbers := sweep.working_sets) is not None:
        # a bound graph: the working sets as numbers (exact: a 4-bit tensor's halves), the
        # first largest (as `_choose_peak`); the plans' model reads the same list
        totals = list(map(numbers.__getitem__, sweep.events.order))
        step = totals.index(max(totals))
        return resident_bytes + SymInt.const(totals[step]), step
    working_sets = [resident_bytes + sum_sizes(map(sizes.__getitem__, touches[node]))
                    for node in sweep.events.order]
    step, _ = _choose_peak(working_sets)
    return working_sets[step], step


class _Live(NamedTuple):
    """A tensor live at the peak: its storage, size and the node that keeps it."""

    value: Value
    nbytes: SymInt
    keeper: Node | None  # None: a resident or a graph output, alive to the end


def _live_at(sweep: MemorySweep, target: int) -> list[_Live]:
    """Activations live during step `target` in the order they were made, then residents."""
    events = sweep.events
    live = []
    for node in events.order[: target + 1]:
        for buffer in sweep.allocates[node]:
            last = events.last_step[buffer]
            if last >= target:
                storage = sweep.storages[buffer]
                keeper = None if storage.role is Role.OUTPUT else sweep.nodes[events.order[last]]
                live.append(_Live(storage, sweep.buffer_sizes[buffer], keeper))
    residents = zip(sweep.residents, sweep.resident_sizes, strict=True)
    return live + [_Live(value, size, None) for value, size in residents]


def _by_role(live: list[_Live]) -> dict[Role, SymInt]:
    by_role: dict[Role, list[SymInt]] = {}
    for tensor in live:
        by_role.setdefault(tensor.value.role, []).append(tensor.nbytes)
    return {role: sum_sizes(sizes) for role, sizes in by_role.items()}  # one sum per role


def _describe_live(live: list[_Live], dims: Mapping[str, int]) -> tuple[LiveTensor, ...]:
    """The live tensors, largest first (at the probe where sizes are free), then by name."""
    probe = {name: PROBE_DIM_VALUE for t in live for name in t.nbytes.free_symbols()}
    # values share their dim objects and size objects (a decoder's 11,000 tensors live at
    # the peak hold 15 dims and a few dozen sizes): a shape's text is found once per dims
    # (`shape_text` hashes the shape's SymInts per call) and a size's number once
    texts: dict[tuple[int, ...], str] = {}
    numbers: dict[int, int] = {}
    new = object.__new__
    tensors: list[LiveTensor] = []
    names: list[str] = []
    sizes: list[int] = []  # at the probe
    for value, nbytes, keeper in live:  # positional: 10^5 graph inputs are live at once
        producer, shape = value.producer, value.shape
        key = (*map(id, shape),) if shape is not None else (-1,)
        text = texts.get(key)
        if text is None:
            text = texts[key] = value.shape_text(dims)
        number = numbers.get(id(nbytes))
        if number is None:
            number = numbers[id(nbytes)] = _at_probe(nbytes, probe)
        # its fields stored in its dict in field order: the frozen dataclass's __init__ sets
        # its 7 fields one `object.__setattr__` at a time (and `update` with keywords builds
        # a dict of them first)
        tensor = new(LiveTensor)
        fields = tensor.__dict__
        fields["name"] = value.name
        fields["nbytes"] = nbytes
        fields["role"] = value.role
        fields["dtype"] = value.dtype.label
        fields["shape"] = text
        fields["producer"] = producer.name if producer is not None else None
        fields["last_consumer"] = keeper.name if keeper is not None else None
        tensors.append(tensor)
        names.append(value.name)
        sizes.append(number)
    # largest first, then by name, then in order: two stable sorts on one key each (a
    # reversed sort keeps equal keys in order), no key tuple per tensor
    ranked = sorted(range(len(tensors)), key=names.__getitem__)
    ranked.sort(key=sizes.__getitem__, reverse=True)
    return tuple(map(tensors.__getitem__, ranked))


def _at_probe(size: SymInt, probe: Mapping[str, int]) -> int:
    # a bound graph's sizes are numbers: nothing to evaluate (10^5 outputs live at the peak)
    return int(size) if size.is_constant else size.evaluate(probe)
