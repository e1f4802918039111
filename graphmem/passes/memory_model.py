"""A graph's activation buffers, and what each step of an order allocates and frees: the one
memory-event sweep every peak, timeline and allocator replay in graphmem comes from.

Conventions (graphmem/passes/liveness.py states them in the report):
- a buffer is the storage of a non-resident tensor a node makes; views and in-place results
  (`Value.alias_of`, or the aliases a what-if gives) share their base's buffer and allocate
  nothing;
- it is allocated when the node that makes it runs and freed after the last node that keeps
  it alive: every node that reads or writes it (through any alias), its producer (an output
  no node reads dies at once) and the node after which the framework drops it
  (`Value.held_until`);
- graph outputs are never freed; residents (inputs, parameters, buffers, constants) are a
  constant floor under every step.

For an order, `step_events` (graphmem/passes/sweep_events.py) finds every buffer's last use
in one reverse walk over the steps (as torch.fx's interpreter does): walking back from the
end, the first step that meets a buffer is its last use. `live_profile` (integers) and
`symbolic_profile` (polynomials in the free dims, optionally split into groups such as roles)
sweep those events forward.

`MemoryModel` is the integer form the schedulers and the arena planner search on. Its
dependencies are the data edges, plus order edges that keep a node which makes a view or an
in-place result of a storage in its model-order place among the other nodes touching that
storage (an in-place write must not move past a read of the old contents; found in
graphmem/passes/order_edges.py). ONNX graphs have no aliases, so there only data edges
constrain the order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from typing import cast

from graphmem.core.dim_name import Coefficient
from graphmem.core.evaluate import evaluate
from graphmem.core.ir import Graph, Node, Value
from graphmem.core.symbolic import SymInt, sum_sizes, symint_max
from graphmem.passes.buffers import Aliases as Aliases  # re-exported: the liveness's and
from graphmem.passes.buffers import Buffers as Buffers  # the plans' users import them here
from graphmem.passes.buffers import find_buffers as find_buffers
from graphmem.passes.buffers import numbered
from graphmem.passes.buffers import storage_of as storage_of
from graphmem.passes.order_edges import node_predecessors
from graphmem.passes.step_arrays import OrderArrays, by_identity
from graphmem.passes.sweep_events import StepEvents as StepEvents  # re-exported: the sweeps'
from graphmem.passes.sweep_events import (  # users import them here
    constant_totals,
    size_terms,
    symbolic_profile,
)
from graphmem.passes.sweep_events import step_events as step_events

# Free dims are given this value when a plan needs numbers (the same probe liveness uses to
# pick one peak step among candidates that depend on free dims).
PROBE_DIM_VALUE = 64

# ----- the events and the sweeps ---------------------------------------------------------------
def live_profile(model: MemoryModel, order: Sequence[int],
                 events: StepEvents | None = None) -> tuple[list[int], list[int]]:
    """Live bytes (residents included) during each step of `order` and after it (`events`:
    the order's `step_events`, if at hand)."""
    events = events or step_events(model, order)
    sizes, alloc = model.buffer_bytes, model.alloc_bytes
    live = model.resident_bytes
    during: list[int] = []
    after: list[int] = []
    for node, freed in zip(events.order, events.frees, strict=True):
        live += alloc[node]
        during.append(live)
        for buffer in freed:
            live -= sizes[buffer]
        after.append(live)
    return during, after


@dataclass(frozen=True)
class MemorySweep:
    """One order's events with the sizes they are swept at: what liveness sweeps, kept so that
    other views of the same sweep (the role timeline) need no second walk, and the plans no
    second search for the graph's buffers (`buffers`: shared, not copied)."""

    nodes: tuple[Node, ...]  # the graph's nodes, model order
    storages: tuple[Value, ...]  # buffer -> the value owning it
    allocates: tuple[tuple[int, ...], ...]  # node -> buffers it allocates
    residents: tuple[Value, ...]
    events: StepEvents
    buffer_sizes: tuple[SymInt, ...]  # buffer -> bytes (unknown sizes: 0)
    resident_sizes: tuple[SymInt, ...]  # per resident
    # what was swept: the plans reuse the graph's buffers rather than walk it again
    buffers: Buffers | None = dataclasses.field(default=None, repr=False, compare=False)
    # and the sizes by value name it was swept at (the plans' model reads its buffers' and
    # residents' sizes from the sweep where they are given the same mapping)
    sizes: Mapping[str, SymInt | None] | None = dataclasses.field(default=None, repr=False,
                                                                   compare=False)

    @property
    def order(self) -> list[Node]:
        """The nodes in the swept order."""
        return [self.nodes[i] for i in self.events.order]

    def profile(self, start: Sequence[SymInt],
                groups: Sequence[int] | None = None) -> list[tuple[SymInt, ...]]:
        terms = [size_terms(size) for size in self.buffer_sizes]
        return symbolic_profile(self.allocates, terms, self.events, start, groups)

    @cached_property
    def numbers(self) -> list[Coefficient] | None:
        """Each buffer's size as a number where every one is (a bound graph), else None;
        found once per distinct size object (values share them)."""
        distinct = by_identity(self.buffer_sizes)
        if not all(size.is_constant for size in distinct.values()):
            return None
        number = {key: size.constant_term for key, size in distinct.items()}
        return list(map(number.__getitem__, map(id, self.buffer_sizes)))

    @cached_property
    def working_sets(self) -> list[Coefficient] | None:
        """Each node's working set (the bytes of the buffers it touches; node i in the model
        order) as numbers where every size is one, else None: the liveness's lower bound
        and the plans' model read it (`buffers`: the graph's)."""
        numbers, buffers = self.numbers, self.buffers
        if numbers is None or buffers is None:
            return None
        get = numbers.__getitem__
        return [sum(map(get, touched)) for touched in buffers.touches]

    @cached_property
    def totals(self) -> list[Coefficient] | None:
        """`profile((residents,))`'s totals as numbers where every size is one, else None:
        swept once for the liveness and the plans of the same order."""
        numbers, start = self.numbers, sum_sizes(self.resident_sizes)
        if numbers is None or not start.is_constant:
            return None
        return constant_totals(self.allocates, numbers, self.events, start.constant_term)


def sweep_buffers(buffers: Buffers, sizes: Mapping[str, SymInt | None],
                  order: Sequence[Node] | None = None) -> MemorySweep:
    """The events of running `order` (default: the model's order), `sizes` by value name."""
    steps = buffers.steps(order) if order is not None else range(len(buffers.nodes))
    return MemorySweep(buffers.nodes, buffers.storages, buffers.allocates, buffers.residents,
                       step_events(buffers, steps), _sizes_or_zero(sizes, buffers.storages),
                       _sizes_or_zero(sizes, buffers.residents), buffers, sizes)


def _sizes_or_zero(sizes: Mapping[str, SymInt | None], values: Sequence[Value]
                   ) -> tuple[SymInt, ...]:
    """Each value's size by name, an unknown one 0 (one zero object: sizes are immutable)."""
    zero = SymInt()
    return tuple(size if size is not None else zero
                 for size in map(sizes.get, map(_NAME, values)))


# ----- the integer model ------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryModel:
    """Integer view of a graph's activations over its nodes (indices are model order)."""

    node_names: tuple[str, ...]
    resident_bytes: int
    buffer_names: tuple[str, ...]
    buffer_bytes: tuple[int, ...]
    producer: tuple[int, ...]  # buffer -> the node that allocates it
    users: tuple[tuple[int, ...], ...]  # buffer -> nodes that keep it alive (producer included)
    pinned: tuple[bool, ...]  # buffer -> a graph output: never freed
    allocates: tuple[tuple[int, ...], ...]  # node -> buffers it allocates
    uses: tuple[tuple[int, ...], ...]  # node -> buffers it keeps alive (distinct)
    predecessors: tuple[tuple[int, ...], ...]  # node -> nodes that must run before it
    dims: dict[str, int]  # the dim values the sizes were evaluated at
    # residents + the largest node's own inputs and outputs: no order peaks lower
    lower_bound_bytes: int = 0
    resident_names: tuple[str, ...] = ()
    # the model order's events where a liveness already swept these buffers (not part of the
    # model's value: `model_order_sweep` finds them where this is None)
    swept_events: StepEvents | None = dataclasses.field(default=None, repr=False,
                                                        compare=False)
    # and the live totals during its steps, where it swept these integers
    swept_totals: Sequence[int] | None = dataclasses.field(default=None, repr=False,
                                                           compare=False)

    @property
    def node_count(self) -> int:
        return len(self.node_names)

    @cached_property
    def model_order_sweep(self) -> tuple[StepEvents, Sequence[int]]:
        """The model order's events and the live bytes during each of its steps, found once
        per model: the order search starts from that order and the arena plans it (read
        only)."""
        events = self.swept_events or step_events(self, range(self.node_count))
        if self.swept_totals is not None:
            return events, self.swept_totals
        return events, live_profile(self, events.order, events)[0]

    @cached_property
    def alloc_bytes(self) -> list[int]:
        """Bytes each node allocates (read only: computed once per model)."""
        sizes = self.buffer_bytes
        return [sum(sizes[b] for b in buffers) for buffers in self.allocates]

    def successors(self) -> list[list[int]]:
        return [list(after) for after in self._successors]

    @property
    def successor_lists(self) -> tuple[tuple[int, ...], ...]:
        """`successors()` as the model keeps them (read only: no copies made)."""
        return self._successors

    @cached_property
    def _successors(self) -> tuple[tuple[int, ...], ...]:
        # every greedy key walks the same successors: found once per model
        result: list[list[int]] = [[] for _ in self.node_names]
        for node, preds in enumerate(self.predecessors):
            for pred in preds:
                result[pred].append(node)
        return tuple(tuple(after) for after in result)


def plan_dims(graph: Graph, bound: Mapping[str, int],
              free: frozenset[str] | None = None) -> dict[str, int]:
    """The bound dims, and every free dim of the graph (`free`, if known) at the probe."""
    # sorted: a frozenset's order follows the string hash seed, and the JSON lists these dims
    dims = {name: PROBE_DIM_VALUE for name in sorted(graph.free_dims() if free is None else free)}
    dims.update(bound)
    return dims


def build_memory_model(
    graph: Graph, sizes: Mapping[str, SymInt | None], dims: Mapping[str, int],
    swept: MemorySweep | None = None,
) -> MemoryModel:
    """The integer model of `graph` with every size evaluated at `dims` (all dims bound);
    `swept`: a liveness's sweep, whose buffers are reused where they are the graph's own
    (checked, else found again), and its events and totals where it swept the model order
    at these sizes."""
    buffers = swept.buffers if swept is not None else None
    if buffers is None or not buffers.of_graph(graph):
        buffers = find_buffers(graph)
    if swept is not None and (swept.buffers is not buffers or not in_model_order(swept.events)):
        swept = None  # another order's, or another graph's: its events and totals are not kept
    buffer_names = tuple(map(_NAME, buffers.storages))
    # the sweep's sizes are these names' (an unknown one its zero: evaluated to 0, as None)
    reuse = swept is not None and swept.sizes is sizes
    nbytes = _numbers(list(swept.buffer_sizes) if swept is not None and reuse
                      else list(map(sizes.get, buffer_names)), dims)
    users: list[list[int]] = [[] for _ in buffers.storages]
    for node, kept in enumerate(buffers.uses):
        for buffer in kept:
            users[buffer].append(node)
    resident_names = tuple(map(_NAME, buffers.residents))
    resident_bytes = sum(_numbers(list(swept.resident_sizes) if swept is not None and reuse
                                  else list(map(sizes.get, resident_names)), dims))
    totals = _same_totals(swept, nbytes, resident_bytes) if swept is not None else None
    # where the sweep's numbers are these integers (totals found), so are its working sets
    working_sets: Iterable[int] | None = (
        cast(list[int], swept.working_sets) if swept is not None and totals is not None
        else None)
    if working_sets is None:
        get = nbytes.__getitem__
        working_sets = (sum(map(get, touched)) for touched in buffers.touches)
    return MemoryModel(
        node_names=tuple(map(_NAME, buffers.nodes)),
        resident_bytes=resident_bytes,
        buffer_names=buffer_names,
        buffer_bytes=tuple(nbytes),
        producer=buffers.producer,
        users=tuple(tuple(u) for u in users),
        pinned=buffers.pinned,
        allocates=buffers.allocates,
        uses=buffers.uses,
        predecessors=(buffers.predecessors if buffers.predecessors is not None
                      else node_predecessors(buffers.nodes, numbered(buffers.nodes))),
        dims=dict(dims),
        lower_bound_bytes=resident_bytes + max(working_sets, default=0),
        resident_names=resident_names,
        swept_events=swept.events if swept is not None else None,
        swept_totals=totals,
    )


def _same_totals(swept: MemorySweep, nbytes: list[int], resident_bytes: int
                 ) -> Sequence[int] | None:
    """The sweep's totals where it swept these very numbers (a bound graph: every size the
    integer the model evaluates it to, the residents' total too), else None."""
    totals, numbers = swept.totals, swept.numbers
    if totals is None or numbers != nbytes or sum_sizes(swept.resident_sizes) != resident_bytes:
        return None
    return cast(Sequence[int], totals)  # equal to the model's integers


_NAME = attrgetter("name")


def _numbers(sizes: list[SymInt | None], dims: Mapping[str, int]) -> list[int]:
    """`size_at` of each size, each distinct object evaluated once (a graph's values share
    a few hundred size objects: `Value.nbytes`, `value_bytes`)."""
    number = {key: size_at(size, dims) for key, size in by_identity(sizes).items()}
    return list(map(number.__getitem__, map(id, sizes)))


def in_model_order(events: StepEvents) -> bool:
    """True when `events` are of the model order (node i at step i)."""
    order = events.order
    return order == tuple(range(len(order)))


def size_at(size: SymInt | None, dims: Mapping[str, int]) -> int:
    """`size` evaluated at `dims` (0: unknown); a number as it is (most sizes of a bound
    graph are: compiling each to evaluate it was most of a rebind)."""
    if size is None:
        return 0
    return int(size) if size.is_constant else evaluate(size, dims)


def rebind(model: MemoryModel, sizes: Mapping[str, SymInt | None],
           dims: Mapping[str, int]) -> MemoryModel:
    """The same graph with its sizes evaluated at other dims (the structure is reused)."""

    # a graph's sizes are a few hundred distinct polynomials: each is evaluated once
    memo: dict[SymInt, int] = {}

    def size(name: str) -> int:
        value = sizes.get(name)
        if value is None or value.is_constant:
            return size_at(value, dims)
        number = memo.get(value)
        if number is None:
            number = memo[value] = evaluate(value, dims)
        return number

    return dataclasses.replace(
        model,
        resident_bytes=sum(size(name) for name in model.resident_names),
        buffer_bytes=tuple(size(name) for name in model.buffer_names),
        dims=dict(dims),
        lower_bound_bytes=0,  # not recomputed: no search runs on a rebound model
    )


def resident_sizes(model: MemoryModel, sizes: Mapping[str, SymInt | None]) -> SymInt:
    return sum((sizes.get(name) or SymInt() for name in model.resident_names), SymInt())


# ----- what an order costs ----------------------------------------------------------------------
def order_peak(model: MemoryModel, order: Sequence[int]) -> tuple[int, int]:
    """(peak bytes including residents, first step at the peak) of running `order`."""
    events = step_events(model, order)
    if not events.order:
        return -1, 0
    # live_profile's sweep, keeping only the running maximum (the schedulers call this per
    # candidate order)
    sizes, alloc = model.buffer_bytes, model.alloc_bytes
    live = model.resident_bytes
    peak, peak_step = -1, 0
    for step, (node, freed) in enumerate(zip(events.order, events.frees, strict=True)):
        live += alloc[node]
        if live > peak:
            peak, peak_step = live, step
        for buffer in freed:
            live -= sizes[buffer]
    return peak, peak_step


def symbolic_order_peak(model: MemoryModel, order: Sequence[int],
                        sizes: Mapping[str, SymInt | None], resident_bytes: SymInt,
                        probe: Mapping[str, int], arrays: OrderArrays | None = None
                        ) -> tuple[SymInt, tuple[SymInt, ...]]:
    """The peak of `order` as polynomials in the free dims: (the one largest at `probe`,
    every step total no other dominates), as `analyze_liveness` states them. `arrays`: the
    order's sweep as prefix sums, if at hand (graphmem/passes/step_arrays.py)."""
    events = step_events(model, order) if arrays is None else None
    if events is not None:
        arrays = OrderArrays(model.allocates, events,
                             [sizes.get(name) for name in model.buffer_names], ())
    assert arrays is not None
    candidates = arrays.candidates(resident_bytes)
    if candidates is None:  # fractional or huge coefficients: swept as polynomials
        terms = [size_terms(sizes.get(name)) for name in model.buffer_names]
        events = events or step_events(model, order)
        profile = symbolic_profile(model.allocates, terms, events, (resident_bytes,))
        candidates = symint_max(s[0] for s in profile)
    peak = max(candidates, key=lambda c: evaluate(c, probe))
    return peak, tuple(candidates)


def lifetimes(model: MemoryModel, order: Sequence[int],
              events: StepEvents | None = None) -> list[tuple[int, int]]:
    """(first step, last step) of every buffer in `order`; pinned buffers last to the end
    (`events`: the order's `step_events`, if at hand)."""
    events = events or step_events(model, order)
    steps = events.order
    if in_model_order(events):  # node i runs at step i: a buffer starts at its producer
        firsts: Iterable[int] = model.producer
    else:  # node -> its step: the inverse permutation, sorting the steps by the node each runs
        position = sorted(range(len(steps)), key=steps.__getitem__)
        firsts = map(position.__getitem__, model.producer)
    return [(first, last if last > first else first)
            for first, last in zip(firsts, events.last_step, strict=True)]


def is_topological(model: MemoryModel, order: Sequence[int]) -> bool:
    """True when `order` runs every node once, each after all its predecessors."""
    in_order = list(range(model.node_count))
    if list(order) == in_order:  # node i at step i: each node's predecessors before it
        return all(not before or max(before) < node
                   for node, before in enumerate(model.predecessors))
    if sorted(order) != in_order:
        return False
    # node -> its step: the inverse permutation, sorting the steps by the node each runs
    position = sorted(range(len(order)), key=order.__getitem__)
    return all(
        position[pred] < step
        for step, preds in zip(position, model.predecessors, strict=True)
        for pred in preds
    )
