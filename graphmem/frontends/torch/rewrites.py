"""Model edits graphmem re-traces to measure a suggestion, undone on exit.

`pooled_head(model, path, positions)`: the FC layer at `path`, which reads a flattened
[N, C, H, W] feature map ([N, C*H*W]), replaced by global average pooling and a C -> out
layer: [N, C*H*W] -> [N, C, H*W] -> mean -> [N, C] -> Linear(C, out). Flattening is
channel-major, so the mean over the last dim is the mean over H and W (ResNet's head).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from graphmem.errors import GraphmemError


class PooledLinear(nn.Module):
    """Global average pooling over the `positions` a flattened input holds, then Linear."""

    def __init__(self, layer: nn.Linear, positions: int) -> None:
        super().__init__()
        self.positions = positions
        weight = layer.weight
        self.linear = nn.Linear(layer.in_features // positions, layer.out_features,
                                bias=layer.bias is not None, device=weight.device,
                                dtype=weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [N, C*H*W] -> [N, C, H*W] -> [N, C]
        return self.linear(x.unflatten(-1, (-1, self.positions)).mean(-1))


def can_pool(model: object, path: str, positions: int) -> bool:
    """The module at `path` is an nn.Linear whose inputs split into `positions` evenly."""
    if not isinstance(model, nn.Module):
        return False
    try:
        layer = model.get_submodule(path)
    except AttributeError:
        return False
    return isinstance(layer, nn.Linear) and positions > 1 and layer.in_features % positions == 0


@contextlib.contextmanager
def pooled_head(model: nn.Module, path: str, positions: int) -> Iterator[nn.Module]:
    """The model with the nn.Linear at `path` pooled first (see the module docstring)."""
    if not can_pool(model, path, positions):
        raise GraphmemError(f"fc head: '{path}' is not an nn.Linear reading {positions}"
                            " flattened positions per channel")
    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    layer = parent.get_submodule(name)
    assert isinstance(layer, nn.Linear)
    parent.add_module(name, PooledLinear(layer, positions))
    try:
        yield model
    finally:
        parent.add_module(name, layer)
