"""Transposed convolutions (nn.ConvTranspose2d) as graphmem's trace holds them and as PyTorch
runs them on the CPU: the grid tests/test_torch_cpu_deconv.py checks and
`python benchmarks/cpu_scratch.py --transposed` prints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from graphmem.core.ir import DType, Node, Role, Value
from graphmem.core.symbolic import SymInt

if TYPE_CHECKING:
    from graphmem.verify.runners.torch_runner import KernelScratch

# (batch, Cin, Cout, H, W, kernel, stride, padding, output_padding)
Row = tuple[int, int, int, int, int, int, int, int, int]


def out_size(size: int, kernel: int, stride: int, padding: int, extra: int) -> int:
    return (size - 1) * stride - 2 * padding + kernel + extra


def deconv(row: Row, bias: bool = False, channels_last: bool = False) -> Node:
    """The traced aten.convolution of nn.ConvTranspose2d(Cin, Cout, kernel, stride,
    padding, output_padding, bias=bias) on a batch x Cin x H x W input (channels-last where
    asked: the layout PyTorch's kernel runs in, as the trace notes it)."""
    batch, c_in, c_out, h, w, kernel, stride, padding, extra = row

    def value(name: str, *shape: int) -> Value:
        return Value(name, DType.FLOAT32, tuple(SymInt.const(d) for d in shape),
                     Role.ACTIVATION)

    node = Node("deconv", "aten.convolution.default",
                [value("x", batch, c_in, h, w), value("w", c_in, c_out, kernel, kernel),
                 value("b", c_out) if bias else None], [],
                attributes={"stride": (stride, stride), "padding": (padding, padding),
                            "groups": 1, "transposed": 1,
                            "channels_last": int(channels_last)})
    node.add_output(value("y", batch, c_out, out_size(h, kernel, stride, padding, extra),
                          out_size(w, kernel, stride, padding, extra)))
    return node


GRID: list[Row] = [
    (2, 16, 16, 8, 8, 3, 2, 0, 0), (2, 16, 16, 8, 8, 3, 2, 1, 1), (2, 16, 16, 8, 8, 2, 2, 0, 1),
    (2, 16, 16, 8, 8, 4, 2, 1, 0), (2, 16, 16, 8, 8, 5, 2, 0, 0), (2, 8, 16, 8, 8, 3, 2, 0, 0),
    (2, 24, 16, 8, 8, 3, 2, 0, 0), (2, 16, 8, 8, 8, 3, 2, 0, 0), (2, 16, 24, 8, 8, 3, 2, 0, 0),
    (2, 16, 64, 8, 32, 3, 2, 0, 0), (2, 64, 64, 16, 16, 3, 2, 0, 0), (4, 16, 64, 8, 32, 3, 2, 0, 0),
    (2, 16, 64, 8, 8, 4, 3, 0, 0), (2, 16, 64, 8, 32, 4, 3, 0, 0), (2, 32, 128, 8, 16, 3, 2, 0, 0),
    (2, 16, 16, 8, 64, 3, 2, 0, 0), (2, 16, 32, 8, 8, 1, 2, 0, 1), (2, 16, 16, 8, 8, 3, 1, 1, 0),
    (2, 16, 16, 8, 8, 4, 1, 1, 0), (1, 16, 16, 8, 8, 4, 2, 1, 0), (1, 16, 16, 40, 40, 3, 2, 1, 1),
    (1, 16, 64, 8, 32, 3, 2, 0, 0), (1, 16, 16, 8, 8, 3, 1, 1, 0),
]
# the weights' output channels padded to oneDNN's block of 32 above 16 channels
GRID += [(2, 64, 40, 4, 4, 4, 2, 0, 0), (2, 64, 80, 4, 4, 4, 2, 1, 0),
         (2, 16, 48, 8, 8, 3, 2, 0, 0)]
# with a bias: the output made apart where unstrided or the width uneven (and not otherwise)
BIASED: list[Row] = [
    (2, 16, 16, 8, 8, 3, 2, 0, 0), (2, 16, 16, 8, 8, 3, 2, 1, 1), (2, 16, 64, 8, 32, 3, 2, 0, 0),
    (2, 16, 16, 8, 8, 3, 1, 1, 0), (1, 16, 16, 8, 8, 3, 2, 1, 1), (2, 16, 24, 8, 8, 3, 2, 0, 0),
]


# on a channels-last input (SAM's mask decoder upscales its image embedding, made
# channels-last by a permute, with 2x2 stride-2 ones): strided, even and odd widths, a 1x1
# kernel, unstrided, Cout below oneDNN's block
CHANNELS_LAST: list[tuple[Row, bool]] = [
    ((2, 16, 4, 4, 4, 2, 2, 0, 0), True), ((2, 4, 2, 8, 8, 2, 2, 0, 0), True),
    ((2, 16, 16, 8, 8, 3, 2, 0, 0), False), ((2, 16, 16, 8, 8, 3, 2, 1, 1), True),
    ((2, 16, 32, 8, 8, 2, 2, 0, 0), False), ((2, 32, 64, 8, 8, 2, 2, 0, 0), True),
    ((2, 16, 16, 8, 8, 3, 1, 1, 0), True), ((2, 16, 16, 8, 8, 1, 1, 0, 0), True),
    ((4, 8, 8, 16, 16, 4, 2, 1, 0), True), ((2, 16, 16, 9, 9, 3, 2, 0, 0), False),
]


def measured(row: Row, bias: bool = False, channels_last: bool = False) -> KernelScratch:
    """The one aten::convolution call of the row's forward (no grad), after a warm-up."""
    import torch

    from tests.helpers.torch_nets import convolution_calls

    batch, c_in, c_out, h, w, kernel, stride, padding, extra = row
    layer = torch.nn.ConvTranspose2d(c_in, c_out, kernel, stride, padding,
                                     output_padding=extra, bias=bias)
    x = torch.randn(batch, c_in, h, w)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    (call,) = convolution_calls(layer, x)
    return call
