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
  when its shape equals the output's dim by dim (`FindReusableTensor`); else a new buffer.
  Shapes are those onnxruntime infers at session creation (graphmem/frontends/onnx/
  ort_plan_shapes.py): a tensor whose shape it does not know is never reused or reused into.
- Release (`GenerateDeallocationPlan`): a buffer is freed after the last node that reads any
  tensor sharing it. Reuse from the free list therefore holds a buffer from its first tensor
  to its last one, through the gap between them: a dead buffer waiting for a same-shaped
  tensor, often a whole layer later, is memory the arena counts. An output nothing reads is
  freed only at the end of the run.
- Arena: the allocations and frees replayed through onnxruntime's BFC arena (bfc_arena.py:
  256-byte rounding, chunks handed out whole below twice the request, regions by its strategy).
- Scratch: what Conv, Where, BiasGelu and Einsum allocate while they run (ort_kernels.py,
  ort_einsum.py).

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from graphmem.core.ir import Graph, Node, Value
from graphmem.core.ort_view import PlanShape
from graphmem.core.symbolic import SymInt
from graphmem.core.units import count_noun
from graphmem.runtime_models.base import Runtime, RuntimeEstimate
from graphmem.runtime_models.bfc_arena import ArenaEvent, ArenaExtend, ArenaFailure, replay
from graphmem.runtime_models.graph_cache import cached_per_graph
from graphmem.runtime_models.ort_kernels import (
    KernelScratch,
    arena_weights_bytes,
    creation_peak_note,
    kernel_scratch,
    session_creation_peak_bytes,
)
from graphmem.runtime_models.ort_plan import PlanLayout
from graphmem.runtime_models.ort_plan import make_layout as _make_layout
from graphmem.runtime_models.ort_plan import ort_execution_order as ort_execution_order


class OrtBuffer(NamedTuple):
    """One allocation of onnxruntime's plan: the tensor that first holds it and its life.

    A named tuple, not a dataclass: every probe of a largest-batch search re-sizes them all."""

    owner: Value
    size_bytes: int
    first_step: int  # index in the execution order of the node that allocates it
    last_step: int  # the node after which it is freed (the last step: held to the end)
    kind: str  # "planned" | "output" (a graph output, held to the end)


class EventSteps(NamedTuple):
    """A plan's arena events without their sizes, per step: the buffers (places in
    `OrtPlan.buffers`) the step allocates and the plan's frees after it. The bound dims
    change neither: made once per plan layout, every probed batch only sizes the buffers."""

    names: tuple[str, ...]  # per buffer, its owner's name (the arena's key)
    starts: tuple[tuple[int, ...], ...]
    ends: tuple[tuple[ArenaEvent, ...], ...]


def event_steps(buffers: Sequence[tuple[Value, int, int]], count: int) -> EventSteps:
    """`buffers` (owner, first step, last step) as events over `count` steps, in buffer
    order within a step."""
    starts: list[list[int]] = [[] for _ in range(count)]
    ends: list[list[ArenaEvent]] = [[] for _ in range(count)]
    for index, (owner, first, last) in enumerate(buffers):
        starts[first].append(index)
        ends[last].append(ArenaEvent(owner.name, None))
    return EventSteps(tuple(owner.name for owner, _, _ in buffers), tuple(map(tuple, starts)),
                      tuple(map(tuple, ends)))


@dataclass(frozen=True)
class OrtPlan:
    order: tuple[Node, ...]
    buffers: tuple[OrtBuffer, ...]
    storage: dict[str, str]  # value name -> name of the value owning its buffer
    inplace_count: int  # outputs written over their input (MayInplace)
    alias_count: int  # outputs that are views of their input (Alias)
    reused_count: int  # outputs placed in a freed buffer of the same shape
    # per buffer owner, the steps a tensor in it is still to be read (shared: read-only)
    live_spans: dict[str, list[tuple[int, int]]]
    # the layout's events without sizes (None: made from `buffers` when asked)
    steps: EventSteps | None = field(default=None, compare=False, repr=False)


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


# ----- plan -----------------------------------------------------------------------------------


def plan_ort_buffers(graph: Graph, sizes: Mapping[str, SymInt | None],
                     plan_shapes: Mapping[str, PlanShape | None] | None = None,
                     order: Sequence[Node] | None = None) -> OrtPlan:
    """Which buffer each tensor uses and how long each buffer is held, as onnxruntime plans."""
    layout, steps = cached_per_graph(graph, (plan_shapes, order),
                                     lambda: _layout_and_steps(graph, plan_shapes, order))
    get = sizes.get
    # one comprehension: every probe of a largest-batch search sizes every buffer
    buffers = tuple([OrtBuffer(value, int(size) if (size := get(name)) is not None
                               and size.is_constant else 0, first, last, kind)
                     for (value, first, last, kind), name in zip(layout.buffers, steps.names,
                                                                  strict=True)])
    return OrtPlan(layout.order, buffers, layout.storage, *layout.counts,
                   live_spans=layout.live_spans, steps=steps)


def _layout_and_steps(graph: Graph, plan_shapes: Mapping[str, PlanShape | None] | None,
                      order: Sequence[Node] | None) -> tuple[PlanLayout, EventSteps]:
    layout = _make_layout(graph, plan_shapes, order)
    owners = [(value, first, last) for value, first, last, _ in layout.buffers]
    return layout, event_steps(owners, len(layout.order))


# ----- timeline -------------------------------------------------------------------------------


def arena_events(plan: OrtPlan, scratch: Sequence[KernelScratch]) -> list[list[ArenaEvent]]:
    """Per step, in onnxruntime's sequence: the kernel allocates its outputs and scratch
    (Where its two selections before its output, Conv its output before the im2col
    buffer), frees the scratch on return; then the plan frees the buffers read last here."""
    steps_of = plan.steps or event_steps(
        [(b.owner, b.first_step, b.last_step) for b in plan.buffers], len(plan.order))
    # the frees and where each buffer starts are the layout's (a max-batch search replays
    # every probe's events): only the allocations carry this probe's sizes
    allocations = list(map(ArenaEvent, steps_of.names, [b.size_bytes for b in plan.buffers]))
    allocation = allocations.__getitem__
    steps = []
    for step, (started, freed, work) in enumerate(zip(steps_of.starts, steps_of.ends, scratch,
                                                      strict=True)):
        outputs = list(map(allocation, started))
        if not work.sizes_bytes:
            outputs.extend(freed)
            steps.append(outputs)
            continue
        kernel, dropped = work.events(f"scratch {step}", outputs)
        steps.append(kernel + [ArenaEvent(k, None) for k in dropped] + list(freed))
    return steps


def ort_timeline(plan: OrtPlan, scratch: Sequence[KernelScratch],
                 live_spans: Mapping[str, list[tuple[int, int]]] | None = None,
                 device_free_bytes: int | None = None,
                 extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO,
                 events: Sequence[Sequence[ArenaEvent]] | None = None) -> OrtTimeline:
    """Replay the plan through onnxruntime's arena (extended by `extend`); split its peak into
    labelled parts. `device_free_bytes` bounds the arena's regions (a GPU's memory left);
    `events`: `arena_events(plan, scratch)`, where the caller replays them more than once."""
    events = arena_events(plan, scratch) if events is None else events
    result = replay(events, device_free_bytes, extend)
    step = result.peak_step
    held = [b for b in plan.buffers if b.first_step <= step <= b.last_step]
    tensors = sum(b.size_bytes for b in held)
    scratch_bytes = scratch[step].held_bytes if scratch else 0
    live = _live_at(held, step, live_spans)
    return OrtTimeline(step, result.peak_in_use_bytes, tensors,
                       result.peak_in_use_bytes - tensors - scratch_bytes, scratch_bytes, live,
                       result.held_bytes, result.failure)


def _live_at(held: Sequence[OrtBuffer], step: int,
             live_spans: Mapping[str, list[tuple[int, int]]] | None) -> int:
    if live_spans is None:
        return sum(b.size_bytes for b in held)
    return sum(b.size_bytes for b in held
               if any(start <= step <= last for start, last in live_spans.get(b.owner.name, [])))


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
    scratch = [kernel_scratch(node, threads, bound) for node in plan.order]
    timeline = ort_timeline(plan, scratch, plan.live_spans, extend=extend)
    weights = arena_weights_bytes(graph, plan.order)
    notes = ((graph_note,) if graph_note else ()) + plan_notes(plan, timeline, sizes,
                                                          plan_shapes is None)
    notes += (f"of the runtime peak, {weights:,} bytes are weights onnxruntime holds before the"
              f" run (prepacked MatMul/Gemm weights, small initializers) and"
              f" {timeline.peak_bytes:,} bytes the run's own",)
    if any(node.op_type == "Conv" for node in plan.order):
        notes += (f"Conv scratch sized for {threads} intra-op threads",)
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
    # one comprehension: every probe of a largest-batch search runs it over every output
    return [node for node in plan.order for value in node.outputs
            if (size := sizes.get(value.name)) is None or not size.is_constant]


def _op_kind(node: Node) -> str:
    """`Conv`, or `com.microsoft.nchwc.ReorderInput` outside the ONNX domain."""
    return f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
