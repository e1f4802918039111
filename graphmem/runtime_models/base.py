"""What a runtime adds to the live tensors: the shared types of every runtime model.

A runtime model (onnxruntime's CPU/CUDA allocation planner and arena, PyTorch's CUDA caching
allocator) turns graphmem's live tensors into the numbers that runtime reports and the device
total nvidia-smi shows. Each part is its own labelled line; none is folded silently.

Every model has one signature, `estimate(context) -> RuntimeEstimate`, and a `check` of the
inputs it can model; the registry (`MODELS`) and the default per input are in
graphmem/runtime_models/select.py. What onnxruntime's planner sees of an ONNX file (its plan
shapes, its optimized graph) comes from the ONNX front end through `OrtGraphSource`: nothing
here reads a file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from graphmem.core.ir import Graph
from graphmem.core.ort_view import OrtGraphSource
from graphmem.core.routing import DEFAULT_ROUTING, MoeRouting
from graphmem.core.symbolic import SymInt
from graphmem.devices.gpus import GpuSpec
from graphmem.passes.dims import DimBinding
from graphmem.passes.fit import OutOfMemoryAt
from graphmem.runtime_models.vocabulary import (
    AUTO_OPTIMIZE_INITIALIZER_BYTES as AUTO_OPTIMIZE_INITIALIZER_BYTES,
)
from graphmem.runtime_models.vocabulary import (
    ORT_OPTIMIZATION_LEVELS as ORT_OPTIMIZATION_LEVELS,
)
from graphmem.runtime_models.vocabulary import RUNTIMES as RUNTIMES
from graphmem.runtime_models.vocabulary import ArenaExtend as ArenaExtend
from graphmem.runtime_models.vocabulary import Runtime as Runtime


@dataclass(frozen=True)
class RuntimeContext:
    """Everything a runtime model reads: the analysed graph at bound dims, the GPU, options."""

    graph: Graph
    dims: DimBinding
    training: bool
    resident_bytes: int  # inputs, weights and constants (the liveness's residents)
    gpu: GpuSpec | None = None
    cuda_reserve_bytes: int | None = None  # --cuda-reserve: replaces the measured context
    threads: int | None = None  # onnxruntime CPU intra-op threads (None: one per core)
    ort_optimization: str | None = None  # None: "all" up to auto_optimize_max_bytes
    # onnxruntime's arena extend strategy (the CUDA provider's `arena_extend_strategy`)
    ort_arena_extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO
    ort_source: OrtGraphSource | None = None  # ONNX models only
    auto_optimize_max_bytes: int = AUTO_OPTIMIZE_INITIALIZER_BYTES
    # the same bound where a level is asked for (verify: a quarter of its memory limit);
    # None: ort_optimized.MAX_INITIALIZER_BYTES
    optimize_max_bytes: int | None = None
    # the GPU's memory (what the driver reports where known): the CUDA runtimes' allocators
    # are bounded by it, as on the device (None: unbounded)
    capacity_bytes: int | None = None
    # every value's size at `dims` (passes/dims.py `value_bytes`), where the caller has them
    # (a largest-batch search binds one SizeTable per probe); None: the model computes them
    sizes: Mapping[str, SymInt | None] | None = None
    # False: only the estimate's numbers are read (a largest-batch search's probes), so the
    # models skip writing their notes
    notes: bool = True
    # --moe-routing: a mixture of experts' router's NonZero sizes (ONNX, data_bounds.py)
    moe_routing: MoeRouting = DEFAULT_ROUTING

    @property
    def mode(self) -> str:
        return "training" if self.training else "inference"


@dataclass(frozen=True)
class CachingAllocatorFacts:
    """torch-cuda: what PyTorch's caching allocator held over the replay, and what the CUDA
    context and the libraries' workspaces are (graphmem/report/words.py words them)."""

    segment_count: int
    small_segment_count: int  # segments of 2 MiB (the small pool's)
    reserved_peak_bytes: int
    released_segment_count: int  # cached segments freed near the GPU's limit
    context_bytes: int  # outside the allocator
    context_source: str
    workspaces: tuple[tuple[str, int], ...]  # (name, bytes) inside the allocator
    workspace_source: str

    @property
    def workspace_bytes(self) -> int:
        return sum(size for _, size in self.workspaces)


@dataclass(frozen=True)
class LargestScratch:
    """torch-cpu: the kernel with the largest scratch of the step, wherever the peak is
    (graphmem/report/words.py words it with the peak's own node and scratch)."""

    node: str
    bytes: int


@dataclass(frozen=True)
class RuntimeEstimate:
    runtime: Runtime
    tensors_at_peak_bytes: int  # bytes of the tensors the runtime holds at its peak
    allocator_overhead_bytes: int  # rounding, pools, segments and reuse gaps on top of those
    context_bytes: int  # CUDA context + library workspaces (0 on CPU)
    runtime_peak_bytes: int  # the runtime's own in-use peak, counted as the runtime counts it
    # The demand: what the process holds over the run on a device large enough (what
    # nvidia-smi would show; CPU: the process's tensor memory). Where the GPU holds it, the
    # allocator's run bounded by the GPU (its behaviour near the limit included), else the
    # same run unbounded: never capped where the GPU runs out.
    device_total_bytes: int
    notes: tuple[str, ...] = ()
    # Scratch the runtime takes while a kernel runs (onnxruntime CPU: Conv's im2col buffer);
    # one part of the device total with the context (DevicePart.CONTEXT, on a CPU runtime
    # DevicePart.SCRATCH), part of runtime_peak_bytes.
    workspace_bytes: int = 0
    # torch-cuda: its caching allocator's segments and the cuBLAS workspaces inside it (in
    # runtime_peak_bytes and context_bytes)
    caching_allocator: CachingAllocatorFacts | None = None
    largest_scratch: LargestScratch | None = None  # torch-cpu
    workspace_node: str | None = None  # the node whose scratch workspace_bytes is, where one
    # Weights and inputs the runtime holds outside the pool runtime_peak_bytes counts
    # (onnxruntime CPU: initializers and the caller's inputs); part of device_total_bytes.
    resident_bytes: int = 0
    # onnxruntime: what its arena holds at the end of the run (`mem_arena_held`).
    arena_held_bytes: int | None = None
    # Weights the runtime copies into the pool runtime_peak_bytes counts, before any kernel
    # runs (onnxruntime CPU: MLAS-prepacked MatMul/Gemm weights, initializers <= 127 bytes);
    # part of runtime_peak_bytes, shown on its own line.
    runtime_weights_bytes: int = 0
    # Bounded by a GPU of `capacity_bytes`: whether every allocation was made within it
    # (`satisfied`; then device_total_bytes <= capacity_bytes). Where one failed, the numbers
    # are the unbounded run's (the demand, more than the capacity) and `out_of_memory` says
    # where the bounded run failed (`failure`: the same in words). None / "": not bounded (a
    # CPU runtime).
    capacity_bytes: int | None = None
    satisfied: bool | None = None
    failure: str = ""
    out_of_memory: OutOfMemoryAt | None = None

    @property
    def fits(self) -> bool | None:
        """Whether the device total is within the GPU: the one fit verdict of an analysis."""
        if self.capacity_bytes is None:
            return None
        return self.device_total_bytes <= self.capacity_bytes

    @property
    def over_bytes(self) -> int | None:
        """The demand less the capacity (negative: to spare); None where not bounded."""
        if self.capacity_bytes is None:
            return None
        return self.device_total_bytes - self.capacity_bytes


class RuntimeModel(Protocol):
    """One runtime's model: which inputs it can model, and its estimate for one."""

    name: Runtime

    def check(self, is_onnx: bool, has_gpu: bool, training: bool) -> None:
        """One clear GraphmemError line for an input this runtime cannot model."""

    def estimate(self, context: RuntimeContext) -> RuntimeEstimate: ...


def default_threads() -> int:
    """onnxruntime's default intra-op pool: one thread per core this process may use (PyTorch's
    too where each core runs one thread)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
