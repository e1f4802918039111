"""The runtime model of a GPU at any dims: the device total every fit verdict reads.

`runtime_estimate` runs a runtime model on an analysis (every dim bound, or bound here with
`dims`), bounded by the GPU's capacity when one is given (where that run fails, its device
total is the demand: the same run unbounded); `DeviceTotalProbe` answers "what is
the device total with this dim at that value" for max batch, sweeps and `graphmem gpus --fits`
(re-running the whole analysis there only where binding a dim changes the shapes); `device_fit`
turns an estimate into the one verdict (graphmem/passes/fit.py `GpuFit`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from graphmem.core.ir import RESIDENT_ROLES, Graph
from graphmem.core.symbolic import SymInt, sum_sizes
from graphmem.core.units import MAX_BYTES
from graphmem.devices.error_bands import error_band, runtime_band_path
from graphmem.devices.gpus import GpuSpec
from graphmem.errors import GraphmemError
from graphmem.passes.dims import DimBinding
from graphmem.passes.fit import (
    Caveat,
    CudaReserve,
    DevicePart,
    FitPart,
    GpuFit,
    WeightsApart,
    default_cuda_reserve,
    fit_on_device_total,
    with_error_band,
)
from graphmem.passes.routed_dims import rebind
from graphmem.runtime_models.base import (
    AUTO_OPTIMIZE_INITIALIZER_BYTES,
    Runtime,
    RuntimeContext,
    RuntimeEstimate,
)
from graphmem.runtime_models.bfc_arena import ArenaExtend
from graphmem.runtime_models.data_bounds import has_data_sized_ops
from graphmem.runtime_models.graph_cache import cached_per_graph
from graphmem.runtime_models.select import default_runtime, estimate
from graphmem.runtime_models.value_sizes import ProbeSizes

if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis

Reanalyze = Callable[[dict[str, int]], "Analysis"]

# which way each runtime model's device total may be wrong, as the verdict states it
CAVEATS = {Runtime.ORT_CUDA: Caveat.ORT_CUDA_MODEL,
           Runtime.TORCH_CUDA: Caveat.TORCH_CUDA_WORKSPACES}


@dataclass(frozen=True)
class DeviceModel:
    """The runtime model a GPU's verdict uses, and its options."""

    runtime: str
    gpu: GpuSpec
    cuda_reserve_bytes: int | None = None  # --cuda-reserve: replaces the measured context
    threads: int | None = None
    ort_optimization: str | None = None
    ort_arena_extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO

    @property
    def capacity_bytes(self) -> int:
        return self.gpu.capacity_bytes

    @property
    def reserve(self) -> CudaReserve:
        return reserve_of(self.gpu, self.cuda_reserve_bytes)

    @property
    def basis(self) -> str:
        return f"{self.runtime} device total"


def reserve_of(gpu: GpuSpec, cuda_reserve_bytes: int | None) -> CudaReserve:
    if cuda_reserve_bytes is not None:
        return CudaReserve(cuda_reserve_bytes, "given with --cuda-reserve")
    return default_cuda_reserve(gpu.architecture)


def gpu_runtime(analysis: Analysis, named: str | None = None) -> str:
    """The runtime of a GPU's verdict: the one named, else ort-cuda for ONNX inference and
    torch-cuda for training steps and PyTorch models."""
    if named is not None:
        return named
    runtime = default_runtime(analysis.model.source_format == "onnx", True,
                              analysis.mode == "training")
    assert runtime is not None  # with a GPU every input has a runtime model
    return str(runtime)


def runtime_estimate(analysis: Analysis, runtime: str, gpu: GpuSpec | None,
                     cuda_reserve_bytes: int | None = None, threads: int | None = None,
                     ort_optimization: str | None = None, dims: DimBinding | None = None,
                     capacity_bytes: int | None = None,
                     auto_optimize_max_bytes: int = AUTO_OPTIMIZE_INITIALIZER_BYTES,
                     residents: SymInt | None = None,
                     sizes: Mapping[str, SymInt | None] | None = None,
                     notes: bool = True,
                     ort_arena_extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO,
                     optimize_max_bytes: int | None = None) -> RuntimeEstimate:
    """`runtime`'s estimate for `analysis` at `dims` (default: its own, every dim bound);
    `capacity_bytes` bounds a CUDA runtime's allocator as the GPU does. `ort_optimization`
    (ort-cpu): the session's graph optimization level; None: "all" for models with up to
    AUTO_OPTIMIZE_INITIALIZER_BYTES of weights, the graph as written above (an asked level:
    up to `optimize_max_bytes`, None: 2 GiB). `residents`:
    `resident_formula(analysis.graph)`, where the caller keeps it for many dims; `sizes`: the
    graph's value sizes at `dims` (`value_bytes`), where the caller has them; `notes` False:
    the caller reads the numbers alone (the model may leave its notes out)."""
    dims = dims or analysis.dims
    if sizes is None and dims is analysis.dims:
        sizes = analysis.sizes  # bound by the passes at these dims (None: bound by the model)
        if sizes is not None and runtime in ("ort-cuda", "ort-cpu"):
            # the same sizes (value_bytes') by position: onnxruntime's plan reads them so
            sizes = probe_table(analysis).at(dims.bound)
    context = RuntimeContext(
        graph=analysis.graph, dims=dims, training=analysis.mode == "training",
        resident_bytes=_resident_bytes(analysis, dims, residents), gpu=gpu,
        cuda_reserve_bytes=cuda_reserve_bytes, threads=threads,
        ort_optimization=ort_optimization, ort_source=analysis.runtime_inputs,
        auto_optimize_max_bytes=auto_optimize_max_bytes, capacity_bytes=capacity_bytes,
        sizes=sizes, notes=notes, ort_arena_extend=ort_arena_extend,
        optimize_max_bytes=optimize_max_bytes, moe_routing=analysis.moe_routing)
    return estimate(runtime, context)


def _resident_bytes(analysis: Analysis, dims: DimBinding, residents: SymInt | None) -> int:
    """Inputs, weights and constants at `dims` (the liveness's residents: its sizes were bound
    at the analysis's own dims, so they are summed again from the graph)."""
    if dims is analysis.dims:
        size = analysis.liveness.resident_bytes
    else:
        formula = resident_formula(analysis.graph) if residents is None else residents
        size = formula.bind(dims.bound)
    return int(size) if size.is_constant else 0


def resident_formula(graph: Graph) -> SymInt:
    """The inputs, weights and constants of `graph`, unbound: binding the sum gives the sum
    of the bound sizes (binding is exact polynomial substitution)."""
    return sum_sizes(size for v in graph.values.values()
                     if v.role in RESIDENT_ROLES and v.alias_of is None
                     and (size := v.nbytes) is not None)


def device_estimate(analysis: Analysis, model: DeviceModel, dims: DimBinding | None = None,
                    residents: SymInt | None = None,
                    sizes: Mapping[str, SymInt | None] | None = None,
                    notes: bool = True) -> RuntimeEstimate:
    """The GPU's runtime model on `analysis`, bounded by the GPU's capacity (`residents`,
    `sizes`, `notes`: see runtime_estimate)."""
    return runtime_estimate(analysis, model.runtime, model.gpu, model.cuda_reserve_bytes,
                            model.threads, model.ort_optimization, dims, model.capacity_bytes,
                            residents=residents, sizes=sizes, notes=notes,
                            ort_arena_extend=model.ort_arena_extend)


def probe_table(analysis: Analysis) -> ProbeSizes:
    """The analysis's graph's size table for onnxruntime's models, made once per graph (the
    verdict's run and every probe of its searches bind it) from the passes' table."""
    graph = analysis.graph
    return cached_per_graph(graph, (ProbeSizes,),
                            lambda: ProbeSizes(graph, analysis.size_table))


def runtime_parts(estimate: RuntimeEstimate) -> tuple[FitPart, ...]:
    """The parts that add up to the estimate's device total (the runtime's weight pool and
    the residents only where the runtime model has them)."""
    # where the runtime keeps the weights apart (onnxruntime), its tensors at the peak are
    # the activations and outputs alone
    apart = WeightsApart() if estimate.resident_bytes or estimate.runtime_weights_bytes else None
    context = DevicePart.SCRATCH if Runtime(estimate.runtime).on_cpu else DevicePart.CONTEXT
    return (
        FitPart(DevicePart.TENSORS, SymInt.const(estimate.tensors_at_peak_bytes), apart),
        *_present(DevicePart.RUNTIME_WEIGHTS, estimate.runtime_weights_bytes),
        *_present(DevicePart.RESIDENT, estimate.resident_bytes),
        FitPart(DevicePart.ALLOCATOR, SymInt.const(estimate.allocator_overhead_bytes)),
        FitPart(context, SymInt.const(estimate.context_bytes + estimate.workspace_bytes)),
    )


def _present(part: DevicePart, size: int) -> tuple[FitPart, ...]:
    return (FitPart(part, SymInt.const(size)),) if size else ()


def device_fit(analysis: Analysis, estimate: RuntimeEstimate, model: DeviceModel) -> GpuFit:
    """The verdict on `estimate`'s device total (`analysis` gives the live-tensor peak)."""
    fit = fit_on_device_total(model.gpu, model.reserve, estimate.device_total_bytes,
                              analysis.liveness.peak_bytes, estimate.runtime,
                              runtime_parts(estimate), estimate.failure,
                              CAVEATS.get(Runtime(estimate.runtime)), estimate.out_of_memory)
    path = runtime_band_path(estimate.runtime, analysis.mode == "training")
    return fit if path is None else with_error_band(fit, error_band(path))


class DeviceTotalProbe:
    """One GPU's device total with `dim` at any value, every other dim bound as in `analysis`
    (`estimate` keeps each probe's estimate: its numbers, without the model's notes).

    Where the graph's symbolic sizes are exact the runtime model runs on the same graph at the
    new dims; where binding dims changes the shapes (`reanalyze` given), the whole analysis
    is re-run at them first, as `--batch N` would run it."""

    def __init__(self, analysis: Analysis, dim: str, model: DeviceModel,
                 reanalyze: Reanalyze | None = None) -> None:
        self.analysis = analysis
        self.dim = dim
        self.model = model
        self.reanalyze = reanalyze
        # the dims given: a mixture of experts' routed counts follow them (run.py `_routed`)
        self.others = {k: v for k, v in analysis.dims.given.items() if k != dim}
        # each value's estimate once, in a dict: a cached bound method is a reference
        # cycle, which a one-command process would freeze with the analysis
        self._estimates: dict[int, RuntimeEstimate | None] = {}
        self.runs = 0
        # made once: every probe on the same graph binds the same formulas
        same_graph = reanalyze is None
        self.residents = resident_formula(analysis.graph) if same_graph else None
        # onnxruntime's models size the analysed graph's values (torch-cuda sizes its own)
        sized = same_graph and model.runtime in ("ort-cuda", "ort-cpu")
        self.table = probe_table(analysis) if sized else None

    def estimate(self, value: int) -> RuntimeEstimate | None:
        """None where the model cannot be sized at this value (a tensor over 4 EiB)."""
        if value not in self._estimates:
            self._estimates[value] = self._estimate(value)
        return self._estimates[value]

    def _estimate(self, value: int) -> RuntimeEstimate | None:
        self.runs += 1
        bound = {**self.others, self.dim: value}
        try:
            if self.reanalyze is not None:
                return device_estimate(self.reanalyze(bound), self.model, notes=False)
            binding = self.binding(bound)
            # by position: the plan's buffers read theirs so (runtime_models/value_sizes.py)
            sizes = self.table.at(binding.bound) if self.table is not None else None
            return device_estimate(self.analysis, self.model, binding, self.residents, sizes,
                                   notes=False)
        except GraphmemError:
            return None

    def binding(self, bound: dict[str, int]) -> DimBinding:
        """The analysis's dims rebound at `bound` (`rebind`); on a graph without NonZero, no
        router's counts to bind, made without routed_dims' walk over every node."""
        dims = self.analysis.dims
        if has_data_sized_ops(self.analysis.graph):
            return rebind(self.analysis.graph, dims, bound, self.analysis.moe_routing)
        return DimBinding(bound=dict(bound), free=tuple(d for d in dims.free if d not in bound),
                          batch_dim=dims.batch_dim)

    def total(self, value: int) -> int:
        """The device total at `dim` = value (more than any GPU where it cannot be sized)."""
        result = self.estimate(value)
        return MAX_BYTES + 1 if result is None else result.device_total_bytes
