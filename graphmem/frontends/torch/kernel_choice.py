"""What a CUDA trace assumed: the GPU it traces for and the kernels it picked. No torch here.

A PyTorch step traced for a named CUDA GPU (graphmem/frontends/torch/cuda_kernels.py) runs
some ops on other kernels than the CPU: scaled-dot-product attention on the backend CUDA
picks for that GPU (flash, memory-efficient, cuDNN or math), dropout on the fused kernel
with a bool mask, batch norm on cuDNN. Each choice is recorded as a `KernelChoice`, the
analysis shows them (ModelInfo.kernels), so a reader knows what the numbers assume.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphmem.devices.gpus import GpuSpec


@dataclass(frozen=True)
class CudaTarget:
    """The GPU a step is traced for: its name and compute capability (sm major.minor)."""

    name: str
    major: int
    minor: int

    @property
    def sm(self) -> str:
        """`sm90` for compute capability 9.0: how PyTorch's sources name an architecture."""
        return f"sm{self.major}{self.minor}"

    def at_least(self, major: int, minor: int) -> bool:
        return (self.major, self.minor) >= (major, minor)

    def within(self, low: tuple[int, int], high: tuple[int, int]) -> bool:
        return low <= (self.major, self.minor) <= high


def cuda_target(gpu: GpuSpec) -> CudaTarget:
    """The trace target of a GPU of graphmem's table (its compute capability, "9.0")."""
    major, _, minor = gpu.compute_capability.partition(".")
    return CudaTarget(gpu.name, int(major), int(minor or 0))


@dataclass(frozen=True)
class KernelChoice:
    """One kernel the CUDA trace assumed, and for how many calls.

    `op`: what the model asked for ("attention", "dropout", "batch norm", "optimizer",
    "loss scaling"); `kernel`: what CUDA runs ("flash", "memory-efficient", "cudnn", "math",
    "fused bool mask", "foreach"...); `detail`: why and what it keeps, e.g. "sm90, bf16,
    head dim 64, causal; saves out, logsumexp".
    """

    op: str
    kernel: str
    detail: str
    count: int = 1

    def __str__(self) -> str:
        times = f", {self.count} calls" if self.count > 1 else ""
        return f"{self.op}: {self.kernel} ({self.detail}{times})"


def counted(choices: list[KernelChoice]) -> tuple[KernelChoice, ...]:
    """Equal choices merged into one with their count, in first-seen order."""
    counts: dict[tuple[str, str, str], int] = {}
    for choice in choices:
        key = (choice.op, choice.kernel, choice.detail)
        counts[key] = counts.get(key, 0) + choice.count
    return tuple(KernelChoice(*key, count=count) for key, count in counts.items())
