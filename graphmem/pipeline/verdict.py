"""One verdict per GPU, from one device total (graphmem/passes/fit.py `GpuFit`).

With `--gpu`, the GPU's runtime model (onnxruntime CUDA for ONNX inference, PyTorch's caching
allocator for training steps and PyTorch models, or the one `--runtime` names), bounded by the
GPU's memory, gives the device total; "fits", the utilization, the largest batch (the runtime
model re-run at each batch the search probes, the live-peak answer only its starting guess)
and each sweep point's fit are all read from that number, and every report renders this one
result. While dims are free the device total cannot be computed: the verdict then reads the
live-tensor peak + the CUDA context, and says so.
"""

from __future__ import annotations

from dataclasses import replace

from graphmem.devices.gpus import GpuSpec
from graphmem.passes.fit import fit_on_gpu
from graphmem.passes.max_batch import MaxBatchResult
from graphmem.passes.sweep import SweepResult, with_device_totals
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.device_total import (
    DeviceModel,
    DeviceTotalProbe,
    device_estimate,
    device_fit,
    gpu_runtime,
)
from graphmem.pipeline.planning import solve_on_device
from graphmem.pipeline.request import Request, RuntimeOptions
from graphmem.runtime_models.select import check_runtime

LIVE_PEAK_CAVEAT = ("the live-tensor peak leaves out what the runtime's allocator adds"
                    " (rounding, cached segments or regions): the device needs more; bind"
                    " every dim for the runtime model's device total")


def with_verdict(analysis: Analysis, request: Request, gpu: GpuSpec) -> Analysis:
    """`analysis` with the GPU's runtime model, its verdict, and max batch and sweep on it."""
    options = request.runtime or RuntimeOptions()
    model = DeviceModel(gpu_runtime(analysis, options.name), gpu, request.cuda_reserve_bytes,
                        options.threads, options.ort_optimization)
    check_runtime(model.runtime, not request.is_torch, True, analysis.mode == "training")
    analysis = with_device_fit(analysis, model)
    return replace(analysis, max_batch=device_max_batch(analysis, model),
                   sweep=device_sweep(analysis, model))


def with_device_fit(analysis: Analysis, model: DeviceModel) -> Analysis:
    """The runtime model at the analysis's dims and the verdict on its device total; with
    free dims, the verdict on the live-tensor peak + context (a formula) and a note."""
    if analysis.dims.free:
        fit = fit_on_gpu(model.gpu, analysis.liveness.peak_bytes, model.reserve,
                         LIVE_PEAK_CAVEAT)
        free = ", ".join(analysis.dims.free)
        note = (f"the {model.runtime} device total on the {model.gpu.name} needs every dim"
                f" bound (free: {free}); until then the verdict reads the live-tensor peak +"
                " CUDA context; bind them with --batch/--dim")
        return replace(analysis, fit=fit, runtime_note=note)
    estimate = device_estimate(analysis, model)
    return replace(analysis, runtime=estimate, fit=device_fit(analysis, estimate, model))


def device_max_batch(analysis: Analysis, model: DeviceModel) -> MaxBatchResult | None:
    """The largest batch whose device total fits, from the live-peak answer planning found."""
    guess = analysis.max_batch
    if guess is None:
        return None
    return solve_on_device(analysis, guess, model, analysis.reanalyze)


def device_sweep(analysis: Analysis, model: DeviceModel) -> SweepResult | None:
    """The sweep with each point's device total and the GPU's verdict on it."""
    sweep = analysis.sweep
    if sweep is None:
        return None
    probe = DeviceTotalProbe(analysis, sweep.dim, model, analysis.reanalyze)
    return with_device_totals(sweep, probe.total, model.capacity_bytes)
