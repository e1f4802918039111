"""The pipeline: import, bind dims, run the passes, return one typed result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from graphmem.gpus import find_gpu
from graphmem.importers.onnx_importer import import_onnx
from graphmem.ir import Graph
from graphmem.passes.costs import CostReport, compute_costs
from graphmem.passes.dims import DimBinding, bind_dims, value_bytes
from graphmem.passes.fit import CudaReserve, GpuFit, fit_on_gpu
from graphmem.passes.liveness import LivenessResult, analyze_liveness
from graphmem.passes.params import ParamReport, count_params


@dataclass(frozen=True)
class ModelInfo:
    path: str
    name: str
    source_format: str
    opset: int
    node_count: int
    shape_inference: str
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class Analysis:
    model: ModelInfo
    mode: str  # "inference" (training lands with the training issues)
    dims: DimBinding
    params: ParamReport
    costs: CostReport
    liveness: LivenessResult
    fit: GpuFit | None
    graph: Graph


def analyze_onnx(
    path: str | Path,
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    gpu: str | None = None,
    cuda_reserve_bytes: int | None = None,
) -> Analysis:
    """Analyze an ONNX model for inference; `gpu` is a name from `graphmem gpus`."""
    gpu_spec = find_gpu(gpu) if gpu else None  # a typo fails before the model is read
    imported = import_onnx(path)
    binding = bind_dims(imported.graph, batch, dims or {})
    if imported.symbolic_inference_failed and binding.bound:
        # Concrete input dims let onnx's inference finish what the symbolic one could not.
        imported = import_onnx(path, input_dims=binding.bound)
        imported.warnings.append(
            "shapes were inferred with the bound dims fixed: " + ", ".join(
                f"{k}={v}" for k, v in binding.bound.items()))
    graph = imported.graph
    liveness = analyze_liveness(graph, value_bytes(graph, binding), dims=binding.bound)
    reserve = None
    if cuda_reserve_bytes is not None:
        reserve = CudaReserve(cuda_reserve_bytes, "given with --cuda-reserve")
    return Analysis(
        model=ModelInfo(
            path=str(path),
            name=graph.name,
            source_format=graph.source_format,
            opset=graph.opset,
            node_count=len(graph.nodes),
            shape_inference=imported.shape_inference,
            warnings=tuple(imported.warnings),
        ),
        mode="inference",
        dims=binding,
        params=count_params(graph),
        costs=compute_costs(graph, binding),
        liveness=liveness,
        fit=fit_on_gpu(gpu_spec, liveness.peak_bytes, reserve) if gpu_spec else None,
        graph=graph,
    )
