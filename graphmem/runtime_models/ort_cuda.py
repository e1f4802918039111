"""onnxruntime with the CUDA execution provider: the CPU model's plan on a GPU's BFC arena.

A documented model, not a measurement (no onnxruntime-gpu here to check it): the same
allocation plan as on CPU (graphmem/runtime_models/ort_cpu.py), replayed through the CUDA
provider's arena, a BFCArena too (graphmem/runtime_models/bfc_arena.py), bounded by the GPU:
the device holds the CUDA context, the initializers and inputs (copied to the GPU at session
creation, outside the arena's regions), and what is left is the arena's to extend into, with
its 90% back-off near the limit. The device total is context + initializers and inputs + the
arena's regions; where a region cannot be had the run fails, as onnxruntime's does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from graphmem.core.ir import Graph
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes
from graphmem.runtime_models.base import RuntimeEstimate
from graphmem.runtime_models.bfc_arena import ArenaFailure
from graphmem.runtime_models.ort_cpu import (
    OrtPlan,
    OrtTimeline,
    PlanShape,
    buffer_live_spans,
    ort_timeline,
    plan_notes,
    plan_ort_buffers,
)
from graphmem.runtime_models.ort_kernels import KernelScratch

ORT_CUDA_COUNTS = (
    "onnxruntime's CUDA arena in use at its peak during one run (same plan as on CPU); the"
    " device total adds the arena's unused region space, the initializers and inputs on the"
    " GPU and the CUDA context")


def ort_cuda_estimate(graph: Graph, sizes: Mapping[str, SymInt | None],
                      plan_shapes: Mapping[str, PlanShape | None] | None,
                      resident_bytes: int, context_bytes: int, context_source: str,
                      capacity_bytes: int | None = None,
                      with_notes: bool = True) -> RuntimeEstimate:
    """One run on the CUDA provider; `capacity_bytes` (the GPU's memory) bounds the arena:
    it gets what the context and the initializers and inputs leave. `with_notes` False: the
    notes are left out (a probe reads the numbers alone), a failure's own line excepted."""
    plan = plan_ort_buffers(graph, sizes, plan_shapes)
    free = None if capacity_bytes is None else capacity_bytes - context_bytes - resident_bytes
    if free is not None and free < 0:
        return _weights_do_not_fit(plan, resident_bytes, context_bytes, capacity_bytes or 0)
    timeline = ort_timeline(plan, [KernelScratch()] * len(plan.order), buffer_live_spans(plan),
                            device_free_bytes=free)
    notes: tuple[str, ...] = ()
    if with_notes:
        notes = plan_notes(plan, timeline, sizes, plan_shapes is None)
        notes += _model_notes(context_source)
    estimate = RuntimeEstimate(
        runtime="ort-cuda",
        tensors_at_peak_bytes=timeline.tensors_bytes,
        allocator_overhead_bytes=timeline.held_bytes - timeline.tensors_bytes,
        context_bytes=context_bytes,
        runtime_peak_bytes=timeline.peak_bytes,
        device_total_bytes=timeline.held_bytes + resident_bytes + context_bytes,
        counts=ORT_CUDA_COUNTS,
        notes=notes,
        resident_bytes=resident_bytes,
        arena_held_bytes=timeline.held_bytes,
        capacity_bytes=capacity_bytes,
        satisfied=None if capacity_bytes is None else timeline.failure is None,
    )
    if timeline.failure is not None:
        return _failed(estimate, plan, timeline, timeline.failure)
    return estimate


def _failed(estimate: RuntimeEstimate, plan: OrtPlan, timeline: OrtTimeline,
            failure: ArenaFailure) -> RuntimeEstimate:
    """The run stops at the allocation the arena could not back: the device total is what
    the device was asked for there (the regions held, plus the last region tried)."""
    node = plan.order[failure.step]
    asked = failure.held_bytes + failure.region_bytes
    tensors = failure.in_use_bytes + failure.request_bytes
    text = (f"out of memory at node {node.name} ({node.op_type}), step {failure.step + 1} of"
            f" {len(plan.order)}: the arena needs {format_bytes(failure.request_bytes)} more"
            f" and no region it tries fits the {format_bytes(failure.device_free_bytes)} the"
            f" GPU has left (last tried {format_bytes(failure.region_bytes)}, after 90%"
            " back-off steps); onnxruntime fails the run here")
    return replace(
        estimate, tensors_at_peak_bytes=tensors, allocator_overhead_bytes=asked - tensors,
        runtime_peak_bytes=max(timeline.peak_bytes, tensors), arena_held_bytes=failure.held_bytes,
        device_total_bytes=asked + estimate.resident_bytes + estimate.context_bytes,
        satisfied=False, failure=text, notes=(text, *estimate.notes))


def _weights_do_not_fit(plan: OrtPlan, resident_bytes: int, context_bytes: int,
                        capacity_bytes: int) -> RuntimeEstimate:
    text = (f"out of memory before the run: the initializers and inputs"
            f" ({format_bytes(resident_bytes)}) and the CUDA context"
            f" ({format_bytes(context_bytes)}) are more than the GPU's"
            f" {format_bytes(capacity_bytes)}")
    return RuntimeEstimate(
        runtime="ort-cuda", tensors_at_peak_bytes=0, allocator_overhead_bytes=0,
        context_bytes=context_bytes, runtime_peak_bytes=0,
        device_total_bytes=resident_bytes + context_bytes, counts=ORT_CUDA_COUNTS,
        notes=(text, f"{len(plan.order)} nodes not run"), resident_bytes=resident_bytes,
        arena_held_bytes=0, capacity_bytes=capacity_bytes, satisfied=False, failure=text)


def _model_notes(context_source: str) -> tuple[str, ...]:
    return (
        "a model, not a measurement: onnxruntime-gpu was not available to check it",
        "planned the graph as written (the CUDA provider's graph optimizations are not"
        " modelled)",
        "cuDNN's convolution workspace (taken from the arena by the algorithm cuDNN picks) is"
        " not modelled: the device total may be low by it",
        "cudaMalloc's 2 MiB granularity is not modelled: within 2 MiB per arena region of the"
        " capacity, 'fits' may be optimistic",
        f"context: {context_source}",
    )
