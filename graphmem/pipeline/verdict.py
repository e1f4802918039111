"""One verdict per GPU, from one device total (graphmem/passes/fit.py `GpuFit`).

With `--gpu`, the GPU's runtime model (onnxruntime CUDA for ONNX inference, PyTorch's caching
allocator for training steps and PyTorch models, or the one `--runtime` names), bounded by the
GPU's memory, gives the device total (where the bounded run fails, the demand: the same run
on a GPU large enough); "fits", the utilization, the largest batch (the runtime
model re-run at each batch the search probes, the live-peak answer only its starting guess)
and each sweep point's fit are all read from that number, and every report renders this one
result. While dims are free the device total cannot be computed: the verdict then reads the
live-tensor peak + the CUDA context, and says so. With a distributed strategy
(`with_distributed_verdict`) the verdict and the max batch read the distributed plan's per-GPU
device total instead (docs/planning.md, "One verdict per GPU").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from graphmem.core.symbolic import SymInt
from graphmem.core.units import MAX_BYTES
from graphmem.devices.error_bands import error_band
from graphmem.devices.gpus import GpuSpec
from graphmem.errors import GraphmemError
from graphmem.passes.fit import (
    Caveat,
    DevicePart,
    FitPart,
    fit_on_gpu,
    fit_on_parts,
    with_error_band,
)
from graphmem.passes.max_batch import MaxBatchResult, find_max_batch
from graphmem.passes.routed_dims import rebind
from graphmem.passes.sweep import SweepResult, with_device_totals
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.device_total import (
    DeviceModel,
    DeviceTotalProbe,
    device_estimate,
    device_fit,
    gpu_runtime,
    runtime_estimate,
)
from graphmem.pipeline.planning import solve_on_device
from graphmem.pipeline.request import Request, RuntimeOptions
from graphmem.runtime_models.base import RuntimeEstimate
from graphmem.runtime_models.data_bounds import data_bounds
from graphmem.runtime_models.select import check_runtime

Probe = Callable[[str, int], int]  # dim, value -> a distributed job's per-GPU device total

def with_verdict(analysis: Analysis, request: Request, gpu: GpuSpec) -> Analysis:
    """`analysis` with the GPU's runtime model, its verdict, and max batch and sweep on it."""
    options = request.runtime or RuntimeOptions()
    model = DeviceModel(gpu_runtime(analysis, options.name), gpu, request.cuda_reserve_bytes,
                        options.threads, options.ort_optimization, options.arena_extend)
    check_runtime(model.runtime, not request.is_torch, True, analysis.mode == "training")
    analysis = with_device_fit(analysis, model)
    max_batch, at_max = device_max_batch(analysis, model)
    return replace(analysis, max_batch=max_batch, runtime_at_max_batch=at_max,
                   sweep=device_sweep(analysis, model))


def with_device_fit(analysis: Analysis, model: DeviceModel) -> Analysis:
    """The runtime model at the analysis's dims and the verdict on its device total; with
    free dims, the verdict on the live-tensor peak + context (a formula) and a note."""
    data_sized = data_bounds(analysis.graph, analysis.dims.bound).bound  # onnxruntime's own
    unbound = [dim for dim in analysis.dims.free if dim not in data_sized]
    if unbound:
        fit = fit_on_gpu(model.gpu, analysis.liveness.peak_bytes, model.reserve,
                         Caveat.LIVE_PEAK)
        free = ", ".join(unbound)
        note = (f"the {model.runtime} device total on the {model.gpu.name} is a number at bound"
                f" dims (free: {free}): the largest batch is searched on it, batch by batch,"
                " and its parts at that batch are shown; the formula is the live-tensor peak"
                " + CUDA context, not the device total; bind the dims with --batch/--dim for"
                " one number")
        return replace(analysis, fit=fit, runtime_note=note)
    estimate = device_estimate(analysis, model)
    return replace(analysis, runtime=estimate, fit=device_fit(analysis, estimate, model))


def device_max_batch(analysis: Analysis, model: DeviceModel
                     ) -> tuple[MaxBatchResult | None, RuntimeEstimate | None]:
    """The largest batch whose device total fits, from the live-peak answer planning found;
    with the batch free, the runtime model's estimate there too (the numbers the verdict's
    "up to batch=N" reads, from the search's own probe: the same estimate)."""
    guess = analysis.max_batch
    if guess is None:
        return None, None
    if guess.max_batch is None or guess.batch_dim is None:
        return solve_on_device(analysis, guess, model, analysis.reanalyze), None
    probe = DeviceTotalProbe(analysis, guess.batch_dim, model, analysis.reanalyze)
    runtime, batch = analysis.runtime, analysis.dims.bound.get(guess.batch_dim)
    seen = None  # the analysed batch's own run, a second point of the search's line
    if runtime is not None and batch is not None:
        seen = (batch, runtime.device_total_bytes)
    result = solve_on_device(analysis, guess, model, analysis.reanalyze, probe, seen)
    free = guess.batch_dim in analysis.dims.free
    at_max = probe.estimate(result.max_batch) if free and result.max_batch else None
    return result, at_max


def device_sweep(analysis: Analysis, model: DeviceModel) -> SweepResult | None:
    """The sweep with each point's device total and the GPU's verdict on it."""
    sweep = analysis.sweep
    if sweep is None:
        return None
    probe = DeviceTotalProbe(analysis, sweep.dim, model, analysis.reanalyze)
    return with_device_totals(sweep, probe.total, model.capacity_bytes)


def with_distributed_verdict(analysis: Analysis, cuda_reserve_bytes: int | None = None
                             ) -> Analysis:
    """With a distributed strategy, the one verdict (and the max batch) reads the
    distributed plan's per-GPU device total: the rank's sharded tensors and buckets
    (graphmem/distributed/strategies.py), plus the single-GPU runtime model's allocator
    overhead and the CUDA context. Every rank holds the same parts: the largest GPU's total
    is any rank's. Unchanged without a GPU, or while dims are free."""
    report, fit = analysis.distributed, analysis.fit
    if report is None or fit is None or analysis.dims.free:
        return analysis
    allocator = 0
    if fit.runtime is not None:
        # the single-GPU step's allocator overhead, its runtime model unbounded by the GPU:
        # near the capacity the bounded model frees its cache, which says nothing of a
        # rank's allocator
        allocator = runtime_estimate(analysis, fit.runtime, fit.gpu,
                                     cuda_reserve_bytes).allocator_overhead_bytes
    context = sum(int(p.size_bytes) for p in fit.parts if p.part is DevicePart.CONTEXT)
    report = replace(report, allocator_bytes=allocator, context_bytes=context)
    config = report.per_rank.config
    basis = f"{config.strategy} per-GPU device total"
    if report.plan is not None:
        basis += f" of the most-loaded rank (pipeline stage {report.plan.most_loaded.stage})"
    from graphmem.distributed.strategies import per_gpu_parts  # a job was asked for

    parts = (*per_gpu_parts(report.per_rank),
             FitPart(DevicePart.ALLOCATOR, SymInt.const(allocator)),
             FitPart(DevicePart.CONTEXT, SymInt.const(context)),
             *((FitPart(DevicePart.NCCL, SymInt.const(report.nccl_bytes)),)
               if report.nccl_bytes else ()))
    verdict = with_error_band(fit_on_parts(fit.gpu, fit.reserve, parts, fit.live_peak_bytes,
                                           basis, fit.runtime, Caveat.PER_RANK_PLAN),
                              error_band("per-rank"))
    analysis = replace(analysis, fit=verdict, distributed=report)
    probe = _distributed_probe(analysis, context + report.nccl_bytes, fit.runtime,
                               cuda_reserve_bytes)
    # (no sweep here: a sweep leaves its dim free, and per-GPU memory needs every dim bound)
    return replace(analysis, max_batch=_distributed_max_batch(analysis, probe, basis))


def _distributed_probe(analysis: Analysis, context_bytes: int, runtime: str | None,
                       cuda_reserve_bytes: int | None) -> Probe:
    """dim, value -> the per-GPU device total with `dim` at `value` (others as bound): the
    rank's tensors at that value, the single-GPU step's allocator overhead at that value
    (its runtime model unbounded by the GPU, as the verdict reads it), the context and
    NCCL's buffers (`context_bytes` holds both: neither grows with a dim)."""
    assert analysis.distributed is not None and analysis.fit is not None
    from graphmem.distributed.attach import most_loaded_rank  # a job was asked for

    config = analysis.distributed.per_rank.config
    gpu = analysis.fit.gpu

    def total(dim: str, value: int) -> int:
        bound = {**analysis.dims.given, dim: value}  # the routed counts follow
        try:
            bound_analysis = analysis
            if analysis.reanalyze is not None:
                bound_analysis = analysis.reanalyze(bound)
                dims = bound_analysis.dims
            else:
                dims = rebind(analysis.graph, analysis.dims, bound, analysis.moe_routing)
            graph = bound_analysis.graph
            rank = most_loaded_rank(graph, dims, config)
            allocator = 0
            if runtime is not None:
                allocator = runtime_estimate(bound_analysis, runtime, gpu, cuda_reserve_bytes,
                                             dims=dims).allocator_overhead_bytes
        except GraphmemError:
            return MAX_BYTES + 1
        return rank.total_bytes + allocator + context_bytes

    return total


def _distributed_max_batch(analysis: Analysis, probe: Probe, basis: str
                           ) -> MaxBatchResult | None:
    """The largest per-GPU micro-batch whose per-GPU device total fits the GPU."""
    guess, fit = analysis.max_batch, analysis.fit
    if guess is None or fit is None:
        return guess
    if guess.max_batch is None or guess.batch_dim is None:
        return replace(guess, limit_bytes=fit.capacity_bytes, basis=basis)
    dim = guess.batch_dim
    return find_max_batch(dim, fit.capacity_bytes, None, lambda value: probe(dim, value),
                          start=guess.max_batch, basis=basis)
