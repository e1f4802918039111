"""oneDNN's gemm weight gradient (`gemm:jit`), which it runs where its avx512 kernel refuses a
kernel wider than 14 (M5's 1-channel Conv1d, 1 x 80 at stride 4): the scratchpad
graphmem/runtime_models/onednn_weight_grad.py `_gemm` reads from oneDNN's sources, with the
working, then against the kernel's own allocation on shapes it was not read from."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graphmem.runtime_models.onednn_weight_grad import ConvShape, plan
from graphmem.verify.runners import torch_runner

pytestmark = pytest.mark.torch


def conv(mb: int, width: int, ic: int, oc: int, kernel: int, stride: int,
         threads: int = 2) -> ConvShape:
    """A Conv1d as PyTorch runs it: height 1, a 1 x kernel kernel, no padding, a bias."""
    out = (width - kernel) // stride + 1
    return ConvShape(mb, ic, oc, 1, width, 1, out, 1, kernel, 1, stride, True, threads)


def test_the_scratchpad_with_the_working() -> None:
    # M5's first layer, 2x1x8000 -> 16, 1 x 80 stride 4: 1,981 outputs, 990 a thread (256 or
    # more: one thread); the weights' reduction 1 x 5,120 B booked as floats 20,480 + 128,
    # the columns 1 x 80 x 1,981 x 4 = 633,920 + 128: 654,656 (measured 654,656)
    assert plan(conv(2, 8000, 1, 16, 80, 4)).scratchpad_bytes == 654_656
    # 400 samples: 81 outputs, 40 a thread: both threads, 2 x 20,480 + 128 and 2 x 80 x 81 x
    # 4 = 51,840 + 128: 93,056 (measured 93,056)
    assert plan(conv(2, 400, 1, 16, 80, 4)).scratchpad_bytes == 93_056
    # 16 channels, 1 x 15: 586 outputs, one thread: 16 x 16 x 15 x 4 = 15,360 -> 61,440 +
    # 128, columns 16 x 15 x 586 x 4 = 562,560 + 128: 624,256 (measured 624,256)
    assert plan(conv(2, 600, 16, 16, 15, 1)).kernel == "gemm:jit"
    assert plan(conv(2, 600, 16, 16, 15, 1)).scratchpad_bytes == 624_256
    # 1 x 14 is the avx512 kernel's
    assert plan(conv(2, 600, 1, 16, 14, 1)).kernel == "jit:avx512_core"


def measured_scratch(shape: ConvShape) -> int:
    layer = nn.Conv2d(shape.ic, shape.oc, (1, shape.kw), (1, shape.stride_w))
    x = torch.randn(shape.mb, shape.ic, 1, shape.iw)

    def step() -> None:
        y = layer(x)
        y.backward(torch.ones_like(y))

    step()  # warm up: oneDNN's primitive caches
    with torch_runner._quiet_stderr(), torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as profile:
        step()
    return next(call.scratch_bytes for call in torch_runner.kernel_scratch(profile)
                if call.kernel == "aten::convolution_backward")


# (batch, width, in, out, kernel, stride): one thread's columns and both threads' (under
# 256 outputs a thread), 2 and 3 input channels; none measured before the rule (a third, 16
# input channels 1 x 17, exact too, left out of the suite for its time)
HELD_OUT = [(2, 1000, 2, 8, 30, 3), (4, 300, 3, 4, 25, 2)]


@pytest.mark.parametrize("row", HELD_OUT, ids=lambda r: "x".join(map(str, r)))
def test_the_rule_matches_the_kernel(row: tuple[int, int, int, int, int, int]) -> None:
    shape = conv(*row, threads=torch.get_num_threads())
    assert plan(shape).kernel == "gemm:jit"
    assert measured_scratch(shape) == plan(shape).scratchpad_bytes
