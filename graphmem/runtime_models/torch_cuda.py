"""The torch-cuda runtime model: a step's allocations through PyTorch's caching allocator.

From graphmem's analysis to the allocator's events (graphmem/runtime_models/cuda_allocator.py
replays them) and to the numbers of a PyTorch process on a named GPU: tensors at the peak,
what the allocator adds (rounding, segments), the CUDA context and library workspaces, and
the total nvidia-smi would show. Measured against a real H100 in
benchmarks/results/allocator_h100.md.
"""

from __future__ import annotations

import tomllib
from collections.abc import Hashable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Protocol

from graphmem.core.ir import RESIDENT_ROLES, Graph, Node, Phase, Role, Value
from graphmem.core.units import format_bytes
from graphmem.devices.gpus import GpuSpec
from graphmem.ops import traits_of
from graphmem.passes.dims import DimBinding, value_bytes
from graphmem.passes.fit import OutOfMemoryAt, default_cuda_reserve
from graphmem.passes.memory_model import (
    MemoryModel,
    StepEvents,
    build_memory_model,
    plan_dims,
    size_at,
    step_events,
)
from graphmem.runtime_models.base import CachingAllocatorFacts, Runtime, RuntimeEstimate
from graphmem.runtime_models.cuda_allocator import (
    AllocatorEvent,
    AllocatorFailure,
    simulate_caching_allocator,
)


class StepGraph(Protocol):
    """What the model reads of an analysed step: the Analysis or a RuntimeContext."""

    @property
    def graph(self) -> Graph: ...
    @property
    def dims(self) -> DimBinding: ...
    @property
    def mode(self) -> str: ...

# Residents exist before the step, in this order (model.to(device), the batch, then the
# optimizer state), as a training loop makes them.
_RESIDENT_ORDER = (Role.PARAMETER, Role.BUFFER, Role.CONSTANT, Role.INPUT,
                   Role.OPTIMIZER_STATE)


@dataclass(frozen=True)
class CudaOverhead:
    """One GPU generation's numbers from graphmem/devices/data/cuda_overhead.toml."""

    context_bytes: int  # context, kernel images, library handles: outside the allocator
    context_source: str
    cublas_workspace_bytes: int  # per thread that runs cuBLAS; inside the allocator
    cublaslt_workspace_bytes: int  # cuBLASLt (addmm); inside the allocator
    workspace_source: str


@dataclass(frozen=True)
class Workspace:
    name: str
    nbytes: int


def cuda_overhead(architecture: str, context_override_bytes: int | None = None) -> CudaOverhead:
    """Numbers for one GPU generation; `context_override_bytes` is --cuda-reserve."""
    table = _overhead_table()
    reserve = default_cuda_reserve(architecture)
    blas = table.get("cublas_workspace", {})
    blas_lt = table.get("cublaslt_workspace", {})
    override = context_override_bytes is not None
    return CudaOverhead(
        context_bytes=reserve.bytes if context_override_bytes is None else context_override_bytes,
        context_source="given with --cuda-reserve" if override else reserve.source,
        cublas_workspace_bytes=int(blas.get(architecture, blas.get("default_bytes", 0))),
        cublaslt_workspace_bytes=int(blas_lt.get(architecture, blas_lt.get("default_bytes", 0))),
        workspace_source=str(blas.get("source", "")),
    )


@cache
def _overhead_table() -> dict[str, Any]:
    """cuda_overhead.toml, read once (a largest-batch search asks at every batch it probes;
    read-only)."""
    text = resources.files("graphmem.devices.data").joinpath("cuda_overhead.toml").read_text()
    return tomllib.loads(text)


def library_workspaces(graph: Graph, overhead: CudaOverhead) -> tuple[Workspace, ...]:
    """The cuBLAS workspaces a step of `graph` leaves allocated (all exist in steady state)."""
    forward = [n for n in graph.nodes if not _is_backward(n)]
    backward = [n for n in graph.nodes if _is_backward(n)]
    found = []
    # The first cuBLAS op on a thread makes PyTorch allocate that thread's cuBLAS handle
    # workspace through the caching allocator, kept for the process. The backward pass runs
    # on autograd's device thread, with a handle (and workspace) of its own. addmm (Linear
    # with a bias) goes through cuBLASLt, whose workspace is allocated separately.
    if any(traits_of(n).runs_on_cublas for n in forward):
        found.append(Workspace("cuBLAS workspace", overhead.cublas_workspace_bytes))
    if any(traits_of(n).runs_on_cublaslt for n in graph.nodes):
        found.append(Workspace("cuBLASLt workspace", overhead.cublaslt_workspace_bytes))
    if any(traits_of(n).runs_on_cublas for n in backward):
        found.append(Workspace("cuBLAS workspace (autograd thread)",
                               overhead.cublas_workspace_bytes))
    return tuple(found)


def _is_backward(node: Node) -> bool:
    """Runs on autograd's device thread: a node of the step's backward phase."""
    return node.phase is Phase.BACKWARD


def allocation_events(analysis: StepGraph, steps: int = 1,
                      workspaces: tuple[Workspace, ...] = ()) -> list[AllocatorEvent]:
    """The step's allocations and frees in the model's own order, as eager PyTorch runs it.

    First the workspaces and the residents; then, per step, each node's outputs are allocated
    when it runs and each buffer is freed after its last user (graphmem's liveness
    conventions; views and in-place results share their base's buffer). Graph outputs are
    dropped at the end of each step, as a training loop drops the loss and (set_to_none) the
    gradients before the next one. Free dims are taken at graphmem's probe value.
    """
    graph = analysis.graph
    sizes = value_bytes(graph, analysis.dims)
    dims = plan_dims(graph, analysis.dims.bound)
    model = build_memory_model(graph, sizes, dims)
    last_uses = step_events(model, range(model.node_count))  # the model's order
    events: list[AllocatorEvent] = [("alloc", ("workspace", w.name), w.nbytes)
                                    for w in workspaces]
    for value in _residents_in_order(graph):
        events.append(("alloc", ("resident", value.name), size_at(sizes.get(value.name), dims)))
    for step in range(steps):
        events.extend(_step_events(model, last_uses, step))
    return events


def _residents_in_order(graph: Graph) -> list[Value]:
    rank = {role: i for i, role in enumerate(_RESIDENT_ORDER)}
    residents = [v for v in graph.values.values()
                 if v.role in RESIDENT_ROLES and v.alias_of is None]
    return sorted(residents, key=lambda v: rank.get(v.role, len(rank)))  # stable: graph order


def _step_events(model: MemoryModel, last_uses: StepEvents, step: int) -> list[AllocatorEvent]:
    """One step's allocator calls: each node's buffers allocated, then those it used last
    freed (graphmem/passes/memory_model.py); the graph outputs freed at the end."""
    sizes = model.buffer_bytes
    events: list[AllocatorEvent] = []

    def buffer_id(buffer: int) -> Hashable:
        return (step, model.buffer_names[buffer])

    for node, freed in zip(last_uses.order, last_uses.frees, strict=True):
        events.extend(("alloc", buffer_id(b), sizes[b]) for b in model.allocates[node])
        events.extend(("free", buffer_id(b), sizes[b]) for b in freed)
    events.extend(("free", buffer_id(b), sizes[b])
                  for b, pinned in enumerate(model.pinned) if pinned)
    return events


def torch_cuda_estimate(analysis: StepGraph, gpu: GpuSpec,
                        context_override_bytes: int | None = None,
                        capacity_bytes: int | None = None) -> RuntimeEstimate:
    """PyTorch eager on `gpu`: the caching allocator's peaks over a step, plus the context.

    A training step is replayed twice (the second reuses the segments the first cached, as
    every later step does); the peaks are those of the whole replay. `context_override_bytes`
    (--cuda-reserve) replaces the measured context size. `capacity_bytes` (the GPU's memory)
    bounds the allocator's segments to what the context leaves; where a request fails there,
    the numbers are the unbounded replay's (the demand) and `out_of_memory` says where it
    failed.
    """
    overhead = cuda_overhead(gpu.architecture, context_override_bytes)
    workspaces = library_workspaces(analysis.graph, overhead)
    workspace_bytes = sum(w.nbytes for w in workspaces)
    steps = 2 if analysis.mode == "training" else 1
    segments = None if capacity_bytes is None else max(capacity_bytes - overhead.context_bytes, 0)
    events = allocation_events(analysis, steps, workspaces)
    result = simulate_caching_allocator(events, segments)
    oom = None
    if result.failure is not None:  # the demand: the same replay on a GPU large enough
        oom = _failed_at(analysis.graph, result.failure, segments or 0)
        result = simulate_caching_allocator(events)
    tensors = result.requested_peak_bytes - workspace_bytes
    failure = "" if oom is None else _failure_text(oom, segments or 0)
    facts = CachingAllocatorFacts(
        segment_count=result.segment_count, small_segment_count=result.small_segment_count,
        reserved_peak_bytes=result.reserved_peak_bytes,
        released_segment_count=result.released_segment_count,
        context_bytes=overhead.context_bytes, context_source=overhead.context_source,
        workspaces=tuple((w.name, w.nbytes) for w in workspaces),
        workspace_source=overhead.workspace_source)
    return RuntimeEstimate(
        runtime=Runtime.TORCH_CUDA,
        tensors_at_peak_bytes=tensors,
        allocator_overhead_bytes=result.reserved_peak_bytes - tensors - workspace_bytes,
        context_bytes=overhead.context_bytes + workspace_bytes,
        runtime_peak_bytes=result.allocated_peak_bytes,
        device_total_bytes=result.reserved_peak_bytes + overhead.context_bytes,
        notes=(failure,) if failure else (),
        caching_allocator=facts,
        capacity_bytes=capacity_bytes,
        satisfied=None if capacity_bytes is None else oom is None,
        failure=failure,
        out_of_memory=oom,
    )


def _failed_at(graph: Graph, failure: AllocatorFailure, segments_bytes: int) -> OutOfMemoryAt:
    """The request no segment could serve (PyTorch raises torch.OutOfMemoryError there): a
    step's tensor names its node; a resident or a workspace fails before the step runs."""
    buffer = failure.buffer_id  # (step | "resident" | "workspace", name)
    kind, name = buffer if isinstance(buffer, tuple) else (None, buffer)
    node = graph.values[name].producer if isinstance(kind, int) and name in graph.values else None
    step = None
    if node is not None:
        step = next(i for i, n in enumerate(graph.nodes) if n is node) + 1
    return OutOfMemoryAt(
        tensor=str(name), node=node.name if node else "", op_type=node.op_type if node else "",
        step=step, step_count=len(graph.nodes), request_bytes=failure.request_bytes,
        held_bytes=failure.reserved_bytes,
        free_bytes=max(segments_bytes - failure.reserved_bytes, 0))


def _failure_text(oom: OutOfMemoryAt, segments_bytes: int) -> str:
    where = f" at node {oom.node} ({oom.op_type})" if oom.node else f" for {oom.tensor}"
    return (f"CUDA out of memory{where}: a request of {format_bytes(oom.request_bytes)} needs"
            f" a new segment, and after freeing its cached segments the allocator holds"
            f" {format_bytes(oom.held_bytes)} of the {format_bytes(segments_bytes)} the"
            " context leaves; PyTorch raises torch.OutOfMemoryError here")
