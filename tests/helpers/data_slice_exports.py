"""PyTorch models whose TorchScript export slices by data, exported for
benchmarks/data_bounded_slices.py: checks of graphmem/passes/extent_bounds.py on exports
other than the zoo's DLRM (which it was built against).

- `bag_mean`, `bag_max`: one nn.EmbeddingBag (mean / max) over 3 bags of 4 ids, the offsets
  a buffer (so onnxruntime's runs read fixed bags from random ids), then a Linear. The
  exporter writes a Loop over the bags whose body slices each bag's ids: at most the 12 ids.
- `trim_padding`: a padded batch [4, 40, 16] trimmed to its longest run, a length the data
  computes (`(x[:, :, 0] > 0).sum(1).max()`), then a Linear and a sum: a top-level Slice of
  at most the 40 positions.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn


class Bag(nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(300, 16, mode=mode)
        self.out = nn.Linear(16, 4)
        self.register_buffer("offsets", torch.tensor([0, 4, 8]))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.bag(ids, self.offsets))


class TrimPadding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        longest = (x[:, :, 0] > 0).sum(dim=1).max()
        return torch.relu(self.proj(x[:, :longest])).sum(dim=1)


def _ids() -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, 300, (12,)),)


EXPORTS: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "bag_mean": (lambda: Bag("mean"), _ids),
    "bag_max": (lambda: Bag("max"), _ids),
    "trim_padding": (TrimPadding, lambda: (torch.randn(4, 40, 16),)),
}


def export(name: str, folder: Path) -> Path:
    """`name` exported by the TorchScript exporter (opset 18) into `folder`; kept if there."""
    path = folder / f"{name}.torchscript.onnx"
    if path.exists():
        return path
    torch.manual_seed(0)
    build, inputs = EXPORTS[name]
    example = inputs()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's notices on the data-sized slice
        torch.onnx.export(build().eval(), example, str(path), dynamo=False, opset_version=18,
                          input_names=[f"input_{i}" for i in range(len(example))],
                          output_names=["out"])
    return path
