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
Last uses come from one reverse walk over the schedule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from graphmem.core.ir import RESIDENT_ROLES, Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt, symint_max

# Dims are probed at this value to pick one step among peaks that depend on free dims.
_PROBE_DIM_VALUE = 64


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


def analyze_liveness(
    graph: Graph,
    sizes: Mapping[str, SymInt | None],
    order: Sequence[Node] | None = None,
    dims: Mapping[str, int] | None = None,
) -> LivenessResult:
    """Live memory over `order` (default: the model's order); `dims` only label shapes."""
    schedule = list(order if order is not None else graph.nodes)
    if not schedule:
        raise ValueError(f"graph {graph.name} has no nodes to schedule")
    residents = [
        v for v in graph.values.values() if v.role in RESIDENT_ROLES and v.alias_of is None
    ]
    resident_bytes = _sum_bytes(residents, sizes)
    last_use = _last_use_steps(graph, schedule)
    frees = _values_freed_after(last_use)
    steps, live_at = _sweep(schedule, sizes, frees, resident_bytes)
    peak_step, candidates = _choose_peak(steps)
    lower_bound, lower_bound_step = _lower_bound(schedule, sizes, resident_bytes)
    live = live_at(peak_step) + residents
    return LivenessResult(
        order=tuple(n.name for n in schedule),
        resident_bytes=resident_bytes,
        live_bytes_per_step=tuple(steps),
        peak_bytes=steps[peak_step],
        peak_candidates=tuple(candidates),
        peak_step=peak_step,
        activation_peak_bytes=steps[peak_step] - resident_bytes,
        breakdown_at_peak=_by_role(live, sizes),
        live_at_peak=_describe_live(live, sizes, last_use, schedule, dims or {}),
        lower_bound_bytes=lower_bound,
        lower_bound_step=lower_bound_step,
        unknown_size_values=tuple(sorted(n for n, size in sizes.items() if size is None)),
    )


def _size(value: Value, sizes: Mapping[str, SymInt | None]) -> SymInt:
    if value.alias_of is not None:
        return SymInt()
    return sizes.get(value.name) or SymInt()


def _sum_bytes(values: Sequence[Value], sizes: Mapping[str, SymInt | None]) -> SymInt:
    return sum((_size(v, sizes) for v in values), SymInt())


def _last_use_steps(graph: Graph, schedule: list[Node]) -> dict[Value, int]:
    """Step after which each activation's storage can be freed, from one reverse walk."""
    end = len(schedule) - 1
    last_use: dict[Value, int] = {}
    for value in graph.outputs:
        _extend(last_use, value.storage, end)
    position = {node: step for step, node in enumerate(schedule)}
    for step in range(end, -1, -1):
        node = schedule[step]
        for value in (*node.present_inputs, *node.outputs):  # unread outputs die at once
            _extend(last_use, value.storage, step)
            if value.held_until is not None and value.held_until in position:
                _extend(last_use, value.storage, position[value.held_until])
    return last_use


def _extend(last_use: dict[Value, int], storage: Value, step: int) -> None:
    if storage.role not in RESIDENT_ROLES:
        last_use[storage] = max(last_use.get(storage, step), step)


def _values_freed_after(last_use: Mapping[Value, int]) -> dict[int, list[Value]]:
    frees: dict[int, list[Value]] = {}
    for value, step in last_use.items():
        frees.setdefault(step, []).append(value)
    return frees


def _sweep(
    schedule: list[Node],
    sizes: Mapping[str, SymInt | None],
    frees: Mapping[int, list[Value]],
    resident_bytes: SymInt,
) -> tuple[list[SymInt], object]:
    """Live total during each step; also a function giving the live activations at a step."""
    live_total = resident_bytes
    steps: list[SymInt] = []
    for step, node in enumerate(schedule):
        live_total = live_total + _sum_bytes(node.outputs, sizes)
        steps.append(live_total)
        live_total = live_total - _sum_bytes(frees.get(step, []), sizes)

    def live_at(target: int) -> list[Value]:
        live: dict[Value, None] = {}
        for step, node in enumerate(schedule[: target + 1]):
            live.update(dict.fromkeys(v for v in node.outputs if v.alias_of is None))
            if step < target:
                for value in frees.get(step, []):
                    live.pop(value, None)
        return list(live)

    return steps, live_at


def _choose_peak(steps: list[SymInt]) -> tuple[int, list[SymInt]]:
    """The peak step; with free dims, the step largest at a probe value among candidates."""
    candidates = symint_max(steps)
    probe = {name: _PROBE_DIM_VALUE for c in candidates for name in c.free_symbols()}
    best = max(candidates, key=lambda c: c.evaluate(probe))
    return steps.index(best), candidates


def _lower_bound(
    schedule: list[Node], sizes: Mapping[str, SymInt | None], resident_bytes: SymInt
) -> tuple[SymInt, int]:
    """No order can do better than the largest node's working set on top of the residents."""
    working_sets = []
    for node in schedule:
        touched = dict.fromkeys(
            v.storage
            for v in (*node.present_inputs, *node.outputs)
            if v.storage.role not in RESIDENT_ROLES
        )
        working_sets.append(resident_bytes + _sum_bytes(list(touched), sizes))
    step, _ = _choose_peak(working_sets)
    return working_sets[step], step


def _by_role(live: list[Value], sizes: Mapping[str, SymInt | None]) -> dict[Role, SymInt]:
    breakdown: dict[Role, SymInt] = {}
    for value in live:
        breakdown[value.role] = breakdown.get(value.role, SymInt()) + _size(value, sizes)
    return breakdown


def _describe_live(
    live: list[Value],
    sizes: Mapping[str, SymInt | None],
    last_use: Mapping[Value, int],
    schedule: list[Node],
    dims: Mapping[str, int],
) -> tuple[LiveTensor, ...]:
    end = len(schedule) - 1
    probe = {name: _PROBE_DIM_VALUE for v in live for name in _size(v, sizes).free_symbols()}
    tensors = [
        LiveTensor(
            name=v.name,
            nbytes=_size(v, sizes),
            role=v.role,
            dtype=v.dtype.label,
            shape=v.shape_text(dims),
            producer=v.producer.name if v.producer else None,
            last_consumer=_keeper(v, last_use, schedule, end),
        )
        for v in live
    ]
    return tuple(sorted(tensors, key=lambda t: (-t.nbytes.evaluate(probe), t.name)))


def _keeper(
    value: Value, last_use: Mapping[Value, int], schedule: list[Node], end: int
) -> str | None:
    step = last_use.get(value)
    if step is None or value.role is Role.OUTPUT or (step == end and value.role in RESIDENT_ROLES):
        return None
    return schedule[step].name
