"""A channels-last convolution's layout copies (graphmem/runtime_models/torch_cpu.py
`_channels_last_forward`): PyTorch's `_mkldnn_convolution` makes the input and the weight
contiguous in the layout it picked (`suggest_memory_format`) before oneDNN runs, so a kxk
kernel's NCHW weight, or a slice of an NHWC tensor, is copied inside the kernel. Found in the
zoo's AutoencoderKL, whose decoder runs NHWC after its attention block (-7.37% -> +0.00%)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graphmem import analyze_torch
from graphmem.core.ir import DType, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.runtime_models.torch_cpu import scratch_bytes
from tests.helpers.torch_nets import convolution_calls

pytestmark = [pytest.mark.torch]


def nhwc_conv(x: tuple[int, ...], w: tuple[int, ...], copies: int) -> Node:
    """A traced channels-last aten.convolution (stride 1, groups 1) of fp32 x and w, its
    output the size of x with w's output channels; `copies` as the front end records them."""
    def value(name: str, shape: tuple[int, ...]) -> Value:
        return Value(name, DType.FLOAT32, tuple(SymInt.const(d) for d in shape),
                     Role.ACTIVATION)

    made = Node("conv", "aten.convolution.default", [value("x", x), value("w", w)], [],
                attributes={"stride": (1, 1), "groups": 1, "transposed": 0,
                            "channels_last": 1, "layout_copies": copies})
    made.add_output(value("y", (x[0], w[0], x[2], x[3])))
    return made


def test_a_kxk_weight_is_copied_to_nhwc_first() -> None:
    # 2x16x8x8 NHWC -> 16 channels, 3x3, two threads: C = the weight, 16*16*9*4 = 9,216;
    # Y = 8,192; P = 4,096 + 2 * 4,120 = 12,336; W' = 9,216 (16 output channels already).
    # [+C, +Y, +P, +W', -W', -P, -C]: peak 38,960, less Y = 30,768 (measured 30,768)
    assert scratch_bytes(nhwc_conv((2, 16, 8, 8), (16, 16, 3, 3), 2), {}, threads=2) == 30_768
    # a weight already NHWC: 21,552
    assert scratch_bytes(nhwc_conv((2, 16, 8, 8), (16, 16, 3, 3), 0), {}, threads=2) == 21_552


def test_a_sliced_nhwc_input_is_copied_first() -> None:
    # a slice of an NHWC tensor, 2x4x8x8 (channels 0:4 of 8), 4 -> 4 1x1, two threads:
    # C = X = 2,048, Y = 2,048, P = 12,336, W' = 16*4*4 = 256: peak 16,688, less Y = 14,640
    # (measured 14,640)
    assert scratch_bytes(nhwc_conv((2, 4, 8, 8), (4, 4, 1, 1), 1), {}, threads=2) == 14_640


class Layouts(nn.Module):
    """An NHWC tensor (a permute), a 3x3 convolution on it and a 1x1 on a slice of it."""

    def __init__(self) -> None:
        super().__init__()
        self.kxk = nn.Conv2d(8, 8, 3, padding=1)
        self.pointwise = nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        nhwc = x.permute(0, 3, 1, 2)  # [2, 8, 8, 8] laid out NHWC
        return self.kxk(nhwc), self.pointwise(nhwc[:, :4])


@pytest.mark.slow
def test_traced_layout_copies_match_the_measured_kernels() -> None:
    threads = torch.get_num_threads()
    analysis = analyze_torch(Layouts(), [parse_tensor_spec("2x8x8x8")], plan=False,
                             suggest=False)
    convs = [n for n in analysis.graph.nodes if n.op_type == "aten.convolution.default"]
    assert [n.attr_int("layout_copies", 0) for n in convs] == [2, 1]
    calls = convolution_calls(Layouts(), torch.randn(2, 8, 8, 8))
    measured = [k.scratch_bytes for k in calls]
    assert [scratch_bytes(n, {}, threads) for n in convs] == measured
