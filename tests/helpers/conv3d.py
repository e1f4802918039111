"""Conv3d layers as graphmem's trace holds them and as PyTorch runs them on the CPU: the grid
tests/test_torch_cpu_conv3d.py checks and `python benchmarks/cpu_scratch.py --conv3d` prints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from graphmem.core.ir import DType, Node, Role, Value
from graphmem.core.symbolic import SymInt

if TYPE_CHECKING:
    from graphmem.verify.runners.torch_runner import KernelScratch

Dhw = tuple[int, int, int]
# (batch, Cin, Cout, frames, size (H = W), kernel, stride, padding, groups)
Row = tuple[int, int, int, int, int, Dhw, Dhw, Dhw, int]


def out_size(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def conv3d(row: Row, bf16: bool = False) -> Node:
    """The traced aten.convolution of nn.Conv3d(Cin, Cout, kernel, stride, padding,
    groups=groups) on a batch x Cin x frames x size x size input."""
    batch, c_in, c_out, frames, size, kernel, stride, padding, groups = row
    kind = DType.BFLOAT16 if bf16 else DType.FLOAT32

    def value(name: str, *shape: int) -> Value:
        return Value(name, kind, tuple(SymInt.const(d) for d in shape), Role.ACTIVATION)

    node = Node("conv3d", "aten.convolution.default",
                [value("x", batch, c_in, frames, size, size),
                 value("w", c_out, c_in // groups, *kernel), value("b", c_out)], [],
                attributes={"stride": stride, "padding": padding, "groups": groups,
                            "transposed": 0, "channels_last": 0})
    spatial = [out_size(n, k, s, p)
               for n, k, s, p in zip((frames, size, size), kernel, stride, padding, strict=True)]
    node.add_output(value("y", batch, c_out, *spatial))
    return node


def conv3d_backward(row: Row) -> Node:
    """The traced aten.convolution_backward of the row's layer, every gradient asked (fp32)."""
    forward = conv3d(row)
    x, w, _ = forward.inputs
    (y,) = forward.outputs
    assert x is not None and w is not None and x.shape is not None and w.shape is not None
    node = Node("conv3d_backward", "aten.convolution_backward.default",
                [Value("gy", y.dtype, y.shape, Role.ACTIVATION), x, w], [],
                attributes={**forward.attributes, "output_mask": (1, 1, 1)})
    for name, shape in (("gx", x.shape), ("gw", w.shape), ("gb", w.shape[:1])):
        node.add_output(Value(name, DType.FLOAT32, shape, Role.ACTIVATION))
    return node


def measured_backward(row: Row) -> KernelScratch:
    """The one aten::convolution_backward call of the row's training step (fp32), after a
    warm-up."""
    import torch

    from graphmem.verify.runners import torch_runner

    batch, c_in, c_out, frames, size, kernel, stride, padding, groups = row
    layer = torch.nn.Conv3d(c_in, c_out, kernel, stride, padding, groups=groups)
    x = torch.randn(batch, c_in, frames, size, size, requires_grad=True)

    def step() -> None:
        out = layer(x)
        out.backward(torch.ones_like(out))

    step()
    with torch_runner._quiet_stderr(), torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as profile:
        step()
    (call,) = [k for k in torch_runner.kernel_scratch(profile)
               if k.kernel == "aten::convolution_backward"]
    return call


def measured(row: Row, bf16: bool = False) -> KernelScratch:
    """The one aten::convolution call of the row's forward (no grad), after a warm-up."""
    import torch

    from tests.helpers.torch_nets import convolution_calls

    batch, c_in, c_out, frames, size, kernel, stride, padding, groups = row
    dtype = torch.bfloat16 if bf16 else torch.float32
    layer = torch.nn.Conv3d(c_in, c_out, kernel, stride, padding, groups=groups).to(dtype)
    x = torch.randn(batch, c_in, frames, size, size, dtype=dtype)
    (call,) = convolution_calls(layer, x)
    return call


# The rows the rule was read from (benchmarks/results/cpu_scratch.md, "Conv3d"): VideoMAE's
# tubelet embedding (kernel = stride), Cout off the 16-channel block, 3x3x3 kernels on one
# clip (PyTorch's own) and two (oneDNN), 1x1x1, grouped, depthwise.
FITTED: list[Row] = [
    (1, 3, 16, 4, 32, (2, 8, 8), (2, 8, 8), (0, 0, 0), 1),
    (2, 3, 32, 8, 32, (2, 8, 8), (2, 8, 8), (0, 0, 0), 1),
    (1, 3, 20, 4, 32, (2, 8, 8), (2, 8, 8), (0, 0, 0), 1),
    (1, 5, 24, 4, 16, (2, 4, 4), (2, 4, 4), (0, 0, 0), 1),
    (1, 16, 16, 4, 16, (3, 3, 3), (1, 1, 1), (1, 1, 1), 1),
    (2, 24, 40, 4, 16, (3, 3, 3), (2, 2, 2), (1, 1, 1), 1),
    (1, 32, 48, 4, 16, (1, 1, 1), (2, 2, 2), (0, 0, 0), 1),
    (1, 32, 32, 4, 16, (3, 3, 3), (1, 1, 1), (1, 1, 1), 4),
    (1, 32, 32, 4, 16, (3, 3, 3), (1, 1, 1), (1, 1, 1), 32),
]
# Shapes the rule was not read from: other channel counts off the block, batches, frames,
# kernels (5x5 spatial on one clip takes oneDNN), strides, paddings, groups.
HELD_OUT: list[Row] = [
    (2, 3, 24, 8, 32, (2, 16, 16), (2, 16, 16), (0, 0, 0), 1),
    (3, 12, 40, 6, 20, (3, 5, 5), (1, 2, 2), (1, 2, 2), 1),
    (1, 8, 24, 4, 16, (1, 5, 5), (1, 1, 1), (0, 2, 2), 1),
    (1, 8, 24, 8, 48, (3, 3, 3), (1, 1, 1), (1, 1, 1), 1),
    (2, 24, 24, 4, 16, (3, 3, 3), (1, 1, 1), (1, 1, 1), 24),
    (2, 20, 36, 5, 12, (3, 3, 3), (1, 2, 2), (1, 1, 1), 1),
    (2, 48, 48, 4, 8, (3, 3, 3), (1, 1, 1), (1, 1, 1), 6),
    (1, 40, 20, 4, 8, (1, 1, 1), (1, 1, 1), (0, 0, 0), 1),
    (4, 32, 16, 2, 8, (1, 1, 1), (1, 1, 1), (0, 0, 0), 1),
    (2, 7, 9, 6, 10, (3, 3, 3), (2, 1, 1), (0, 1, 1), 1),
]
# bf16 (always oneDNN): input channels on the block (a plain-read input's weights are padded
# otherwise in 16 bits: a layout not modelled, as in 2-D)
BF16: list[Row] = [
    (1, 20, 24, 4, 16, (3, 3, 3), (1, 1, 1), (1, 1, 1), 1),
    (2, 32, 40, 4, 8, (3, 3, 3), (2, 2, 2), (1, 1, 1), 1),
]
# backward on one small clip: PyTorch's own slow_conv3d (oneDNN's Conv3d backward, on more
# clips or larger kernels, is not modelled)
BACKWARD: list[Row] = [
    (1, 20, 24, 4, 16, (3, 3, 3), (1, 1, 1), (1, 1, 1), 1),
    (1, 16, 16, 4, 16, (3, 3, 3), (1, 1, 1), (1, 1, 1), 1),
    (1, 8, 12, 6, 12, (3, 3, 3), (2, 2, 2), (1, 1, 1), 1),
    (1, 32, 32, 4, 16, (1, 1, 1), (2, 2, 2), (0, 0, 0), 1),
    (1, 32, 32, 4, 16, (1, 1, 1), (1, 1, 1), (0, 0, 0), 1),
    (1, 6, 10, 5, 9, (2, 3, 3), (1, 2, 1), (0, 1, 1), 1),
]
