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
from enum import StrEnum
from typing import Protocol

from graphmem.core.ir import Graph
from graphmem.core.ort_view import OrtGraphSource
from graphmem.core.symbolic import SymInt
from graphmem.devices.gpus import GpuSpec
from graphmem.passes.dims import DimBinding
from graphmem.passes.fit import OutOfMemoryAt
from graphmem.runtime_models.bfc_arena import ArenaExtend


class Runtime(StrEnum):
    ORT_CPU = "ort-cpu"  # onnxruntime, CPU execution provider
    ORT_CUDA = "ort-cuda"  # onnxruntime, CUDA execution provider
    TORCH_CUDA = "torch-cuda"  # eager PyTorch and its CUDA caching allocator
    TORCH_CPU = "torch-cpu"  # eager PyTorch on the CPU, kernels' scratch included


RUNTIMES: tuple[str, ...] = tuple(r.value for r in Runtime)
# onnxruntime's graph optimization levels (GraphOptimizationLevel)
ORT_OPTIMIZATION_LEVELS = ("disabled", "basic", "extended", "all")
# Without an optimization level graphmem models onnxruntime's default ("all", what `graphmem
# verify` runs too), but builds the optimizing session (synthetic weights of the model's size
# in memory: graphmem never reads weights) only for models up to this size; above it, the
# graph as written is planned and the note says how to ask for the optimized one.
AUTO_OPTIMIZE_INITIALIZER_BYTES = 256 << 20


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
    # the GPU's memory (what the driver reports where known): the CUDA runtimes' allocators
    # are bounded by it, as on the device (None: unbounded)
    capacity_bytes: int | None = None
    # every value's size at `dims` (passes/dims.py `value_bytes`), where the caller has them
    # (a largest-batch search binds one SizeTable per probe); None: the model computes them
    sizes: Mapping[str, SymInt | None] | None = None
    # False: only the estimate's numbers are read (a largest-batch search's probes), so the
    # models skip writing their notes
    notes: bool = True

    @property
    def mode(self) -> str:
        return "training" if self.training else "inference"


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
    counts: str  # what runtime_peak_bytes includes and leaves out, in words
    notes: tuple[str, ...] = ()
    # Scratch the runtime takes while a kernel runs (onnxruntime CPU: Conv's im2col buffer);
    # shown with the context on the "context + workspaces" line, part of runtime_peak_bytes.
    workspace_bytes: int = 0
    # how the report labels context_bytes + workspace_bytes
    workspace_label: str = "context + workspaces"
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
