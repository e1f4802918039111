"""Small torch.nn models shared by the torch tests (the only helper module importing torch)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from graphmem.verify.runners.torch_runner import KernelScratch


class MLP(nn.Module):
    """Blocks of Linear(w, 4w) -> GELU -> Linear(4w, w)."""

    def __init__(self, width: int = 32, depth: int = 4) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[
            nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
            for _ in range(depth)])
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


class AttentionBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x, x, need_weights=True)[0]


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op threads set to `count` inside the block, the caller's count after."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def convolution_calls(model: nn.Module, *inputs: torch.Tensor) -> list[KernelScratch]:
    """Each aten::convolution call of one forward (no grad) under torch.profiler, in order,
    after a warm-up (oneDNN's primitive caches)."""
    from graphmem.verify.runners import torch_runner

    with torch.no_grad():
        model(*inputs)
        with torch_runner._quiet_stderr(), torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU],
                profile_memory=True) as profile:
            model(*inputs)
    return [k for k in torch_runner.kernel_scratch(profile) if k.kernel == "aten::convolution"]
