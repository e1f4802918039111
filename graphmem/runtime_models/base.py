"""What a runtime adds to the live tensors: the shared result of every runtime model.

A runtime model (onnxruntime's CPU/CUDA allocation planner and arena, PyTorch's CUDA caching
allocator) turns graphmem's live tensors into the numbers that runtime reports and the device
total nvidia-smi shows. Each part is its own labelled line; none is folded silently.
"""

from __future__ import annotations

from dataclasses import dataclass

RUNTIMES = ("ort-cpu", "ort-cuda", "torch-cuda")


@dataclass(frozen=True)
class RuntimeEstimate:
    runtime: str  # one of RUNTIMES
    tensors_at_peak_bytes: int  # bytes of the tensors the runtime holds at its peak
    allocator_overhead_bytes: int  # rounding, pools, segments and reuse gaps on top of those
    context_bytes: int  # CUDA context + library workspaces (0 on CPU)
    runtime_peak_bytes: int  # the runtime's own in-use peak, counted as the runtime counts it
    device_total_bytes: int  # what nvidia-smi would show (CPU: the process's tensor memory)
    counts: str  # what runtime_peak_bytes includes and leaves out, in words
    notes: tuple[str, ...] = ()
    # Scratch the runtime takes while a kernel runs (onnxruntime CPU: Conv's im2col buffer);
    # shown with the context on the "context + workspaces" line, part of runtime_peak_bytes.
    workspace_bytes: int = 0
    # Weights and inputs the runtime holds outside the pool runtime_peak_bytes counts
    # (onnxruntime CPU: initializers and the caller's inputs); part of device_total_bytes.
    resident_bytes: int = 0
    # onnxruntime: what its arena holds at the end of the run (`mem_arena_held`).
    arena_held_bytes: int | None = None
    # Weights the runtime copies into the pool runtime_peak_bytes counts, before any kernel
    # runs (onnxruntime CPU: MLAS-prepacked MatMul/Gemm weights, initializers <= 127 bytes);
    # part of runtime_peak_bytes, shown on its own line.
    runtime_weights_bytes: int = 0
