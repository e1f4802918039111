"""The result of one analysis: typed results only, no rendering.

graphmem/pipeline/run.py `analyze(request)` makes it; the reports (graphmem/report/) render
it; graphmem/api.py's `Result` adds to_dict/to_json/to_html for Python users.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from graphmem.core.conventions import ROLE_KEYS, Amp, Optimizer, TrainingOptions
from graphmem.core.ir import Graph
from graphmem.core.peak_formula import Formula
from graphmem.core.routing import DEFAULT_ROUTING, MoeRouting
from graphmem.core.symbolic import SymInt
from graphmem.passes.costs import CostReport
from graphmem.passes.dims import DimBinding, SizeTable
from graphmem.passes.liveness import LivenessResult
from graphmem.passes.modules import ModuleReport
from graphmem.passes.params import ParamReport

if TYPE_CHECKING:  # the results of what an analysis was asked for (a GPU, a PyTorch step)
    from graphmem.core.ort_view import OrtGraphSource
    from graphmem.distributed.kv_cache import KvCacheReport
    from graphmem.distributed.ranks import DistributedReport
    from graphmem.frontends.torch.finetune import FinetuneReport
    from graphmem.frontends.torch.kernel_choice import KernelChoice
    from graphmem.passes.arena import ArenaPlan
    from graphmem.passes.fit import GpuFit
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
    # a PyTorch step traced for a CUDA GPU: the kernels it assumed (attention backend, fused
    # dropout, cuDNN batch norm, optimizer); () for ONNX models and CPU traces
    kernels: tuple[KernelChoice, ...] = ()
    # what the front end built or applied (a config's model, LoRA, weight layouts): information,
    # not warnings; the terminal shows them with --verbose, JSON `model.notes`
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrainingInfo:
    """How the training step was built (torch.fx trace, or graphmem/training/expand.py)."""

    options: TrainingOptions
    micro_batch: int | None  # the batch of one analysed step

    @property
    def optimizer(self) -> Optimizer:
        return self.options.optimizer

    @property
    def amp(self) -> Amp | None:
        return self.options.amp

    @property
    def grad_accum(self) -> int:
        return self.options.grad_accum

    @property
    def effective_batch(self) -> int | None:
        return None if self.micro_batch is None else self.micro_batch * self.grad_accum


__all__ = ["Analysis", "Formula", "ModelInfo", "TrainingInfo", "size_of"]


def size_of(value: SymInt, terms: tuple[SymInt, ...] = ()) -> int | Formula:
    """An int where `value` is a number, else the formula (the max of `terms`, if given):
    graphmem/core/peak_formula.py's exact maximum, readable per range of a free dim."""
    if value.is_constant:
        return int(value)
    return Formula(terms or (value,))


@dataclass(frozen=True)
class Analysis:
    model: ModelInfo
    mode: str  # "inference" | "training"
    dims: DimBinding
    params: ParamReport
    costs: CostReport
    liveness: LivenessResult
    # the one fit verdict on the GPU (graphmem/pipeline/verdict.py): fits, utilization and
    # max batch are read from its device total; every report renders it
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
    # graphmem/pipeline/extras.py: per-GPU memory under DDP/ZeRO/FSDP/tensor parallel
    # (--gpus/--strategy) and the decoder KV cache (ONNX past inputs, --kv-cache).
    distributed: DistributedReport | None = None
    # graphmem/suggest/driver.py: checkpointing, in-place, AMP, batch (--suggest, or automatic
    # for a training step over its memory budget)
    suggestions: SuggestionReport | None = None
    kv_cache: KvCacheReport | None = None
    # graphmem/pipeline/runtime.py (--runtime): what onnxruntime or PyTorch's CUDA allocator
    # holds; runtime_note says why it is missing when it was asked for.
    runtime: RuntimeEstimate | None = None
    runtime_note: str = ""
    # with the batch dim free and a GPU: the runtime model at the largest batch that fits
    # (graphmem/pipeline/verdict.py), the device total the verdict's "up to batch=N" reads
    runtime_at_max_batch: RuntimeEstimate | None = None
    # ONNX: what onnxruntime's planner sees of the file, from the front end (the runtime
    # models' input); None for PyTorch models
    runtime_inputs: OrtGraphSource | None = field(default=None, repr=False, compare=False)
    # the whole analysis at other dims, where binding dims changes the shapes (planning's
    # `reanalyzer`): the verdict's runtime model re-runs it for max batch and sweeps
    reanalyze: Callable[[dict[str, int]], Analysis] | None = field(
        default=None, repr=False, compare=False)
    # a PyTorch model: the transformers model built from a config, LoRA/QLoRA, MoE routing
    # and the checkpointed layers (graphmem/frontends/torch/peft.py); None otherwise
    finetune: FinetuneReport | None = None
    # every value's size at `dims` (passes/dims.py value_bytes), as the passes bound them: the
    # runtime models at these dims read them rather than bind the graph again (read-only)
    sizes: Mapping[str, SymInt | None] | None = field(default=None, repr=False, compare=False)
    # the table `sizes` were bound from (its distinct sizes by value position): the runtime
    # models' probes bind it at their dims (pipeline/device_total.py `probe_table`)
    size_table: SizeTable | None = field(default=None, repr=False, compare=False)
    # --moe-routing: the ONNX runtime models size a router's NonZero outputs by it
    # (graphmem/runtime_models/data_bounds.py); the torch front end traces with it
    moe_routing: MoeRouting = DEFAULT_ROUTING

    @property
    def peak_bytes(self) -> int | Formula:
        """The live-tensor peak: bytes, or a formula in the free dims (the max of the
        liveness's peak candidates)."""
        liveness = self.liveness
        return size_of(liveness.peak_bytes, liveness.peak_candidates)

    @property
    def breakdown(self) -> dict[str, int | Formula]:
        """Bytes live at the peak by role ("parameters", "gradients", "saved_activations"...)."""
        return {ROLE_KEYS[role]: size_of(size)
                for role, size in self.liveness.breakdown_at_peak.items()}
