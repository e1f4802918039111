"""Fake tensors break a stride tie (a [2, 16, 1, 1] tensor, NCHW- and channels-last-contiguous
at once) as eager's CPU kernels do (graphmem/frontends/torch/eager_layout.py): each op's
output strides under graphmem's fake mode are checked against the same op run for real on a
tensor with the same strides, not against numbers written here."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from graphmem import analyze_torch
from graphmem.frontends.torch.eager_layout import EagerLayoutFakeTensorMode
from graphmem.frontends.torch.loader import parse_tensor_spec

pytestmark = [pytest.mark.torch]

SHAPE, TIE = (2, 16, 1, 1), (16, 1, 16, 16)  # channels-last strides, NCHW-contiguous too

torch.manual_seed(0)
_BN, _CONV = nn.BatchNorm2d(16), nn.Conv2d(16, 8, 1)
OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,  # TensorIterator, one operand of the output's shape: NCHW
    "add": lambda t: t + t,
    "sigmoid": torch.sigmoid,
    "gelu": F.gelu,
    "mul-by-a-number": lambda t: t * 2,  # a 0-dim operand: TensorIterator keeps the strides
    "add-broadcast": lambda t: t + torch.ones(16, 1, 1),
    "batch-norm-eval": lambda t: F.batch_norm(t, _BN.running_mean, _BN.running_var,
                                              _BN.weight, _BN.bias, False),
    "batch-norm-train": lambda t: F.batch_norm(t, None, None, _BN.weight, _BN.bias, True),
    "clone": torch.clone,  # not TensorIterator's fast setup: preserve
    "hardtanh": F.hardtanh,  # its output allocated `empty_like` the input: preserve
    "add-a-number": lambda t: torch.ops.aten.add.Scalar(t, 1),  # a 0-dim operand
    "clamp": lambda t: t.clamp(0, 1),  # the bounds are no operands: NCHW
    "bilinear": lambda t: F.interpolate(t, size=(4, 4), mode="bilinear"),
    "conv-1x1": lambda t: F.conv2d(t, _CONV.weight, _CONV.bias),
}


def _fake_strides(op: Callable[[torch.Tensor], torch.Tensor], eager_layout: bool) -> tuple:
    mode = EagerLayoutFakeTensorMode(allow_non_fake_inputs=True, eager_layout=eager_layout)
    with mode, torch.no_grad():
        return tuple(op(torch.empty_strided(SHAPE, TIE)).stride())


@pytest.mark.parametrize("name", list(OPS))
def test_fake_output_strides_are_eagers(name: str) -> None:
    with torch.no_grad():
        eager = tuple(OPS[name](torch.empty_strided(SHAPE, TIE).normal_()).stride())
    assert _fake_strides(OPS[name], eager_layout=True) == eager


def test_plain_fake_tensors_break_the_tie_the_other_way() -> None:
    # the mechanism fixed: torch's Python elementwise rule keeps the input's order, eager's
    # TensorIterator makes (16, 1, 1, 1) (its fast setup, every operand NCHW-contiguous)
    assert _fake_strides(torch.relu, eager_layout=False) == TIE
    assert _fake_strides(torch.relu, eager_layout=True) == (16, 1, 1, 1)


class PyramidPooling(nn.Module):
    """UperNet's pyramid-pooling branch on a channels-last feature map: pooled to 1x1, a 1x1
    convolution, batch norm, ReLU, upsampled back, then a 3x3 convolution over it."""

    def __init__(self) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(32, 16, 1, bias=False)
        self.norm = nn.BatchNorm2d(16)
        self.fuse = nn.Conv2d(16, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous(memory_format=torch.channels_last)
        pooled = torch.relu(self.norm(self.reduce(F.adaptive_avg_pool2d(x, 1))))
        return self.fuse(F.interpolate(pooled, size=x.shape[-2:], mode="bilinear"))


def test_the_convolution_after_the_upsampling_reads_eagers_layout() -> None:
    # eager: the upsampled map is NCHW, so `fuse` runs oneDNN's NCHW path (blocked copies);
    # the trace took it channels-last before
    model = PyramidPooling().eval()
    with torch.no_grad():
        x = torch.randn(2, 32, 8, 8).contiguous(memory_format=torch.channels_last)
        pooled = torch.relu(model.norm(model.reduce(F.adaptive_avg_pool2d(x, 1))))
        upsampled = F.interpolate(pooled, size=(8, 8), mode="bilinear")
    eager_channels_last = not upsampled.is_contiguous()
    analysis = analyze_torch(model, [parse_tensor_spec("2x32x8x8")], plan=False, suggest=False)
    fuse = [n for n in analysis.graph.nodes
            if n.op_type == "aten.convolution.default" and n.module_path == "fuse"]
    assert len(fuse) == 1
    assert bool(fuse[0].attr_int("channels_last", 0)) == eager_channels_last


def test_a_higher_order_operator_takes_fake_tensor_modes_own_rule() -> None:
    """torch finds a higher-order operator's rule by the mode's exact type (torch/_ops.py), so
    the subclass hands torch.cond to FakeTensorMode's: the fake result has the branch's shape
    (here the true branch's [4, 3] doubled: either branch gives [4, 3])."""

    def branch(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    with EagerLayoutFakeTensorMode() as mode:
        x = mode.from_tensor(torch.ones(4, 3))
        out = torch.cond(x.sum() > 0, branch, lambda t: t - 1, (x,))
    assert out.shape == (4, 3) and out.dtype == torch.float32


def test_an_integer_remainder_gets_eager_s_layout_too() -> None:
    """The miniature the real kernel runs on holds ones, not zeros: an integer remainder by a
    zero miniature raised and left the fake tensor's own layout."""
    real = torch.arange(32, dtype=torch.int64).reshape(SHAPE).as_strided(SHAPE, TIE) + 1
    eager = torch.remainder(real, real).stride()
    with EagerLayoutFakeTensorMode() as mode:
        fake = mode.from_tensor(real)
        assert torch.remainder(fake, fake).stride() == eager
