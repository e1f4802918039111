"""onnxruntime with the CUDA execution provider: the CPU model's plan on a GPU's BFC arena.

A documented model, not a measurement (no onnxruntime-gpu here to check it): the same
allocation plan as on CPU (graphmem/runtime_models/ort_cpu.py), with Einsum's temporaries as
the CUDA provider's source takes them (graphmem/runtime_models/ort_cuda_einsum.py), replayed
through the CUDA
provider's arena, a BFCArena too (graphmem/runtime_models/bfc_arena.py), bounded by the GPU:
the device holds the CUDA context, the initializers and inputs (copied to the GPU at session
creation, outside the arena's regions), and what is left is the arena's to extend into, with
its 90% back-off near the limit. The device total is context + initializers and inputs + the
arena's regions. Where a region cannot be had the run fails, as onnxruntime's does: the
estimate then says where (`out_of_memory`), and its numbers are the demand, the same run on a
GPU large enough, so that the device total less the capacity is what the run lacks.
"""

from __future__ import annotations

from collections.abc import Mapping

from graphmem.core.ir import Graph
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes
from graphmem.passes.fit import OutOfMemoryAt
from graphmem.runtime_models.base import Runtime, RuntimeEstimate
from graphmem.runtime_models.bfc_arena import ArenaExtend, ArenaFailure
from graphmem.runtime_models.ort_cpu import (
    OrtPlan,
    PlanShape,
    kernel_scratches,
    plan_events,
    plan_notes,
    plan_ort_buffers,
    replay_plan,
    timeline_of,
)
from graphmem.runtime_models.ort_cuda_einsum import cuda_kernel_scratch


def ort_cuda_estimate(graph: Graph, sizes: Mapping[str, SymInt | None],
                      plan_shapes: Mapping[str, PlanShape | None] | None,
                      resident_bytes: int, context_bytes: int, context_source: str,
                      capacity_bytes: int | None = None,
                      with_notes: bool = True,
                      extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO,
                      bound: Mapping[str, int] | None = None) -> RuntimeEstimate:
    """One run on the CUDA provider; `capacity_bytes` (the GPU's memory) bounds the arena:
    it gets what the context and the initializers and inputs leave. Where the bounded run
    fails, the numbers are the unbounded run's (the demand) and `out_of_memory` says where
    the bounded one stopped. `with_notes` False: the notes are left out (a probe reads the
    numbers alone), a failure's own line excepted. `extend`: the arena's extend strategy (the
    provider option `arena_extend_strategy`). `bound`: the dims, for the kernels' temporaries
    (Einsum's: graphmem/runtime_models/ort_cuda_einsum.py)."""
    plan = plan_ort_buffers(graph, sizes, plan_shapes)
    scratch, working = kernel_scratches(plan, lambda node: cuda_kernel_scratch(node, bound or {}))
    free = None if capacity_bytes is None else capacity_bytes - context_bytes - resident_bytes
    oom: OutOfMemoryAt | None = None
    result = None
    events = plan_events(plan, scratch, working)
    if free is not None and free < 0:
        oom = _weights_do_not_fit(plan, resident_bytes, free + resident_bytes)
    elif free is not None:
        # where the GPU runs out, the demand: the same run unbounded, carried on from there
        bounded, demand = replay_plan(plan, events, free, extend, demand=True)
        if bounded.failure is None:
            result = bounded
        else:
            oom = _failed_at(plan, bounded.failure)
            result = demand
    if result is None:  # unbounded: not bounded, or the demand replayed from the start
        result, _ = replay_plan(plan, events, extend=extend)
    timeline = timeline_of(plan, scratch, result)
    notes: tuple[str, ...] = ()
    if with_notes:
        notes = plan_notes(plan, timeline, sizes, plan_shapes is None)
        notes += _model_notes(context_source)
    failure = "" if oom is None else _failure_text(oom)
    return RuntimeEstimate(
        runtime=Runtime.ORT_CUDA,
        tensors_at_peak_bytes=timeline.tensors_bytes,
        allocator_overhead_bytes=timeline.held_bytes - timeline.tensors_bytes,
        context_bytes=context_bytes,
        runtime_peak_bytes=timeline.peak_bytes,
        device_total_bytes=timeline.held_bytes + resident_bytes + context_bytes,
        notes=(failure, *notes) if failure else notes,
        resident_bytes=resident_bytes,
        arena_held_bytes=timeline.held_bytes,
        capacity_bytes=capacity_bytes,
        satisfied=None if capacity_bytes is None else oom is None,
        failure=failure,
        out_of_memory=oom,
    )


def _failed_at(plan: OrtPlan, failure: ArenaFailure) -> OutOfMemoryAt:
    """The allocation the arena, bounded by the GPU, could not back: onnxruntime fails the
    run there."""
    node = plan.order[failure.step]
    return OutOfMemoryAt(
        tensor=failure.key, node=node.name, op_type=node.op_type, step=failure.step + 1,
        step_count=len(plan.order), request_bytes=failure.request_bytes,
        held_bytes=failure.held_bytes, free_bytes=failure.device_free_bytes)


def _weights_do_not_fit(plan: OrtPlan, resident_bytes: int, free_bytes: int) -> OutOfMemoryAt:
    """The initializers and inputs do not fit beside the context: the session fails before
    any node runs."""
    return OutOfMemoryAt(tensor="", node="", op_type="", step=None, step_count=len(plan.order),
                         request_bytes=resident_bytes, held_bytes=0, free_bytes=free_bytes)


def _failure_text(oom: OutOfMemoryAt) -> str:
    if oom.step is None:
        return (f"out of memory before the run: the initializers and inputs"
                f" ({format_bytes(oom.request_bytes)}) are more than the"
                f" {format_bytes(max(oom.free_bytes, 0))} the CUDA context leaves on the GPU")
    return (f"out of memory at node {oom.node} ({oom.op_type}), step {oom.step} of"
            f" {oom.step_count}: the arena needs {format_bytes(oom.request_bytes)} more"
            f" and no region it tries fits the {format_bytes(oom.free_bytes)} the"
            " GPU has left (after 90% back-off steps); onnxruntime fails the run here")


def _model_notes(context_source: str) -> tuple[str, ...]:
    return (
        "a model, not a measurement: onnxruntime-gpu was not available to check it",
        "planned the graph as written (the CUDA provider's graph optimizations are not"
        " modelled)",
        "cuDNN's convolution and reduction workspaces (taken from the arena by the algorithm"
        " cuDNN picks) are not modelled: the device total may be low by them; Einsum's"
        " temporaries are read from onnxruntime's CUDA source, not measured",
        "cudaMalloc's 2 MiB granularity is not modelled: within 2 MiB per arena region of the"
        " capacity, 'fits' may be optimistic",
        f"context: {context_source}",
    )
