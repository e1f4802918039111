"""The pipeline: import, bind dims, run the passes, return one typed result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphmem.core.ir import Graph
from graphmem.devices.gpus import GpuSpec, find_gpu
from graphmem.frontends.onnx.importer import import_onnx
from graphmem.passes.costs import CostReport, compute_costs
from graphmem.passes.dims import DimBinding, bind_dims, value_bytes
from graphmem.passes.fit import CudaReserve, GpuFit, fit_on_gpu
from graphmem.passes.liveness import LivenessResult, analyze_liveness
from graphmem.passes.modules import ModuleReport, group_by_module
from graphmem.passes.params import ParamReport, count_params
from graphmem.pipeline.planning import SweepRequest, with_plans

if TYPE_CHECKING:
    from graphmem.distributed.kv_cache import KvCacheReport
    from graphmem.distributed.strategies import DistributedReport
    from graphmem.passes.arena import ArenaPlan
    from graphmem.passes.max_batch import MaxBatchResult
    from graphmem.passes.roofline import RooflineResult
    from graphmem.passes.schedule import ScheduleResult
    from graphmem.passes.sweep import SweepResult
    from graphmem.runtime_models.base import RuntimeEstimate
    from graphmem.suggest.cards import SuggestionReport


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
class TrainingInfo:
    """How the training step was built (torch.fx trace, or graphmem/training/expand.py)."""

    optimizer: str  # sgd | momentum | adam | adamw
    amp: str | None  # fp16 | bf16 | None
    grad_accum: int  # micro-batches per optimizer step
    micro_batch: int | None  # the batch of one traced step (first dim of the first input)

    @property
    def effective_batch(self) -> int | None:
        return None if self.micro_batch is None else self.micro_batch * self.grad_accum


@dataclass(frozen=True)
class Analysis:
    model: ModelInfo
    mode: str  # "inference" | "training"
    dims: DimBinding
    params: ParamReport
    costs: CostReport
    liveness: LivenessResult
    fit: GpuFit | None
    graph: Graph
    training: TrainingInfo | None = None
    modules: ModuleReport | None = None
    # graphmem/pipeline/planning.py: best order, arena plan of the model order, and with a GPU the
    # roofline (every dim bound) and the largest batch that fits; the sweep with --sweep.
    schedule: ScheduleResult | None = None
    arena: ArenaPlan | None = None
    roofline: RooflineResult | None = None
    max_batch: MaxBatchResult | None = None
    sweep: SweepResult | None = None
    # graphmem/distributed/attach.py: per-GPU memory under DDP/ZeRO/FSDP/tensor parallel
    # (--gpus/--strategy) and the decoder KV cache (ONNX past inputs, --kv-cache).
    distributed: DistributedReport | None = None
    # graphmem/suggest/cards.py: checkpointing, in-place, AMP, batch (--suggest, or automatic for
    # a training step over its memory budget)
    suggestions: SuggestionReport | None = None
    kv_cache: KvCacheReport | None = None
    # graphmem/runtime_models/select.py (--runtime): what onnxruntime or PyTorch's CUDA allocator
    # holds; runtime_note says why it is missing when it was asked for.
    runtime: RuntimeEstimate | None = None
    runtime_note: str = ""

    @property
    def peak_bytes(self) -> int | str:
        """The live-tensor peak: bytes, or a formula in the free dims."""
        return self.to_dict()["memory"]["peak_bytes"]

    @property
    def breakdown(self) -> dict[str, int | str]:
        """Bytes live at the peak by role (parameters, gradients, saved activations...)."""
        return self.to_dict()["memory"]["breakdown"]

    def to_dict(self) -> dict[str, Any]:
        """The JSON result (schema in the README)."""
        from graphmem.report.json.report import to_dict

        return to_dict(self)

    def to_json(self, path: str | Path) -> None:
        from graphmem.report.json.report import write_json

        write_json(self, Path(path))

    def to_html(self, path: str | Path) -> None:
        from graphmem.report.html.page import write_html

        write_html(self, Path(path))


def analyze_onnx(
    path: str | Path,
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    gpu: str | None = None,
    cuda_reserve_bytes: int | None = None,
    module_depth: int = 2,
    sweep: SweepRequest | None = None,
    plan: bool = True,
    train: bool = False,
    optimizer: str = "adam",
    amp: str | None = None,
    grad_accum: int = 1,
    autocast_device: str = "cuda",
    runtime: str | None = None,
    checkpoints: tuple[str, ...] = (),
) -> Analysis:
    """Analyze an ONNX model for inference; `gpu` is a name from `graphmem gpus`.

    `plan=False` skips graphmem/pipeline/planning.py (schedule, arena, roofline, max batch, sweep).
    `train=True` analyzes one training step built from the graph (graphmem/passes/
    training.py): `optimizer` sgd|momentum|adam|adamw, `amp` fp16|bf16, `grad_accum` N;
    `autocast_device` picks whose autocast op lists AMP follows ("cuda", or "cpu");
    `checkpoints` (module paths or FIRST..LAST node ranges) run under activation
    checkpointing (graphmem/training/checkpoint.py).
    `runtime` ort-cpu|ort-cuda|torch-cuda adds that runtime's model (graphmem/
    runtime_models/select.py; every dim must be bound).
    """
    gpu_spec = find_gpu(gpu) if gpu else None  # a typo fails before the model is read
    imported = import_onnx(path)
    binding = bind_dims(imported.graph, batch, dims or {})
    if binding.bound and _unknown_shapes(imported.graph):
        # Concrete input dims can let shape inference finish what the symbolic one could not.
        retry = import_onnx(path, input_dims=binding.bound)
        if _unknown_shapes(retry.graph) < _unknown_shapes(imported.graph):
            imported = retry
            imported.warnings.append(
                "shapes were inferred with the bound dims fixed: " + ", ".join(
                    f"{k}={v}" for k, v in binding.bound.items()))
    graph = imported.graph
    training = None
    if train:
        from graphmem.training.onnx_step import onnx_training_step

        step = onnx_training_step(graph, binding, optimizer, amp, grad_accum, autocast_device,
                                  checkpoints)
        graph = step.graph
        imported.warnings.extend(step.warnings)
        training = TrainingInfo(optimizer, amp, grad_accum, step.micro_batch)
    info = _model_info(str(path), graph, imported.shape_inference, imported.warnings)
    analysis = run_passes(graph, info, binding, gpu_spec, cuda_reserve_bytes, training,
                          module_depth=module_depth, sweep=sweep, plan=plan)
    if runtime is None:
        return analysis
    from graphmem.runtime_models.select import check_runtime, with_runtime

    check_runtime(runtime, True, gpu_spec is not None, train)
    return with_runtime(analysis, runtime, gpu_spec, cuda_reserve_bytes)


def _unknown_shapes(graph: Graph) -> int:
    return sum(1 for node in graph.nodes for value in node.outputs if not value.shape_known)


def _model_info(path: str, graph: Graph, shape_inference: str, warnings: list[str]) -> ModelInfo:
    return ModelInfo(
        path=path,
        name=graph.name,
        source_format=graph.source_format,
        opset=graph.opset,
        node_count=len(graph.nodes),
        shape_inference=shape_inference,
        warnings=tuple(warnings),
    )


def run_passes(
    graph: Graph,
    info: ModelInfo,
    binding: DimBinding,
    gpu_spec: GpuSpec | None,
    cuda_reserve_bytes: int | None,
    training: TrainingInfo | None = None,
    module_depth: int = 2,
    sweep: SweepRequest | None = None,
    plan: bool = True,
) -> Analysis:
    """The passes every front door shares, on an imported graph with its dims bound."""
    sizes = value_bytes(graph, binding)
    liveness = analyze_liveness(graph, sizes, dims=binding.bound)
    reserve = None
    if cuda_reserve_bytes is not None:
        reserve = CudaReserve(cuda_reserve_bytes, "given with --cuda-reserve")
    costs = compute_costs(graph, binding)
    analysis = Analysis(
        model=info,
        mode="training" if training else "inference",
        dims=binding,
        params=count_params(graph),
        costs=costs,
        liveness=liveness,
        fit=fit_on_gpu(gpu_spec, liveness.peak_bytes, reserve) if gpu_spec else None,
        graph=graph,
        training=training,
        modules=group_by_module(graph, costs, liveness, module_depth),
    )
    return with_plans(analysis, gpu_spec, sweep, sizes) if plan else analysis
