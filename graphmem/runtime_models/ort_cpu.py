"""onnxruntime's memory on CPU: its execution order, its allocation plan, its arena.

Predicts what onnxruntime's profiler reports as `mem_in_use_peak` (and `mem_arena_held`) over
one run of a fresh session, from graphmem's IR: the weights onnxruntime puts in its arena at
session creation (graphmem/runtime_models/ort_kernels.py) plus the run's own peak. How onnxruntime
1.31 allocates, read in its source and checked by measuring (README "Runtime model:
onnxruntime"):

- Order: the session runs the nodes in `GraphViewer`'s order, a reverse depth-first walk from
  the leaf nodes (nodes no other node consumes) towards the inputs, the producers of a node's
  inputs pushed on the stack in ascending node index (so the highest is visited first), each
  node emitted when its inputs are done (`Graph::ReverseDFSFrom`, core/graph/graph.cc; the
  order was checked against the profiles of every sample).
- Plan (`PlannerImpl::ComputeSingleStreamReusePlan`, core/framework/allocation_planner.cc),
  per node in that order, per output: a graph output gets its own buffer, held to the end; a
  kernel that aliases its input (Reshape, Squeeze, Unsqueeze, Flatten, Identity) uses that
  input's buffer; a kernel that may run in place (Relu, Sigmoid, Softmax, Clip...) uses its
  input's buffer when this is the buffer's last use and both shapes are the same
  (`SameSize`); else a freed buffer is taken from the free list, most recently freed first,
  when its shape equals the output's dim by dim (`FindReusableTensor`), but never for a
  tensor nothing reads (measured: it gets its own); else a new buffer.
  Shapes are those onnxruntime infers at session creation (graphmem/frontends/onnx/
  ort_plan_shapes.py): a tensor whose shape it does not know is never reused or reused into.
- Release (`GenerateDeallocationPlan`): a buffer is freed after the last node that reads any
  tensor sharing it. Reuse from the free list therefore holds a buffer from its first tensor
  to its last one, through the gap between them: a dead buffer waiting for a same-shaped
  tensor, often a whole layer later, is memory the arena counts. An output nothing reads is
  freed only at the end of the run.
- Arena: the allocations and frees replayed through onnxruntime's BFC arena (bfc_arena.py:
  256-byte rounding, chunks handed out whole below twice the request, regions by its strategy).
- Scratch: what Conv, Where, BiasGelu, Einsum, GRU, LSTM and RNN allocate while they run
  (ort_kernels.py, ort_einsum.py, ort_rnn.py).

Graph optimizations: the planner runs on whichever graph it is given. For the level a user's
session runs (ORT_ENABLE_ALL by default) graphmem/frontends/onnx/ort_optimized.py asks onnxruntime
for the optimized graph (saved with `optimized_model_filepath`), whose node list is the order
the optimized session runs; contrib kernels that write in place are in ort_kernels.py.

The order and the plan are walked over value numbers in ort_plan.py (made once per graph and
plan shapes, graph_cache.py); this module sizes the plan's buffers and replays them.

Not modelled: the memory pattern of later runs with the same shapes (one pre-planned block), and
the parallel executor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import NamedTuple

import numpy as np

from graphmem.core.ir import Graph, Node, Value
from graphmem.core.ort_view import PlanShape
from graphmem.core.symbolic import SymInt
from graphmem.core.units import count_noun
from graphmem.ops.control_flow import BODY_SCRATCH_SUFFIX
from graphmem.runtime_models.base import Runtime, RuntimeEstimate
from graphmem.runtime_models.bfc_arena import (
    ArenaEvent,
    ArenaExtend,
    ArenaFailure,
    ArenaResult,
)
from graphmem.runtime_models.bfc_cycles import MIN_EVENTS, EventShape
from graphmem.runtime_models.bfc_replay import replay_numbered
from graphmem.runtime_models.graph_cache import cached_per_graph
from graphmem.runtime_models.ort_kernels import (
    NO_SCRATCH,
    SCRATCH_OPS,
    KernelScratch,
    arena_weights_bytes,
    creation_peak_note,
    may_take_scratch,
    session_creation_peak_bytes,
    unmeasured_scratch_ops,
)
from graphmem.runtime_models.ort_loop import cpu_kernel_scratch, without_body_scratch
from graphmem.runtime_models.ort_plan import PlanLayout
from graphmem.runtime_models.ort_plan import make_layout as _make_layout
from graphmem.runtime_models.ort_plan import ort_execution_order as ort_execution_order
from graphmem.runtime_models.value_sizes import ValueSizes


class OrtBuffer(NamedTuple):
    """One allocation of onnxruntime's plan: the tensor that first holds it and its life."""

    owner: Value
    size_bytes: int
    first_step: int  # index in the execution order of the node that allocates it
    last_step: int  # the node after which it is freed (the last step: held to the end)
    kind: str  # "planned" | "output" (a graph output, held to the end)


class EventSteps(NamedTuple):
    """A plan's buffers as numbers (their places in the layout) and its arena events without
    sizes: per step, the buffers it allocates, then the plan's frees after it (`~number`).
    The bound dims change none of it: made once per plan layout, every probed batch brings
    only the buffers' sizes (`replay_numbered`)."""

    names: tuple[str, ...]  # per buffer, its owner's name (the arena's key)
    positions: tuple[int, ...]  # per buffer, its owner's place in `graph.values`
    events: list[list[int]]  # per step: the buffers it allocates, then those freed as ~number
    kernel_nodes: tuple[int, ...]  # the steps whose kernel may take scratch
    body_scratch: dict[int, int]  # per control-flow step, the buffer its ::body_scratch owns
    first: np.ndarray  # per buffer, the step allocating it
    last: np.ndarray  # ... and the step after which it is freed
    shape: EventShape | None  # the events' positions, for the replay's jumps (None: too few)


def event_steps(layout: PlanLayout) -> EventSteps:
    """The layout's buffers as events over its steps, in buffer order within a step."""
    events: list[list[int]] = [[] for _ in layout.order]
    buffers = layout.buffers
    for index, (_, first, _, _) in enumerate(buffers):
        events[first].append(index)
    for index, (_, _, last, _) in enumerate(buffers):
        events[last].append(~index)
    kernel_nodes = tuple(step for step, node in enumerate(layout.order)
                         if (node.op_type in SCRATCH_OPS or node.domain == "com.microsoft")
                         and may_take_scratch(node))
    body_scratch = {first: index for index, (value, first, _, _) in enumerate(buffers)
                    if value.name.endswith(BODY_SCRATCH_SUFFIX)}
    return EventSteps(tuple([value.name for value, _, _, _ in buffers]), layout.positions,
                      events, kernel_nodes, body_scratch,
                      np.array([first for _, first, _, _ in buffers], np.int64),
                      np.array([last for _, _, last, _ in buffers], np.int64),
                      EventShape(events) if 2 * len(buffers) >= MIN_EVENTS else None)


def kernel_scratches(plan: OrtPlan, scratch_of: Callable[[Node], KernelScratch]
                     ) -> tuple[list[KernelScratch], list[int]]:
    """Per step, its kernel's scratch (`scratch_of` asked only where the kernel may take
    some: `may_take_scratch`), and the steps that do take some."""
    order, nodes = plan.order, plan.steps.kernel_nodes
    scratch = [NO_SCRATCH] * len(order)
    for step in nodes:
        scratch[step] = scratch_of(order[step])
    return scratch, [step for step in nodes if scratch[step].sizes_bytes]


@dataclass(frozen=True)
class OrtPlan:
    """The layout (order, storage, each buffer's steps) and each buffer's bytes at the dims."""

    layout: PlanLayout
    steps: EventSteps = field(compare=False, repr=False)
    sizes: Sequence[int]  # per buffer (EventSteps' numbers): bytes, 0 where not a number

    @property
    def order(self) -> tuple[Node, ...]:
        return self.layout.order

    @property
    def storage(self) -> dict[str, str]:  # value name -> name of the value owning its buffer
        return self.layout.storage

    @property
    def inplace_count(self) -> int:  # outputs written over their input (MayInplace)
        return self.layout.counts[0]

    @property
    def alias_count(self) -> int:  # outputs that are views of their input (Alias)
        return self.layout.counts[1]

    @property
    def reused_count(self) -> int:  # outputs placed in a freed buffer of the same shape
        return self.layout.counts[2]

    @property
    def live_spans(self) -> dict[str, list[tuple[int, int]]]:
        """Per buffer owner, the steps a tensor in it is still to be read (read-only)."""
        return self.layout.live_spans

    @cached_property
    def buffers(self) -> tuple[OrtBuffer, ...]:
        """Each buffer with its owner, size and steps (made when asked: a probe reads the
        sizes by number)."""
        return tuple(OrtBuffer(value, size, first, last, kind) for (value, first, last, kind),
                     size in zip(self.layout.buffers, self.sizes, strict=True))


@dataclass(frozen=True)
class OrtTimeline:
    peak_step: int
    peak_bytes: int  # in use at the peak, arena-rounded, scratch included
    tensors_bytes: int  # the buffers held at the peak, as requested
    rounding_bytes: int  # the arena's rounding of those buffers and of the scratch
    scratch_bytes: int  # the kernel's working buffer at the peak, as requested
    live_bytes: int  # of tensors_bytes, those a tensor still needs (the rest: held for reuse)
    held_bytes: int  # the arena's regions at the end (`mem_arena_held` less the weights)
    failure: ArenaFailure | None = None  # bounded by a device: the allocation it could not back


class PlanEvents(NamedTuple):
    """`replay_numbered`'s input: per step the event numbers, per number its bytes and key
    (the plan's buffers first, then the kernels' scratch)."""

    steps: Sequence[Sequence[int]]
    sizes: Sequence[int]
    keys: Sequence[str]


# ----- plan -----------------------------------------------------------------------------------


def plan_ort_buffers(graph: Graph, sizes: Mapping[str, SymInt | None],
                     plan_shapes: Mapping[str, PlanShape | None] | None = None,
                     order: Sequence[Node] | None = None) -> OrtPlan:
    """Which buffer each tensor uses and how long each buffer is held, as onnxruntime plans."""
    layout, steps = cached_per_graph(graph, (plan_shapes, order),
                                     lambda: _layout_and_steps(graph, plan_shapes, order))
    return OrtPlan(layout, steps, _buffer_bytes(graph, sizes, steps))


def _layout_and_steps(graph: Graph, plan_shapes: Mapping[str, PlanShape | None] | None,
                      order: Sequence[Node] | None) -> tuple[PlanLayout, EventSteps]:
    layout = _make_layout(graph, plan_shapes, order)
    return layout, event_steps(layout)


def _buffer_bytes(graph: Graph, sizes: Mapping[str, SymInt | None],
                  steps: EventSteps) -> list[int]:
    """Each buffer's bytes at the dims (0 where not a number): by position where `sizes` is
    a probe's `ValueSizes` of this graph, else by the owner's name."""
    if isinstance(sizes, ValueSizes) and sizes.table.of(graph):
        numbers = sizes.numbers()
        return [numbers[i] for i in sizes.table.buffer_sizes(steps, steps.positions)]
    get = sizes.get
    return [int(size) if (size := get(name)) is not None and size.is_constant else 0
            for name in steps.names]


# ----- timeline -------------------------------------------------------------------------------


def plan_events(plan: OrtPlan, scratch: Sequence[KernelScratch],
                working: Sequence[int] | None = None) -> PlanEvents:
    """Per step, in onnxruntime's sequence: the kernel allocates its outputs and scratch
    (Where its two selections before its output, Conv its output before the im2col
    buffer), frees the scratch on return; then the plan frees the buffers read last here.
    The layout's own event numbers where no kernel takes scratch; a step that does gets
    its scratch numbered after the buffers. `working`: the steps whose kernel takes scratch,
    where the caller knows them (`kernel_scratches`)."""
    steps_of = plan.steps
    if working is None:
        working = [step for step, work in enumerate(scratch) if work.sizes_bytes]
    if not working:
        return PlanEvents(steps_of.events, plan.sizes, steps_of.names)
    events: list[Sequence[int]] = list(steps_of.events)
    sizes, keys = list(plan.sizes), list(steps_of.names)
    for step in working:
        events[step] = _scratch_step(step, scratch[step], steps_of, sizes, keys)
    return PlanEvents(events, sizes, keys)


def _scratch_step(step: int, work: KernelScratch, steps_of: EventSteps, sizes: list[int],
                  keys: list[str]) -> list[int]:
    """One step's events where its kernel takes scratch, each scratch allocation numbered
    after the last (`sizes` and `keys` grow by them)."""
    started = [b for b in steps_of.events[step] if b >= 0]
    outputs = [ArenaEvent(keys[b], sizes[b]) for b in started]
    number = {id(event): b for event, b in zip(outputs, started, strict=True)}
    kernel, dropped = work.events(f"scratch {step}", outputs)
    scratch_numbers: dict[str, int] = {}
    numbered = []
    for event in kernel:
        if event.size_bytes is None:
            numbered.append(~scratch_numbers[event.key])
        elif id(event) in number:
            numbered.append(number[id(event)])
        else:
            scratch_numbers[event.key] = len(sizes)
            numbered.append(len(sizes))
            sizes.append(event.size_bytes)
            keys.append(event.key)
    numbered += [~scratch_numbers[key] for key in dropped]
    return numbered + [b for b in steps_of.events[step] if b < 0]


def arena_events(plan: OrtPlan, scratch: Sequence[KernelScratch]) -> list[list[ArenaEvent]]:
    """`plan_events` as named events (what `replay` takes)."""
    steps, sizes, keys = plan_events(plan, scratch)
    return [[ArenaEvent(keys[n], sizes[n]) if n >= 0 else ArenaEvent(keys[~n], None)
             for n in step] for step in steps]


def ort_timeline(plan: OrtPlan, scratch: Sequence[KernelScratch], live: bool = True,
                 device_free_bytes: int | None = None,
                 extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO,
                 events: PlanEvents | None = None) -> OrtTimeline:
    """Replay the plan through onnxruntime's arena (extended by `extend`); split its peak into
    labelled parts. `device_free_bytes` bounds the arena's regions (a GPU's memory left);
    `events`: `plan_events(plan, scratch)`, where the caller has them."""
    events = plan_events(plan, scratch) if events is None else events
    result, _ = replay_plan(plan, events, device_free_bytes, extend)
    return timeline_of(plan, scratch, result, live)


def replay_plan(plan: OrtPlan, events: PlanEvents, device_free_bytes: int | None = None,
                extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO, demand: bool = False
                ) -> tuple[ArenaResult, ArenaResult | None]:
    """`replay_numbered` on the plan's events, with the layout's event shape where the events
    are the layout's own (no kernel's scratch numbered in)."""
    steps_of = plan.steps
    shape = steps_of.shape if events.steps is steps_of.events else None
    return replay_numbered(*events, device_free_bytes, extend, demand, shape=shape)


def timeline_of(plan: OrtPlan, scratch: Sequence[KernelScratch], result: ArenaResult,
                live: bool = True) -> OrtTimeline:
    """The replay's peak split into the buffers held there (those a tensor still needs, with
    `live`; the rest kept for a later tensor), the kernel's scratch and the arena's
    rounding."""
    step = result.peak_step
    steps_of, sizes = plan.steps, plan.sizes
    held = np.flatnonzero((steps_of.first <= step) & (steps_of.last >= step)).tolist()
    tensors = sum(sizes[b] for b in held)
    scratch_bytes = scratch[step].held_bytes if scratch else 0
    live_bytes = tensors
    if live:
        owners, positions = plan.layout.live_owners(step), steps_of.positions
        live_bytes = sum(sizes[b] for b in held if positions[b] in owners)
    return OrtTimeline(step, result.peak_in_use_bytes, tensors,
                       result.peak_in_use_bytes - tensors - scratch_bytes, scratch_bytes,
                       live_bytes, result.held_bytes, result.failure)


# ----- estimate -------------------------------------------------------------------------------


def ort_cpu_estimate(graph: Graph, sizes: Mapping[str, SymInt | None], threads: int,
                     bound: Mapping[str, int],
                     plan_shapes: Mapping[str, PlanShape | None] | None = None,
                     resident_bytes: int = 0, order: Sequence[Node] | None = None,
                     graph_note: str = "",
                     extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO) -> RuntimeEstimate:
    """onnxruntime CPU's `mem_in_use_peak` over one run: the weights it holds in its arena
    from session creation plus the run's own peak; `resident_bytes` (the file's initializers
    and the caller's inputs, outside that count) completes the process total. `order`: the
    order the session runs the nodes in (default: onnxruntime's reverse DFS on `graph`; an
    optimized graph saved by onnxruntime lists its nodes in the order it ran them)."""
    plan = plan_ort_buffers(graph, sizes, plan_shapes, order)
    scratch, working = kernel_scratches(plan, lambda node: cpu_kernel_scratch(node, threads,
                                                                             bound))
    body_scratch = plan.steps.body_scratch  # a Loop's iterations stand for its body's peak:
    sizes_run = without_body_scratch(plan.sizes, [body_scratch[step] for step in working if
                                                  scratch[step].replaces_body
                                                  and step in body_scratch])
    plan = plan if sizes_run is plan.sizes else replace(plan, sizes=sizes_run)
    timeline = ort_timeline(plan, scratch, extend=extend,
                            events=plan_events(plan, scratch, working))
    weights = arena_weights_bytes(graph, plan.order)
    notes = ((graph_note,) if graph_note else ()) + plan_notes(plan, timeline, sizes,
                                                          plan_shapes is None)
    notes += (f"of the runtime peak, {weights:,} bytes are weights onnxruntime holds before the"
              f" run (prepacked MatMul/Gemm weights, small initializers) and"
              f" {timeline.peak_bytes:,} bytes the run's own",)
    if any(node.op_type == "Conv" for node in plan.order):
        notes += (f"Conv scratch sized for {threads} intra-op threads",)
    if unmeasured := unmeasured_scratch_ops(graph):
        named = ", ".join(unmeasured[:4]) + (", ..." if len(unmeasured) > 4 else "")
        notes += (f"{count_noun(len(unmeasured), 'op')} whose kernel's scratch is not known"
                  f" ({named}): counted as 0 bytes, the runtime peak may be low by it",)
    creation = session_creation_peak_bytes(graph, graph.nodes)  # packed in node order
    # at creation: no tensor yet; the packs' temporary copies are the overhead
    at_creation = creation > weights + timeline.peak_bytes
    notes += (creation_peak_note(creation),) if at_creation else ()
    peak = max(creation, weights + timeline.peak_bytes)
    return RuntimeEstimate(
        runtime=Runtime.ORT_CPU,
        tensors_at_peak_bytes=0 if at_creation else timeline.tensors_bytes,
        allocator_overhead_bytes=creation - weights if at_creation else timeline.rounding_bytes,
        context_bytes=0,
        runtime_peak_bytes=peak,
        device_total_bytes=peak + resident_bytes,
        notes=notes,
        workspace_bytes=0 if at_creation else timeline.scratch_bytes,
        resident_bytes=resident_bytes,
        arena_held_bytes=weights + timeline.held_bytes,
        runtime_weights_bytes=weights,
    )



def plan_notes(plan: OrtPlan, timeline: OrtTimeline, sizes: Mapping[str, SymInt | None],
           shapes_from_ir: bool) -> tuple[str, ...]:
    node = plan.order[timeline.peak_step] if plan.order else None
    notes = [
        f"peak at node {node.name} ({node.op_type}), step {timeline.peak_step + 1} of"
        f" {len(plan.order)} in onnxruntime's order" if node else "no nodes",
        f"{count_noun(plan.inplace_count, 'output')} written in place,"
        f" {count_noun(plan.alias_count, 'view')} of their input, {plan.reused_count:,} placed"
        " in a freed buffer of the same shape",
    ]
    held = timeline.tensors_bytes - timeline.live_bytes
    if held > 0:
        notes.append(f"{held:,} bytes at the peak are buffers held for a later tensor of the"
                     " same shape (onnxruntime frees a reused buffer after its last tensor)")
    if shapes_from_ir:
        notes.append("planned with graphmem's shapes (onnxruntime's own were not at hand)")
    unknown = _unknown_size_producers(plan, sizes)
    if unknown:
        kinds = sorted({_op_kind(node) for node in unknown})
        made_by = ", ".join(kinds[:4]) + (", ..." if len(kinds) > 4 else "")
        notes.append(f"{count_noun(len(unknown), 'tensor')} of unknown size (made by {made_by})"
                     " counted as 0 bytes: the runtime peak may be low by their size")
    return tuple(notes)


def _unknown_size_producers(plan: OrtPlan, sizes: Mapping[str, SymInt | None]) -> list[Node]:
    """The node making each tensor whose size is not a number at the bound dims."""
    if isinstance(sizes, ValueSizes) and len(plan.order) == len(sizes.table.graph.nodes) \
            and sizes.table.of_layout(plan.steps) and sizes.outputs_are_numbers():
        return []  # every node of the graph ordered, every output sized: checked per size
    return [node for node in plan.order for value in node.outputs
            if (size := sizes.get(value.name)) is None or not size.is_constant]


def _op_kind(node: Node) -> str:
    """`Conv`, or `com.microsoft.nchwc.ReorderInput` outside the ONNX domain."""
    return f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
