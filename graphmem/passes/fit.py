"""Does the model fit a GPU: one verdict, from one device total, with its labelled parts.

The verdict compares one number with the GPU's capacity (the total the driver reports where
known): the device total of the runtime model of that GPU (onnxruntime's CUDA arena for ONNX
inference, PyTorch's caching allocator for training steps and PyTorch models), run bounded by
the capacity as the device bounds it; where that run fails, the device total is the demand (the
same run on a GPU large enough), so `over_bytes` is what the step lacks, and where it failed is
`out_of_memory`. Where no runtime model applies (dims left free, an analysis
run without planning) the live-tensor peak plus the CUDA context, and the verdict says so.
`fits`, the utilization, max batch, `check --max-memory`, `gpus --fits`, the sweep and every
report read this one verdict (graphmem/pipeline/verdict.py builds it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from functools import cache
from importlib import resources

from graphmem.core.symbolic import SymInt
from graphmem.devices.error_bands import ErrorBand
from graphmem.devices.gpus import GpuSpec
from graphmem.passes.device_parts import LIVE_PEAK_BASIS as LIVE_PEAK_BASIS
from graphmem.passes.device_parts import Caveat as Caveat
from graphmem.passes.device_parts import DevicePart as DevicePart


@dataclass(frozen=True)
class CudaReserve:
    """Non-tensor device memory of a CUDA process (context, kernels, library workspaces)."""

    bytes: int
    source: str


@dataclass(frozen=True)
class WeightsApart:
    """TENSORS where the runtime keeps the weights on lines of their own: its tensors at the
    peak are the activations and outputs alone."""


@dataclass(frozen=True)
class Split:
    """A rank's share of a tensor kind: sharded over `shards` ranks (1: whole), and tensor
    parallel over `tensor_parallel` GPUs."""

    shards: int
    tensor_parallel: int


@dataclass(frozen=True)
class KvPool:
    """The serving plan's KV cache: the engine's pool of `blocks` (None: no sequence fits, the
    part is one sequence of `tokens`)."""

    blocks: int | None
    tokens: int


PartDetail = WeightsApart | Split | KvPool


@dataclass(frozen=True)
class FitPart:
    """One part of the number the verdict compares with the capacity: its code, its size, and
    the numbers that name it beyond the code (`detail`)."""

    part: DevicePart
    size_bytes: SymInt
    detail: PartDetail | None = None

    @property
    def key(self) -> str:
        """The part's code as the JSON names it."""
        return str(self.part)


@dataclass(frozen=True)
class OutOfMemoryAt:
    """Where the runtime's allocator, bounded by the GPU, first fails: a fact apart from the
    device total (the demand, what the step holds on a GPU large enough)."""

    tensor: str  # the buffer it was allocating ("": the weights and inputs, before the run)
    node: str  # the node allocating it ("": before the run)
    op_type: str
    step: int | None  # 1-based position of that node in the runtime's order; None: before it
    step_count: int  # nodes in the runtime's order
    request_bytes: int  # the allocation that failed, rounded as the allocator rounds it
    held_bytes: int  # what the allocator held from the device when it failed
    free_bytes: int  # what the device had left for the allocator then


@dataclass(frozen=True)
class GpuFit:
    """The one fit verdict of an analysis on one GPU.

    `required_bytes` is the number compared with `capacity_bytes`: the runtime model's device
    total (`basis` names the runtime), else the live-tensor peak + the CUDA context. `parts`
    add up to it. `usable_bytes` (capacity - reserve) is the live-tensor budget the
    suggestions aim at; the verdict does not read it.
    """

    gpu: GpuSpec
    # The total the driver reports (cudaMemGetInfo, else nvidia-smi) where known: ECC and
    # driver reservations make it smaller than the datasheet. Else the datasheet size.
    capacity_bytes: int
    reserve: CudaReserve
    usable_bytes: int  # capacity - reserve: what tensors can use
    required_bytes: SymInt  # the device total (or live peak + context): against capacity
    live_peak_bytes: SymInt  # graphmem's live-tensor peak, model order
    utilization: float | None  # required / capacity; None while dims are free
    fits: bool | None  # required <= capacity; None while it depends on free dims
    basis: str = LIVE_PEAK_BASIS  # "ort-cuda device total", "torch-cuda device total", ...
    runtime: str | None = None  # the runtime model the device total is from
    parts: tuple[FitPart, ...] = ()
    failure: str = ""  # the allocation the runtime could not make (does not fit)
    caveat: Caveat | None = None  # which way the number may be wrong
    # where the runtime's allocator, bounded by the GPU, first fails (does not fit, where
    # the runtime model knows it); required_bytes is the demand all the same
    out_of_memory: OutOfMemoryAt | None = None
    # what required_bytes is held to where that is not the capacity (under --serve: the
    # engine's budget, capacity x gpu_memory_utilization); None: the capacity
    limit_bytes: int | None = None
    # the path's measured error (graphmem/devices/data/error_bands.toml); None: no band
    # applies (dims free, no runtime model); `error_band.measured` False: never measured
    error_band: ErrorBand | None = None
    # the limit lies within the band around the device total: an error as large as measured
    # would turn the verdict (fits stays required <= limit); None: no measured band or no
    # number yet
    tight: bool | None = None

    @property
    def verdict(self) -> str | None:
        """"fits", "tight" or "does not fit"; None while dims are free."""
        if self.fits is None:
            return None
        if self.tight:
            return "tight"
        return "fits" if self.fits else "does not fit"

    @property
    def over_bytes(self) -> int | None:
        """How much more than the capacity (or the limit) the device total, the demand, is
        (negative: to spare); None with free dims."""
        required = self.required_bytes
        limit = self.capacity_bytes if self.limit_bytes is None else self.limit_bytes
        return int(required) - limit if required.is_constant else None


def with_error_band(fit: GpuFit, band: ErrorBand) -> GpuFit:
    """`fit` with its path's measured error band, and whether the limit lies within it.

    An error e = predicted / measured - 1 puts the true demand at required / (1 + e): between
    required / (1 + high) and required / (1 + low) (low <= 0 <= high, so the band holds the
    device total itself). Tight: that range holds the limit (lowest <= limit < highest)."""
    if not band.measured or not fit.required_bytes.is_constant:
        return replace(fit, error_band=band, tight=None)
    assert band.low is not None and band.high is not None
    required = int(fit.required_bytes)
    limit = fit.capacity_bytes if fit.limit_bytes is None else fit.limit_bytes
    lowest = Fraction(required * band.high.measured_bytes, band.high.predicted_bytes)
    highest = Fraction(required * band.low.measured_bytes, band.low.predicted_bytes)
    return replace(fit, error_band=band, tight=lowest <= limit < highest)


@cache
def default_cuda_reserve(architecture: str) -> CudaReserve:
    import tomllib  # a GPU's verdict only: its parser's regexes cost ~2 ms at every start

    text = resources.files("graphmem.devices.data").joinpath("cuda_overhead.toml").read_text()
    table = tomllib.loads(text)
    measured = table.get("measured", {})
    return CudaReserve(
        bytes=int(measured.get(architecture, table["default_bytes"])),
        source=str(table["source"]),
    )


def fit_on_gpu(gpu: GpuSpec, required_bytes: SymInt, reserve: CudaReserve | None = None,
               caveat: Caveat | None = None) -> GpuFit:
    """The verdict on the live-tensor peak `required_bytes` plus the CUDA context: the basis
    where no runtime model gives a device total."""
    reserve = reserve or default_cuda_reserve(gpu.architecture)
    context = SymInt.const(reserve.bytes)
    parts = (FitPart(DevicePart.LIVE_PEAK, required_bytes),
             FitPart(DevicePart.CONTEXT, context))
    return _verdict(gpu, reserve, required_bytes + context, required_bytes, LIVE_PEAK_BASIS,
                    None, parts, "", caveat)


def fit_on_device_total(gpu: GpuSpec, reserve: CudaReserve, device_total_bytes: int,
                        live_peak_bytes: SymInt, runtime: str, parts: tuple[FitPart, ...],
                        failure: str = "", caveat: Caveat | None = None,
                        out_of_memory: OutOfMemoryAt | None = None) -> GpuFit:
    """The verdict on a runtime model's device total (the demand: what the run holds on a
    GPU large enough, where this one does not hold it)."""
    fit = _verdict(gpu, reserve, SymInt.const(device_total_bytes), live_peak_bytes,
                   f"{runtime} device total", runtime, parts, failure, caveat)
    return replace(fit, out_of_memory=out_of_memory)


def fit_on_parts(gpu: GpuSpec, reserve: CudaReserve, parts: tuple[FitPart, ...],
                 live_peak_bytes: SymInt, basis: str, runtime: str | None,
                 caveat: Caveat | None = None) -> GpuFit:
    """The verdict on the sum of `parts` (a distributed job's per-GPU device total, each
    sharded part, bucket, allocator and context labelled)."""
    required = sum((part.size_bytes for part in parts), SymInt())
    return _verdict(gpu, reserve, required, live_peak_bytes, basis, runtime, parts, "", caveat)


def _verdict(gpu: GpuSpec, reserve: CudaReserve, required: SymInt, live_peak: SymInt,
             basis: str, runtime: str | None, parts: tuple[FitPart, ...], failure: str,
             caveat: Caveat | None) -> GpuFit:
    capacity = gpu.capacity_bytes
    utilization = fits = None
    if required.is_constant:
        utilization = int(required) / capacity if capacity else float("inf")
        fits = int(required) <= capacity
    return GpuFit(
        gpu=gpu, capacity_bytes=capacity, reserve=reserve,
        usable_bytes=max(capacity - reserve.bytes, 0), required_bytes=required,
        live_peak_bytes=live_peak, utilization=utilization, fits=fits, basis=basis,
        runtime=runtime, parts=parts, failure=failure, caveat=caveat)
