"""The PyTorch process a real step runs in: is there a CUDA device, and the seed of its weights."""

from __future__ import annotations

import torch


def cuda_available() -> bool:
    return torch.cuda.is_available()


def seed(value: int) -> None:
    """Seed torch's generators (the weights a real model is built with, the random inputs)."""
    torch.manual_seed(value)
