"""The runtime model on an Analysis: what a real runtime holds, next to the live-tensor peak.

With a GPU the runtime is that GPU's (the one the request names, else onnxruntime CUDA for
ONNX inference and PyTorch's caching allocator for training steps and PyTorch models), bounded
by the GPU's memory, and its device total is the analysis's one fit verdict
(graphmem/pipeline/verdict.py). Without a GPU it is the request's runtime, if any (onnxruntime
CPU for ONNX: graphmem/runtime_models/select.py). The models read an analysis whose dims are
all bound, and onnxruntime's view of an ONNX file from the front end's `runtime_inputs`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.request import Request
from graphmem.runtime_models.data_bounds import data_bounds
from graphmem.runtime_models.select import check_runtime, default_runtime
from graphmem.runtime_models.vocabulary import AUTO_OPTIMIZE_INITIALIZER_BYTES, ArenaExtend

if TYPE_CHECKING:  # the GPU's and the runtime models': imported where an estimate is made
    from graphmem.devices.gpus import GpuSpec
    from graphmem.runtime_models.base import RuntimeEstimate

__all__ = ["AUTO_OPTIMIZE_INITIALIZER_BYTES", "runtime_estimate", "with_runtime",
           "with_runtime_request"]


def with_runtime_request(analysis: Analysis, request: Request, gpu: GpuSpec | None
                         ) -> Analysis:
    """With a GPU (and not a bare re-run: planning, or a runtime asked for), the GPU's
    runtime model and the one verdict on it; else `request.runtime` (unchanged for None)."""
    if gpu is not None and (request.plan or request.runtime is not None):
        from graphmem.pipeline.verdict import with_verdict

        return with_verdict(analysis, request, gpu)
    options = request.runtime
    if options is None:
        return analysis
    is_onnx, training = not request.is_torch, analysis.mode == "training"
    runtime = options.name or default_runtime(is_onnx, gpu is not None, training)
    if runtime is None:
        return analysis
    check_runtime(runtime, is_onnx, gpu is not None, training)
    return with_runtime(analysis, runtime, gpu, request.cuda_reserve_bytes, options.threads,
                        options.ort_optimization, options.arena_extend)


def with_runtime(analysis: Analysis, runtime: str | None, gpu: GpuSpec | None,
                 cuda_reserve_bytes: int | None = None, threads: int | None = None,
                 ort_optimization: str | None = None,
                 arena_extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO) -> Analysis:
    """The analysis with `runtime` set; unchanged when no runtime applies or dims are free."""
    if runtime is None:
        return analysis
    free = analysis.dims.free
    if runtime in ("ort-cpu", "ort-cuda"):  # they size NonZero's outputs (data_bounds.py)
        data_sized = data_bounds(analysis.graph, analysis.dims.bound).bound
        free = tuple(dim for dim in free if dim not in data_sized)
    if free:
        return dataclasses.replace(analysis, runtime_note=(
            f"--runtime {runtime} needs every dim bound (free: {', '.join(free)});"
            " bind them with --batch/--dim"))
    result = runtime_estimate(analysis, runtime, gpu, cuda_reserve_bytes, threads,
                              ort_optimization, arena_extend)
    return dataclasses.replace(analysis, runtime=result)


def runtime_estimate(analysis: Analysis, runtime: str, gpu: GpuSpec | None,
                     cuda_reserve_bytes: int | None = None, threads: int | None = None,
                     ort_optimization: str | None = None,
                     arena_extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO,
                     optimize_max_bytes: int | None = None) -> RuntimeEstimate:
    """`runtime`'s estimate for `analysis` (every dim bound), unbounded by any GPU's memory.
    `ort_optimization` (ort-cpu): the session's graph optimization level; None: "all" for
    models with up to AUTO_OPTIMIZE_INITIALIZER_BYTES of weights, the graph as written above.
    `arena_extend`: how onnxruntime's arena grows (ort-cpu, ort-cuda). `optimize_max_bytes`:
    an asked level's bound on the optimizing session's tensors (None: 2 GiB)."""
    from graphmem.pipeline import device_total

    return device_total.runtime_estimate(
        analysis, runtime, gpu, cuda_reserve_bytes, threads, ort_optimization,
        auto_optimize_max_bytes=AUTO_OPTIMIZE_INITIALIZER_BYTES, ort_arena_extend=arena_extend,
        optimize_max_bytes=optimize_max_bytes)
