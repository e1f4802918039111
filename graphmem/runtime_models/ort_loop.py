"""What onnxruntime's CPU `Loop`, `Scan` and `If` kernels hold while they run, as arena
allocations in order.

graphmem's IR gives a control-flow node its bodies' own peak as one transient output
(`<node>::body_scratch`, graphmem/ops/control_flow.py). onnxruntime's Loop holds more, and not
as one block. Read in onnxruntime's source (core/providers/cpu/controlflow/loop.cc `LoopImpl`,
scan_9.cc, scan_utils.cc, if.cc, core/framework/utils.cc `ExecuteSubgraph`,
execution_frame.cc, mem_pattern_planner.h) and measured on 1.31.1 (tests/test_ort_loop.py):

- `Initialize` takes the iteration number (int64) and the condition (bool) from the CPU
  arena: two allocations of 8 and 1 bytes (256 each after the arena's rounding), held until
  the kernel returns.
- Each iteration runs the body's own session: its plan (the same planner as the graph's,
  graphmem/runtime_models/ort_plan.py) allocates the body's intermediates as it goes and frees
  each after its last reader. The body's outputs are fetched with no preallocated buffer, so
  each is an allocation of its own, held past the iteration, except an `Identity` of a body
  input or an outer value (the planner reuses that buffer: measured, the condition passed on
  as `Identity(cond)` takes no memory); a body constant returned as an output is copied.
- From the second iteration on, the body's frame finds the memory pattern its first run
  traced (same feed shapes) and takes the intermediates as one block: the pattern's peak,
  each tensor's offset found by `MemPatternPlanner::TraceAllocation` (best fit between the
  live blocks, else after the last), sizes aligned to 256 bytes (`kAllocAlignment`); the
  block is freed when the iteration's frame ends. The outputs stay separate allocations.
- `SaveOutputsAndUpdateFeeds`: an iteration's condition and loop-carried outputs become the
  next iteration's feeds, so the previous iteration's are freed only when the next one has
  finished (two generations of loop state live at once); every iteration's scan outputs
  are kept until the end.
- After the last iteration the Loop's own outputs are allocated (the final state copied, each
  scan output concatenated over the iterations) while all of that is still held; it is
  freed when the kernel returns.
- Scan (opset 9 on) allocates its outputs first and has the body write into them: each scan
  output's slice, the loop state into two buffers of its size taken in turn
  (`LoopStateVariable`'s a with more than one iteration, b with more than two); the body's
  intermediates as a Loop's. If fetches its branch's outputs into its own and runs the
  branch's plan once, one tensor at a time; the data picks the branch, the one that holds
  more is taken (an upper bound).

The node's `::body_scratch` then stands for nothing onnxruntime allocates: the estimate sizes
it 0 where this model replaces it (`without_body_scratch`). Not modelled: a kernel's own
scratch inside a body (a Conv in a Loop body), a nested node's bodies beyond their one block
(each allocated and freed at its step), a `cond` that stops the loop before `M` (every one of
`M` iterations is counted: an upper bound), a Loop without `M` or whose trip count the data
gives and `--dim` leaves free (frontends/onnx/control_flow.py `data_trip_dim`; bound, it is
planned at that count: for a Loop in a body whose M is the outer iteration number, the
largest count per outer iteration, an upper bound), opset 8's
Scan (those keep the body's peak as one block); ort-cuda's control flow (the same there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from graphmem.core.ir import Graph, Node, Role, Value
from graphmem.core.ort_view import PlanShape
from graphmem.ops.control_flow import BODY_SCRATCH_SUFFIX, ControlFlowNode, own_input_count
from graphmem.runtime_models.graph_cache import cached_per_graph
from graphmem.runtime_models.ort_kernels import ALIAS_OPS, KernelScratch, kernel_scratch
from graphmem.runtime_models.ort_plan import make_layout, plan_shape_from_ir

ITERATION_NUMBER_BYTES = 8  # int64 iteration number (LoopImpl::Initialize, MakeScalarMLValue)
CONDITION_BYTES = 1  # bool condition
PATTERN_ALIGNMENT = 256  # kAllocAlignment: each tensor's size in a memory pattern
# a Loop of more events than this (2 per allocation, counted before they are made) keeps the
# body's peak as one block: every iteration's events are replayed one by one, and a whole
# `--runtime ort-cpu` analysis measured 3 to 4 us an event (the `m3` Loop at 10^4 to 3*10^5
# iterations, 5 events each: 0.17 s at 5*10^4 events, 1.5 s at 5*10^5, 6.2 s at 1.5*10^6;
# `python benchmarks/ort_loops.py --events`): this bound keeps a Loop under about 1 s (`m3`,
# counted at 8 events an iteration, is modelled up to 31,250 iterations, about 0.5 s)
MAX_LOOP_EVENTS = 250_000


def cpu_kernel_scratch(node: Node, threads: int, bound: Mapping[str, int]) -> KernelScratch:
    """`kernel_scratch`, with a Loop's iterations where they can be sized (`loop_scratch`)."""
    if node.op_type in _BY_OP and node.domain in ("", "ai.onnx") \
            and isinstance(node, ControlFlowNode):
        found = _BY_OP[node.op_type](node, bound)
        if found is not None:
            return found
    return kernel_scratch(node, threads, bound)


def _by_op() -> dict[str, Callable[[ControlFlowNode, Mapping[str, int]], KernelScratch | None]]:
    return {"Loop": loop_scratch, "Scan": scan_scratch, "If": if_scratch}


def without_body_scratch(sizes: Sequence[int], replaced: Iterable[int]) -> Sequence[int]:
    """The plan's buffer sizes with 0 for each `replaced` buffer: the `::body_scratch` of a
    node whose kernel's allocations stand for its bodies (`KernelScratch.replaces_body`);
    `sizes` itself where there is none."""
    sized: list[int] | None = None
    for buffer in replaced:
        sized = list(sizes) if sized is None else sized
        sized[buffer] = 0
    return sizes if sized is None else sized


@dataclass
class _Events:
    """Allocations in order, each with the earlier ones freed right after it."""

    sizes: list[int] = field(default_factory=list)
    frees: list[list[int]] = field(default_factory=list)

    def allocate(self, size: int) -> int:
        self.sizes.append(size)
        self.frees.append([])
        return len(self.sizes) - 1

    def free(self, numbers: Sequence[int]) -> None:
        if numbers:  # each freed after the latest allocation (there is one: its own)
            self.frees[-1].extend(numbers)

    def scratch(self, outputs_first: bool = False) -> KernelScratch:
        """The kernel's scratch, the node's outputs after it (`outputs_first`: before)."""
        return KernelScratch(tuple(self.sizes), before_outputs=not outputs_first,
                             frees_after=tuple(tuple(f) for f in self.frees),
                             replaces_body=True)


@dataclass(frozen=True)
class _Body:
    """One iteration of a body as onnxruntime's plan runs it: what the bound dims do not
    change (made once per body), then its sizes at the bound dims (`_sized_body`)."""

    steps: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]  # per step: made, freed
    buffers: tuple[Value, ...]  # per buffer, the value whose size it has
    outputs: tuple[int | None, ...]  # per body output, its buffer (None: takes none)
    single: frozenset[int]  # buffers allocated and freed at their step in every iteration
    sizes: tuple[int, ...] = ()  # per buffer, bytes at the bound dims
    pattern_bytes: int = 0  # the block later iterations take for the intermediates


def loop_scratch(node: ControlFlowNode, bound: Mapping[str, int]) -> KernelScratch | None:
    """The Loop's allocations at the bound dims (the module's docstring), the node's outputs
    after them; None where the trip count or a body tensor's size is not a number."""
    if len(node.bodies) != 1 or node.trip_count is None:
        return None
    trips = node.trip_count.bind(bound)
    body = _sized_body(node.bodies[0][1], bound)
    if not trips.is_constant or body is None:
        return None
    carried = max(own_input_count(node, node.bodies[0][1]) - 2, 0)
    per_iteration = 2 * (len(body.outputs) + len(body.single)) + 2
    if int(trips) * per_iteration > MAX_LOOP_EVENTS:
        return None
    events = _Events()
    events.allocate(ITERATION_NUMBER_BYTES)
    held = [events.allocate(CONDITION_BYTES)]  # the state the first iteration reads
    condition_passed_on = body.outputs[0] is None
    count = max(int(trips), 0)
    for iteration in range(count):
        outputs = _iteration(events, body, first=iteration == 0)
        if iteration + 1 < count and (iteration > 0 or not condition_passed_on):
            events.free(held)  # the feeds this iteration read, replaced by its outputs
        held = [n for n in outputs[: 1 + carried] if n is not None]
    return events.scratch()


def scan_scratch(node: ControlFlowNode, bound: Mapping[str, int]) -> KernelScratch | None:
    """Scan (opset 9 on, scan_9.cc): its outputs allocated first, the body's outputs written
    into them (each scan output's slice, the loop state into two buffers of its size taken
    in turn, `LoopStateVariable`'s a (more than one iteration) and b (more than two)); each
    iteration's intermediates as a Loop body's. None where a size is not a number."""
    if len(node.bodies) != 1 or node.trip_count is None or node.bodies[0][1].opset < 9:
        return None  # opset 8's Scan loops over a batch axis too
    trips = node.trip_count.bind(bound)
    body_graph = node.bodies[0][1]
    body = _sized_body(body_graph, bound)
    if not trips.is_constant or body is None:
        return None
    count = max(int(trips), 0)
    if count * (2 * len(body.single) + 2) > MAX_LOOP_EVENTS:
        return None
    scanned = node.attr_int("num_scan_inputs", 1)
    states = max(own_input_count(node, body_graph) - scanned, 0)
    events = _Events()
    for value in body_graph.outputs[:states]:
        size = _bound_bytes(value, bound)
        if size is None:
            return None
        for _ in range(min(max(count - 1, 0), 2)):  # a, then b
            events.allocate(size)
    for iteration in range(count):
        _iteration(events, body, first=iteration == 0, own_outputs=False)
    return events.scratch(outputs_first=True)


def if_scratch(node: ControlFlowNode, bound: Mapping[str, int]) -> KernelScratch | None:
    """If (if.cc): the branch's outputs are the node's (fetched into them), its
    intermediates allocated one by one as its plan says, once (no earlier run traced a
    pattern). The data picks the branch: the one that holds more at once is taken (the
    larger, an upper bound). None where a size is not a number."""
    found = []
    for _, graph in node.bodies:
        if not _makes_intermediates(graph):  # its outputs are the node's: nothing more
            continue
        body = _sized_body(graph, bound)
        if body is None:
            return None
        events = _Events()
        _iteration(events, body, first=True, own_outputs=False)
        found.append(events.scratch(outputs_first=True))
    return max(found, key=lambda scratch: scratch.held_bytes, default=None)


def _iteration(events: _Events, body: _Body, first: bool,
               own_outputs: bool = True) -> list[int | None]:
    """One run of the body: its allocations and frees; the numbers of its outputs
    (`own_outputs` False: written into the node's, none of their own)."""
    number: dict[int, int] = {}
    block = None if first or not body.pattern_bytes else events.allocate(body.pattern_bytes)
    outputs = {b for b in body.outputs if b is not None}
    for made, freed in body.steps:
        for b in made:
            if b in outputs and not own_outputs:
                continue
            if first or b in outputs or b in body.single:
                number[b] = events.allocate(body.sizes[b])
        events.free([number.pop(b) for b in freed if b in number])
    if block is not None:
        events.free([block])
    return [number.get(b) if b is not None else None for b in body.outputs]


_BODY_PLAN = object()  # graph_cache's key for `_body_plan`


def _sized_body(body: Graph, bound: Mapping[str, int]) -> _Body | None:
    """The body's plan at the bound dims; None where a tensor it allocates has no size."""
    plan = cached_per_graph(body, (_BODY_PLAN,), lambda: _body_plan(body))
    sizes: list[int] = []
    for value in plan.buffers:
        size = _bound_bytes(value, bound)
        if size is None:
            return None
        sizes.append(size)
    kept = {b for b in plan.outputs if b is not None}
    pattern = _pattern_bytes(plan.steps, sizes, kept | plan.single)
    return replace(plan, sizes=tuple(sizes), pattern_bytes=pattern)


def _body_plan(body: Graph) -> _Body:
    """The body's buffers and their steps as onnxruntime's planner makes them."""
    layout = make_layout(body, _plan_shapes(body), None)
    buffers = [value for value, _, _, _ in layout.buffers]
    index = {id(value): b for b, value in enumerate(buffers)}
    storage = layout.storage
    owners = {value.name: value for value in buffers}
    outputs: list[int | None] = []
    copies: list[int] = []  # the outputs that are the body's constants: a copy each run
    for value in body.outputs:
        if value.producer is None and value.role is not Role.INPUT:
            copies.append(len(buffers))
            buffers.append(value)
            outputs.append(copies[-1])
        else:
            outputs.append(_output_buffer(value, storage, owners, index))
    kept = {b for b in outputs if b is not None}
    single = frozenset(b for b, (value, _, _, _) in enumerate(layout.buffers)
                       if value.name.endswith(BODY_SCRATCH_SUFFIX))
    made: list[list[int]] = [copies] + [[] for _ in layout.order]
    freed: list[list[int]] = [[] for _ in made]
    for b, (value, first, last, _) in enumerate(layout.buffers):
        if _passed_on(value):
            continue
        made[first + 1].append(b)
        if b not in kept:
            freed[first + 1 if b in single else last + 1].append(b)
    steps = tuple((tuple(m), tuple(f)) for m, f in zip(made, freed, strict=True))
    return _Body(steps, tuple(buffers), tuple(outputs), single)


def _makes_intermediates(body: Graph) -> bool:
    """Whether the body makes a tensor that is not one of its outputs."""
    outputs = {id(v) for v in body.outputs}
    return any(id(v) not in outputs for node in body.nodes for v in node.outputs)


def _bound_bytes(value: Value, bound: Mapping[str, int]) -> int | None:
    size = value.nbytes
    bound_size = size.bind(bound) if size is not None else None
    return int(bound_size) if bound_size is not None and bound_size.is_constant else None


def _plan_shapes(body: Graph) -> dict[str, PlanShape | None]:
    """The shapes onnxruntime's planner sees in the body: graphmem's, where a dim named by no
    tensor the body reads (one its inference made up for a size the data sets, such as a
    Slice of computed bounds) is unknown, as onnx's inference at session creation leaves it
    (so such a tensor is never written in place nor reused)."""
    shapes = {name: plan_shape_from_ir(value) for name, value in body.values.items()}
    read = {dim for value in body.values.values() if value.producer is None
            for dim in shapes[value.name] or () if isinstance(dim, str)}
    return {name: tuple(d if not isinstance(d, str) or d in read else None for d in shape)
            if shape is not None and body.values[name].producer is not None else shape
            for name, shape in shapes.items()}


def _output_buffer(value: Value, storage: Mapping[str, str], owners: Mapping[str, Value],
                   index: Mapping[int, int]) -> int | None:
    """The buffer a body output takes; None where it takes none (an input passed on)."""
    if _passed_on(value):
        return None
    owner = owners.get(storage.get(value.name, ""))
    return index.get(id(owner)) if owner is not None else None


def _passed_on(value: Value) -> bool:
    """An output made by a view (Identity, Reshape...) of a body input or an outer value:
    onnxruntime's planner gives it that buffer, so the body allocates nothing for it."""
    seen = 0
    while value.producer is not None and seen < 64:
        node = value.producer
        if node.op_type not in ALIAS_OPS or not node.inputs or node.inputs[0] is None:
            return False
        value = node.inputs[0]
        seen += 1
    return value.producer is None and seen > 0


def _pattern_bytes(steps: Sequence[tuple[Sequence[int], Sequence[int]]], sizes: Sequence[int],
                   excluded: set[int] | frozenset[int]) -> int:
    """The memory pattern's peak over the body's intermediates: `MemPatternPlanner`'s
    offsets (best fit among the gaps between live blocks sorted by offset, else after the
    last one), each size aligned to 256 bytes."""
    live: list[tuple[int, int, int]] = []  # (offset, size, buffer), sorted by offset
    peak = 0
    for made, freed in steps:
        for b in made:
            if b in excluded or sizes[b] == 0:
                continue
            size = -(-sizes[b] // PATTERN_ALIGNMENT) * PATTERN_ALIGNMENT
            offset, at = _best_fit(live, size)
            live.insert(at, (offset, size, b))
            peak = max(peak, offset + size)
        gone = set(freed)
        live = [entry for entry in live if entry[2] not in gone]
    return peak


def _best_fit(live: Sequence[tuple[int, int, int]], size: int) -> tuple[int, int]:
    """(offset, place in `live`) for a new block of `size` (TraceAllocation)."""
    best_offset = live[-1][0] + live[-1][1] if live else 0
    best_at, waste, current = len(live), None, 0
    for at, (offset, length, _) in enumerate(live):
        if offset >= current:
            gap = offset - current
            if gap >= size and (waste is None or gap - size < waste):
                best_at, waste, best_offset = at, gap - size, current
        current = offset + length
    return best_offset, best_at


_BY_OP = _by_op()  # the ops whose kernel's allocations are modelled here
