"""oneDNN's weight-gradient kernels (graphmem/runtime_models/onednn_weight_grad.py) against
what they allocated, measured per kernel (torch 2.13, oneDNN 3.12, AVX-512, fp32; the kernel
names as ONEDNN_VERBOSE printed them). Each working is in the sizes oneDNN's sources book:
an entry of the scratchpad registry costs its size + its alignment (128 B at least; a
reducer's buffer 4,096; a barrier context 4,096 B aligned to 4,096: 8,192).
"""

from __future__ import annotations

import pytest

from graphmem.core.ir import DType, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.runtime_models.onednn_brgemm import strided_data_scratchpad
from graphmem.runtime_models.onednn_weight_grad import ConvShape, plan, reducer_bytes
from graphmem.runtime_models.torch_cpu import scratch_bytes


def shape(mb: int, ic: int, oc: int, size: int, kernel: int, stride: int = 1,
          threads: int = 2, bias: bool = True) -> ConvShape:
    out = (size + 2 * (kernel // 2) - kernel) // stride + 1
    return ConvShape(mb, ic, oc, size, size, out, out, kernel, kernel, stride, stride, bias,
                     threads)


def test_reducer_splits_one_job_over_the_minibatch() -> None:
    # 2 threads, 1 job of 576 floats (8x8 3x3), summed over 2 images: one group of 2 threads;
    # the second sums into its own buffer, 2,304 B + 4,096, and the group has a barrier
    # 8,192: 14,592
    assert reducer_bytes(2, 576, 1, 2, 1 << 21) == 14_592
    # 2 jobs for 2 threads: a group each, no buffer; one thread: none
    assert reducer_bytes(2, 576, 2, 2, 1 << 21) == 0
    assert reducer_bytes(1, 576, 1, 2, 1 << 21) == 0


# (shape, kernel, scratchpad B) measured at 2 threads, 2x_x16x16 unless said
MEASURED = [
    # jit:avx2 (4 to 15 input channels, blocks of 8). 8 -> 8, 3x3: weights' reducer 2,304 +
    # 4,096 + 8,192 = 14,592; the bias's 32 + 4,096 + 8,192 = 12,320: 26,912, whatever the
    # batch (2 and 8 measured)
    (shape(2, 8, 8, 16, 3), "jit:avx2", 26_912),
    (shape(8, 8, 8, 16, 3), "jit:avx2", 26_912),
    (shape(2, 8, 8, 16, 3, stride=2), "jit:avx2", 26_912),
    # 4 -> 4: padded to 8, the same, + the bias padded to 8: 32 + 128 = 160: 27,072
    (shape(2, 4, 4, 16, 3), "jit:avx2", 27_072),
    # 8 -> 16: two 8 x 8 blocks for two threads (and two bias blocks): no reducer
    (shape(2, 8, 16, 16, 3), "jit:avx2", 0),
    # jit:avx512_core, 16 -> 16: both threads on the minibatch: a copy of the weights and bias
    # (16*16*9 + 16) * 4 = 9,280 + 128, its barrier 8,192; the bias reducer 64 + 4,096 +
    # 8,192 = 12,352: 29,952
    (shape(2, 16, 16, 16, 3), "jit:avx512_core", 29_952),
    # 16 -> 8: the same and the bias padded to 16, 64 + 128: 30,144
    (shape(2, 16, 8, 16, 3), "jit:avx512_core", 30_144),
    # 32 -> 16: the threads split the 2 input-channel blocks: the bias reducer only, 12,352
    (shape(2, 32, 16, 16, 3), "jit:avx512_core", 12_352),
    # 32 -> 32, 64 -> 64: the threads split the channel blocks (and the bias's): none
    (shape(2, 32, 32, 16, 3), "jit:avx512_core", 0),
    (shape(2, 64, 64, 16, 3), "jit:avx512_core", 0),
    # 1 to 3 input channels, read plain: 2 -> 2, weights 16x2x3x3: (288 + 16) * 4 + 128 =
    # 1,344, 8,192, 12,352, the bias padded 192: 22,080; 3 -> 8: (432 + 16) * 4 + 128 + 8,192
    # + 12,352 + 192 = 22,656; 3 -> 16 at 32x32 stride 2: 22,464 (no padded bias)
    (shape(2, 2, 2, 16, 3), "jit:avx512_core", 22_080),
    (shape(2, 3, 8, 16, 3), "jit:avx512_core", 22_656),
    (shape(2, 3, 16, 32, 3, stride=2), "jit:avx512_core", 22_464),
    # jit_1x1:avx512_core, 8 -> 8: a copy of the 16x16 weights, 1,024 + 128, 8,192; the bias
    # reducer 12,352; the bias padded 192: 21,888 (4 -> 4 and 16 -> 10 at 32x32 the same)
    (shape(2, 8, 8, 16, 1), "jit_1x1:avx512_core", 21_888),
    (shape(2, 4, 4, 16, 1), "jit_1x1:avx512_core", 21_888),
    (shape(2, 16, 10, 32, 1), "jit_1x1:avx512_core", 21_888),
    # strided: + the source reduced to unit stride, one 8x8 slice of 16 channels per thread:
    # 2 * 16 * 64 * 4 + 128 = 8,320: 30,208
    (shape(2, 8, 8, 16, 1, stride=2), "jit_1x1:avx512_core", 30_208),
]


@pytest.mark.parametrize(("conv", "kernel", "scratchpad"), MEASURED)
def test_scratchpad_as_measured(conv: ConvShape, kernel: str, scratchpad: int) -> None:
    made = plan(conv)
    assert (made.kernel, made.scratchpad_bytes) == (kernel, scratchpad)


@pytest.mark.parametrize(("conv", "scratchpad"), [
    # one thread: no reduction buffers; only a padded bias (4 -> 4: 8 floats + 128 = 160;
    # 16 -> 8 and 2 -> 2 at 16: 192) and a strided 1x1's one slice: 4,096 + 128 + 192 = 4,416
    (shape(2, 8, 8, 16, 3, threads=1), 0),
    (shape(2, 4, 4, 16, 3, threads=1), 160),
    (shape(2, 16, 8, 16, 3, threads=1), 192),
    (shape(2, 2, 2, 16, 3, threads=1), 192),
    (shape(2, 8, 8, 16, 1, stride=2, threads=1), 4_416),
])
def test_one_thread_books_no_reduction(conv: ConvShape, scratchpad: int) -> None:
    assert plan(conv).scratchpad_bytes == scratchpad


def test_layouts_follow_the_kernel() -> None:
    # jit:avx2 4 -> 4: source and output gradient padded to 8 channels (2*8*16*16*4 =
    # 16,384 each), weights 8x8x3x3 (2,304); avx512 1st conv 3 -> 8: source read plain (0),
    # output gradient padded to 16 (32,768), weights 16x3x3x3 (1,728) (all measured)
    avx2 = plan(shape(2, 4, 4, 16, 3))
    first = plan(shape(2, 3, 8, 16, 3))
    assert (avx2.source_bytes, avx2.output_grad_bytes, avx2.weight_bytes) == (16_384, 16_384,
                                                                               2_304)
    assert (first.source_bytes, first.output_grad_bytes, first.weight_bytes) == (0, 32_768,
                                                                                 1_728)


def tensor(name: str, *dims: int) -> Value:
    return Value(name, DType.FLOAT32, tuple(SymInt.const(d) for d in dims), Role.ACTIVATION)


def backward(x: Value, w: Value, gy: Value, stride: int = 1) -> Node:
    made = Node("b", "aten.convolution_backward.default", [gy, x, w], [],
                attributes={"stride": (stride, stride), "groups": 1, "transposed": 0,
                            "output_mask": (0, 1, 1), "channels_last": 0})
    made.add_output(tensor("gw", *[int(d) for d in w.shape or ()]))
    made.add_output(tensor("gb", int((w.shape or ())[0])))
    return made


def test_pytorch_runs_a_pointwise_kernel_itself_at_one_thread() -> None:
    # ConvParams::use_mkldnn: an unstrided 1x1 on fewer than 16 images at one thread is
    # PyTorch's own: no copies (measured 2x8x16x16 -> 8: +32, +256, nothing else); at two
    # threads oneDNN's: GYb + Xb 32,768 each + GWb 1,024 + P 21,888 + GBo 32 = 88,480, less
    # GW 256 + GB 32: 88,192 (measured 88,192)
    made = backward(tensor("x", 2, 8, 16, 16), tensor("w", 8, 8, 1, 1),
                    tensor("gy", 2, 8, 16, 16))
    assert scratch_bytes(made, {}, 1) == 0
    assert scratch_bytes(made, {}, 2) == 88_192


def test_pytorch_unfolds_one_small_image_itself() -> None:
    # one 8x16x16 image (2,048 elements, under 20,480), 3x3: slow_conv2d's columns,
    # 8 * 9 * 16 * 16 * 4 = 73,728, at one thread or two (measured 73,728 both)
    made = backward(tensor("x", 1, 8, 16, 16), tensor("w", 8, 8, 3, 3),
                    tensor("gy", 1, 8, 16, 16))
    assert scratch_bytes(made, {}, 1) == scratch_bytes(made, {}, 2) == 73_728


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_weight_gradient_kernels_as_run(threads: int) -> None:
    """Real weight-gradient kernels over a grid: what each holds before its first free (the
    copies, the scratchpad, the bias gradient) is the plan's, to the byte."""
    torch = pytest.importorskip("torch")
    from graphmem.verify.runners import torch_runner

    grid = [(2, 8, 8, 16, 3, 1), (8, 4, 4, 16, 3, 2), (2, 2, 2, 16, 3, 1), (2, 16, 8, 16, 3, 1),
            (2, 24, 40, 12, 3, 1), (2, 32, 16, 16, 3, 1), (4, 16, 16, 32, 3, 1),
            (2, 3, 16, 32, 3, 2), (2, 8, 8, 16, 1, 2), (16, 16, 10, 8, 1, 1), (16, 48, 64, 8, 1, 1)]
    from tests.helpers.torch_nets import torch_threads

    with torch_threads(threads):
        for mb, ic, oc, size, kernel, stride in grid:
            conv = torch.nn.Conv2d(ic, oc, kernel, stride, kernel // 2)
            x = torch.randn(mb, ic, size, size)
            out = conv(x)
            out.backward(torch.ones_like(out))  # warm oneDNN's caches
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                        profile_memory=True) as profile:
                conv(x).backward(torch.ones_like(out))
            call = next(k for k in torch_runner.kernel_scratch(profile)
                        if k.kernel == "aten::convolution_backward")
            held = 0
            for step in call.allocations:
                if step < 0:
                    break
                held += step
            made = plan(ConvShape(mb, ic, oc, size, size, out.shape[2], out.shape[3], kernel,
                                  kernel, stride, stride, True, threads))
            expected = (made.source_bytes + made.output_grad_bytes + made.weight_bytes
                        + made.scratchpad_bytes + oc * 4)
            assert held == expected, (mb, ic, oc, size, kernel, stride, call.allocations)


@pytest.mark.parametrize(("shape", "threads", "expected"), [
    # (ih, oh, k, stride, padding, Cout): three page alignments 12,288 + per thread the batch
    # elements 4,120 + the mask page 4,096 + the output gradient's copy with its overflow,
    # rounded up to 4,096 floats. 16 -> 8 rows, 3x3 s2 p1: 9 x 9 x 16 = 1,296 -> 16,384 B:
    # 36,888 at one thread, 61,488 at two (measured both); 64 channels: 81 x 64 = 5,184 ->
    # 8,192 floats: 94,256; a 32x32 input, 17 x 17 x 16 = 4,624 -> 94,256, x 32 channels ->
    # 12,288 floats: 127,024; an image's 7x7 s2 p3, 64 -> 32 rows, 35 x 35 x 64 = 78,400 ->
    # 81,920 floats: 12,288 + 2 x (4,120 + 4,096 + 327,680) = 684,080 (all measured)
    ((16, 8, 3, 2, 1, 8), 1, 36_888),
    ((16, 8, 3, 2, 1, 8), 2, 61_488),
    ((16, 8, 3, 2, 1, 64), 2, 94_256),
    ((32, 16, 3, 2, 1, 16), 2, 94_256),
    ((32, 16, 3, 2, 1, 32), 2, 127_024),
    ((64, 32, 7, 2, 3, 64), 2, 684_080),
    ((16, 8, 1, 2, 0, 8), 2, 61_488),
])
def test_strided_backward_data_scratchpad(shape: tuple[int, ...], threads: int,
                                          expected: int) -> None:
    size, out, kernel, stride, padding, channels = shape
    assert strided_data_scratchpad(size, size, out, out, kernel, kernel, (stride, stride),
                                   (padding, padding), channels, threads,
                                   in_channels=8) == expected
