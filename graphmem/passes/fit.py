"""Does the peak fit on a GPU: capacity, the CUDA process overhead, usable memory, verdict."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from graphmem.core.symbolic import SymInt
from graphmem.devices.gpus import GpuSpec


@dataclass(frozen=True)
class CudaReserve:
    """Non-tensor device memory of a CUDA process (context, kernels, library workspaces)."""

    bytes: int
    source: str


@dataclass(frozen=True)
class GpuFit:
    gpu: GpuSpec
    # The total the driver reports (cudaMemGetInfo, else nvidia-smi) where known: ECC and
    # driver reservations make it smaller than the datasheet size. Else the datasheet size.
    capacity_bytes: int
    reserve: CudaReserve
    usable_bytes: int  # capacity - reserve: what tensors can use
    required_bytes: SymInt  # the live-tensor peak
    utilization: float | None  # required / usable; None while dims are free
    fits: bool | None  # None while the peak depends on free dims


@cache
def default_cuda_reserve(architecture: str) -> CudaReserve:
    text = resources.files("graphmem.devices.data").joinpath("cuda_overhead.toml").read_text()
    table = tomllib.loads(text)
    measured = table.get("measured", {})
    return CudaReserve(
        bytes=int(measured.get(architecture, table["default_bytes"])),
        source=str(table["source"]),
    )


def fit_on_gpu(gpu: GpuSpec, required_bytes: SymInt, reserve: CudaReserve | None = None) -> GpuFit:
    reserve = reserve or default_cuda_reserve(gpu.architecture)
    capacity = gpu.reported_total_bytes or gpu.nvidia_smi_total_bytes or gpu.memory_bytes
    usable = max(capacity - reserve.bytes, 0)
    utilization = fits = None
    if required_bytes.is_constant:
        required = int(required_bytes)
        utilization = required / usable if usable else float("inf")
        fits = required <= usable
    return GpuFit(
        gpu=gpu,
        capacity_bytes=capacity,
        reserve=reserve,
        usable_bytes=usable,
        required_bytes=required_bytes,
        utilization=utilization,
        fits=fits,
    )
