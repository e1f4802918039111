"""LayerDrop (graphmem/frontends/torch/layer_drop.py): a training step that skips a layer when
`torch.rand([]) < p` traces, every layer kept."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graphmem import analyze_torch
from graphmem.frontends.torch.layer_drop import TOP_OF_UNIT_INTERVAL
from graphmem.frontends.torch.loader import parse_tensor_spec

pytestmark = pytest.mark.torch


class LayerDropped(nn.Module):
    """Three Linear(16, 16) layers, each skipped in training with probability `p`, as
    transformers' encoders write it."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            if self.training and torch.rand([]) < self.p:
                continue
            x = layer(x)
        return x


def test_every_layer_is_kept() -> None:
    # p = 0.5 (eager drops 1.5 layers a step on average), all 3 kept: [4, 16] @ [16, 16]
    # each, 3 x 4 x 16 x 16 = 3,072 MACs forward; the backward's input and weight gradients
    # twice that, the first layer's input gradient aside (the input asks for none):
    # 3,072 + 2 x 3,072 - 1,024 = 8,192
    analysis = analyze_torch(LayerDropped(0.5), [parse_tensor_spec("4x16")], train=True,
                             optimizer="sgd", plan=False, suggest=False)
    assert analysis.costs.total_macs == 8_192


def test_the_draw_is_the_top_of_the_unit_interval() -> None:
    # below 1, above every probability a config writes (0.99)
    assert 0.99 < TOP_OF_UNIT_INTERVAL < 1.0
    assert torch.tensor(TOP_OF_UNIT_INTERVAL, dtype=torch.float32) < 1.0
