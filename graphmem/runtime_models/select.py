"""`--runtime`: what a real runtime holds, next to graphmem's live-tensor peak.

Picks the runtime model (onnxruntime CPU or CUDA for ONNX models, PyTorch's CUDA caching
allocator for PyTorch models), runs it on an analysis whose dims are all bound, and returns
the analysis with `runtime` set. Only this module and the importers know where the shapes
onnxruntime plans with come from (the ONNX file itself, read once per estimate as the importer
reads it: never its external data).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from graphmem.devices.gpus import GpuSpec
from graphmem.errors import GraphmemError
from graphmem.passes.dims import value_bytes
from graphmem.runtime_models.base import RUNTIMES, RuntimeEstimate

if TYPE_CHECKING:
    import onnx

    from graphmem.frontends.onnx.ort_optimized import OptimizedGraph
    from graphmem.pipeline.analysis import Analysis


def default_runtime(is_onnx: bool, has_gpu: bool, training: bool) -> str | None:
    """ort-cuda for ONNX inference with a GPU, ort-cpu without; torch-cuda with a GPU for
    PyTorch models and for ONNX training steps (graphmem builds those as PyTorch runs them)."""
    if is_onnx and not training:
        return "ort-cuda" if has_gpu else "ort-cpu"
    return "torch-cuda" if has_gpu else None


def check_runtime(runtime: str, is_onnx: bool, has_gpu: bool, training: bool) -> None:
    """One clear line for a runtime that cannot model this input."""
    if runtime not in RUNTIMES:
        raise GraphmemError(f"--runtime {runtime}: choose one of {', '.join(RUNTIMES)}")
    if runtime.startswith("ort-") and not is_onnx:
        raise GraphmemError(f"--runtime {runtime} models onnxruntime running an ONNX file;"
                            " for a PyTorch model use --runtime torch-cuda (with --gpu)")
    if runtime.startswith("ort-") and training:
        raise GraphmemError(f"--runtime {runtime} models inference; drop --train, or use"
                            " --runtime torch-cuda for a training step")
    if runtime.endswith("-cuda") and not has_gpu:
        raise GraphmemError(f"--runtime {runtime} needs a GPU to size the CUDA context: add"
                            " --gpu NAME (see 'graphmem gpus')")


ORT_OPTIMIZATION_LEVELS = ("disabled", "basic", "extended", "all")
# Without --ort-optimization graphmem models onnxruntime's default level ("all", what `graphmem
# verify` runs too), but builds the optimizing session (synthetic weights of the model's size
# in memory: graphmem never reads weights) only for models up to this size; above it, the
# graph as written is planned and the note says how to ask for the optimized one (up to
# frontends/onnx/ort_optimized.py's limit).
AUTO_OPTIMIZE_INITIALIZER_BYTES = 256 << 20


def with_runtime(analysis: Analysis, runtime: str | None, gpu: GpuSpec | None,
                 cuda_reserve_bytes: int | None = None, threads: int | None = None,
                 ort_optimization: str | None = None) -> Analysis:
    """The analysis with `runtime` set; unchanged when no runtime applies or dims are free."""
    if runtime is None:
        return analysis
    if analysis.dims.free:
        return dataclasses.replace(analysis, runtime_note=(
            f"--runtime {runtime} needs every dim bound (free: {', '.join(analysis.dims.free)});"
            " bind them with --batch/--dim"))
    estimate = runtime_estimate(analysis, runtime, gpu, cuda_reserve_bytes, threads,
                                ort_optimization)
    return dataclasses.replace(analysis, runtime=estimate)


def runtime_estimate(analysis: Analysis, runtime: str, gpu: GpuSpec | None,
                     cuda_reserve_bytes: int | None = None, threads: int | None = None,
                     ort_optimization: str | None = None) -> RuntimeEstimate:
    """`ort_optimization` (ort-cpu): the graph optimization level of the session modelled;
    above "disabled", onnxruntime's optimized graph is planned (graphmem/frontends/onnx/
    ort_optimized.py), else the graph as written. None: "all" for models with up to
    AUTO_OPTIMIZE_INITIALIZER_BYTES of weights, the graph as written above."""
    if runtime == "torch-cuda":
        return _torch_cuda(analysis, _need_gpu(gpu, runtime), cuda_reserve_bytes)
    from graphmem.runtime_models.ort_cpu import ort_cpu_estimate, ort_cuda_estimate

    graph = analysis.graph
    resident = int(analysis.liveness.resident_bytes)
    threads = threads or default_threads()
    model = _onnx_model(analysis)
    if runtime == "ort-cpu":
        optimized, note = _optimized(analysis, model, ort_optimization)
        if optimized is not None:  # the graph onnxruntime runs, in the order it runs it
            return ort_cpu_estimate(
                optimized.graph, value_bytes(optimized.graph, analysis.dims), threads,
                analysis.dims.bound, optimized.plan_shapes, resident,
                order=optimized.graph.nodes, graph_note=note)
        return ort_cpu_estimate(graph, value_bytes(graph, analysis.dims), threads,
                                analysis.dims.bound, _plan_shapes(model), resident,
                                graph_note=note)
    sizes = value_bytes(graph, analysis.dims)
    shapes = _plan_shapes(model)
    from graphmem.runtime_models.torch_cuda import cuda_overhead

    overhead = cuda_overhead(_need_gpu(gpu, runtime).architecture, cuda_reserve_bytes)
    return ort_cuda_estimate(graph, sizes, shapes, resident, overhead.context_bytes,
                             overhead.context_source)


def _onnx_model(analysis: Analysis) -> onnx.ModelProto | None:
    """The analysed ONNX file's protobuf, read as the importer reads it (only the model file
    is opened, external data cut off: frontends/onnx/untrusted.py); None for other inputs."""
    path = Path(analysis.model.path)
    if analysis.model.source_format != "onnx" or not path.is_file():
        return None
    from graphmem.frontends.onnx.importer import read_model

    return read_model(path)


def _optimized(analysis: Analysis, model: onnx.ModelProto | None,
               level: str | None) -> tuple[OptimizedGraph | None, str]:
    """onnxruntime's optimized graph at `level` and the note saying which graph was planned;
    (None, note) where the graph as written is planned."""
    asked = level is not None
    level = level or "all"
    if level not in ORT_OPTIMIZATION_LEVELS:
        raise GraphmemError(f"--ort-optimization {level}: choose one of"
                            f" {', '.join(ORT_OPTIMIZATION_LEVELS)}")
    if level == "disabled":
        return None, "planned the graph as written (ORT_DISABLE_ALL)"
    if model is None:
        return None, "planned the graph as written: no ONNX file to optimize"
    from graphmem.frontends.onnx.ort_optimized import OptimizationRefused, optimized_graph

    try:
        optimized = optimized_graph(model, level, analysis.dims.bound,
                                    None if asked else AUTO_OPTIMIZE_INITIALIZER_BYTES)
    except OptimizationRefused as refused:
        hint = "" if asked else (
            " (--ort-optimization all plans onnxruntime's optimized graph anyway: it builds a"
            " session holding synthetic weights of the model's size)")
        return None, f"{refused}{hint}"
    except GraphmemError as error:  # the saved graph did not import: plan the file's
        return None, f"not optimized offline ({error}); planned the graph as written"
    note = (f"planned onnxruntime's optimized graph (--ort-optimization {level}):"
            f" {len(optimized.graph.nodes)} nodes, {optimized.nodes_before} as written")
    return optimized, "; ".join((note, *optimized.notes))


def default_threads() -> int:
    """onnxruntime's default intra-op pool: one thread per core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _plan_shapes(model: onnx.ModelProto | None) -> dict | None:
    """The shapes onnxruntime plans with, from the ONNX model (None: use graphmem's)."""
    if model is None:
        return None
    from graphmem.frontends.onnx.ort_plan_shapes import ort_plan_shapes

    return ort_plan_shapes(model)


def _need_gpu(gpu: GpuSpec | None, runtime: str) -> GpuSpec:
    if gpu is None:
        raise GraphmemError(f"--runtime {runtime} needs --gpu NAME (see 'graphmem gpus')")
    return gpu


def _torch_cuda(analysis: Analysis, gpu: GpuSpec,
                cuda_reserve_bytes: int | None) -> RuntimeEstimate:
    from graphmem.runtime_models.torch_cuda import torch_cuda_estimate

    return torch_cuda_estimate(analysis, gpu, cuda_reserve_bytes)
