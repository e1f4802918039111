"""Eager holds recorded while the last traced fx node is a `getitem` (a multi-output op).

native_layer_norm returns (output, mean, rstd) and make_fx unpacks it with getitem nodes,
which are no IR nodes. A tensor whose Python variable dies right after a layer norm (a
block's locals when the norm is its last op) was noted as released after that getitem, and
the hold was dropped: graphmem freed the tensor at its last read instead. That hid BERT's
and ViT's layer-end peaks (-10%) and MobileNetV2's block input held by `x` through the
block (-7.7%, one [8,16,112,112] tensor) in benchmarks/results/torch_accuracy.md.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graphmem import analyze_torch
from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.verify.runners.torch_runner import measure_step

pytestmark = pytest.mark.torch

SPEC = "64x256"


class HeldThroughNorm(nn.Module):
    """`hidden` is not read by the norm, but the local keeps it allocated until return."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(256, 512)
        self.norm = nn.LayerNorm(512)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.fc(x)
        activated = torch.relu(hidden)
        return self.norm(activated)


def test_a_tensor_dropped_after_a_multi_output_op_is_held_until_that_op() -> None:
    analysis = analyze_torch(HeldThroughNorm(), [SPEC], plan=False, suggest=False)
    live = {t.producer: t.last_consumer for t in analysis.liveness.live_at_peak}
    # the linear's output (addmm) is last read by relu, held by `hidden` through the norm
    assert live["addmm"] == "native_layer_norm"
    # At the norm: hidden, activated and the norm's output, 64*512*4 = 131,072 B each, and
    # mean and rstd, [64, 1] float32 = 256 B each: 3 * 131,072 + 512 = 393,728 B. Dropping
    # the hold gave 262,656 B.
    assert int(analysis.liveness.activation_peak_bytes) == 393_728


def test_the_held_peak_matches_a_real_cpu_step() -> None:
    # Measured on this CPU (torch 2.13, profiler memory deltas): 393,728 B, to the byte.
    torch.manual_seed(0)
    analysis = analyze_torch(HeldThroughNorm(), [SPEC], plan=False, suggest=False)
    measured = measure_step(HeldThroughNorm(), [parse_tensor_spec(SPEC)], train=False)
    assert int(analysis.liveness.activation_peak_bytes) == measured.peak_bytes
