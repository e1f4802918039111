"""Kernels' scratch on the CPU, predicted: graphmem/runtime_models/torch_cpu.py.

The rules are the allocation sequences measured inside each kernel (benchmarks/cpu_scratch.py
--raw, benchmarks/results/cpu_scratch.md; torch 2.13, oneDNN 3.12, AVX-512): the unit tests
state the working for a few shapes; the slow ones run real CPU training steps and compare
graphmem's peak with scratch (`--runtime torch-cpu`) with the allocator's measured peak.
"""

from __future__ import annotations

import pytest

from graphmem.core.ir import AttributeValue, DType, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.runtime_models.torch_cpu import scratch_bytes

CONV = "aten.convolution.default"
BACKWARD = "aten.convolution_backward.default"


def tensor(name: str, *shape: int) -> Value:
    return Value(name, DType.FLOAT32, tuple(SymInt.const(d) for d in shape), Role.ACTIVATION)


def node(op: str, inputs: list[Value], outputs: list[Value],
         **attributes: AttributeValue) -> Node:
    made = Node(op, op, list(inputs), [], attributes=dict(attributes))
    for value in outputs:
        made.add_output(value)
    return made


def conv(x: Value, w: Value, y: Value, stride: int = 1, groups: int = 1,
         channels_last: int = 0, bias: bool = True) -> Node:
    # with a bias, as nn.Conv2d's default (the measured grid's layers have one)
    b = [tensor("b", int(w.shape[0]))] if bias else []  # type: ignore[index]
    return node(CONV, [x, w, *b], [y], stride=(stride, stride), groups=groups, transposed=0,
                channels_last=channels_last)


def backward(gy: Value, x: Value, w: Value, stride: int = 1, groups: int = 1,
             mask: tuple[int, ...] = (1, 1, 1), channels_last: int = 0) -> Node:
    outputs = [tensor("gx", *[int(d) for d in x.shape])] if mask[0] else []  # type: ignore[union-attr]
    outputs.append(tensor("gw", *[int(d) for d in w.shape]))  # type: ignore[union-attr]
    if mask[2]:
        outputs.append(tensor("gb", int(w.shape[0])))  # type: ignore[index]
    return node(BACKWARD, [gy, x, w], outputs, stride=(stride, stride), groups=groups,
                transposed=0, output_mask=mask, channels_last=channels_last)


def test_convolution_forward_blocked_copies() -> None:
    # 8x16x32x32 -> 16 channels, 3x3: X = Y = 8*16*32*32*4 = 524,288 (16 channels: already a
    # whole block, Xb = X, Yb = Y), W = 16*16*9*4 = 9,216.
    # [+Xb, +Wb, +Yb, -Wb, -Xb, +Y, -Yb]: peak Xb + Wb + Yb = 1,057,792; less Y = 533,504
    # (measured 533,504)
    made = conv(tensor("x", 8, 16, 32, 32), tensor("w", 16, 16, 3, 3), tensor("y", 8, 16, 32, 32))
    assert scratch_bytes(made, {}) == 533_504


def test_convolution_forward_of_an_image_reads_it_plain() -> None:
    # 8x3x64x64 -> 64 channels, 7x7 stride 2 -> 8x64x32x32: Y = Yb = 2,097,152; 3 input
    # channels: no copy of x. [+W, +Yb, -W, +Y, -Yb]: peak Yb + Y, scratch Yb = 2,097,152
    # (measured 2,097,152)
    made = conv(tensor("x", 8, 3, 64, 64), tensor("w", 64, 3, 7, 7), tensor("y", 8, 64, 32, 32),
                stride=2)
    assert scratch_bytes(made, {}) == 2_097_152


def test_convolution_forward_pads_channels_to_the_block() -> None:
    # at 2 threads (at one, PyTorch runs an unstrided 1x1 on fewer than 16 images itself)
    # 8x24x8x8 -> 24 channels 1x1: X = Y = 8*24*64*4 = 49,152; blocked, 24 -> 32 channels:
    # Xb = Yb = 65,536; W padded in both dims 32*32*4 = 4,096; 24 is not a multiple of 16:
    # the bias padded, 32*4, + 128 = 256. Peak 256 + Xb + W + Yb = 135,424; less Y = 86,272
    # (measured 86,272: +256, +65,536, +4,096, +65,536, -4,096, -65,536, -256, +49,152)
    made = conv(tensor("x", 8, 24, 8, 8), tensor("w", 24, 24, 1, 1), tensor("y", 8, 24, 8, 8))
    assert scratch_bytes(made, {}, 2) == 86_272
    # no bias, none padded: 86,272 - 256 = 86,016 (tests/test_torch_cpu_conv1d.py measures it)
    made = conv(tensor("x", 8, 24, 8, 8), tensor("w", 24, 24, 1, 1), tensor("y", 8, 24, 8, 8),
                bias=False)
    assert scratch_bytes(made, {}, 2) == 86_016


# Below oneDNN's 16-channel block: each working is a row of `python benchmarks/cpu_scratch.py
# --toy --raw` (2 threads) or benchmarks/results/cpu_scratch.md

def test_pointwise_forward_reorders_a_few_channels_to_the_block() -> None:
    # 2x8x16x16 -> 8 channels, 1x1: the source reordered to 16 channels, Xb = 2*16*16*16*4 =
    # 32,768 (a 3x3 kernel reads it plain); W padded to 16x16x1x1: 1,024; Yb = 32,768, Y =
    # 16,384; 8 output channels: the padded bias 16*4 + 128 = 192. Peak 192 + Xb + W + Yb =
    # 66,752; less Y = 50,368 (measured 50,368)
    made = conv(tensor("x", 2, 8, 16, 16), tensor("w", 8, 8, 1, 1), tensor("y", 2, 8, 16, 16))
    assert scratch_bytes(made, {}, 2) == 50_368


@pytest.mark.parametrize(("threads", "expected"), [(1, 278_656), (2, 286_848)])
def test_strided_pointwise_copies_one_subsampled_image_per_thread(
        threads: int, expected: int) -> None:
    # 8x32x16x16 -> 64 channels, 1x1 stride 2: S = threads * 32*8*8*4 + 128 (8,320 at one
    # thread, 16,512 at two), Xb = 262,144, W = 8,192, Yb = Y = 131,072. Peak S + Xb + W + Yb,
    # less Y: 8,320 + 262,144 + 8,192 = 278,656 and 286,848 (measured 278,656 and 286,848,
    # whatever the batch: 2x8x32x32 at one thread copies 16*16*16*4 + 128 + 192)
    made = conv(tensor("x", 8, 32, 16, 16), tensor("w", 64, 32, 1, 1),
                tensor("y", 8, 64, 8, 8), stride=2)
    assert scratch_bytes(made, {}, threads) == expected


def test_backward_data_pads_the_weights_in_both_dims() -> None:
    # 2x3x16x16 -> 8 channels, 3x3 (forward reads the image plain): input phase GYb =
    # 2*16*16*16*4 = 32,768, Wd = 16*16*9*4 = 9,216 (the forward's: 16*3*9*4 = 1,728), GXb =
    # 32,768: 74,752. Weight phase GX 6,144 + GYb + GW 1,728 = 40,640. Outputs GX + GW 864 +
    # GB 32 = 7,040: 74,752 - 7,040 = 67,712 (measured 67,712)
    made = backward(tensor("gy", 2, 8, 16, 16), tensor("x", 2, 3, 16, 16),
                    tensor("w", 8, 3, 3, 3))
    assert scratch_bytes(made, {}) == 67_712


@pytest.mark.parametrize(("threads", "expected"), [(1, 43_256), (2, 67_856)])
def test_strided_backward_data_is_plain_beside_a_scratchpad(threads: int,
                                                            expected: int) -> None:
    # 2x8x16x16 -> 8 channels, 3x3 stride 2: GY = 2*8*8*8*4 = 4,096 and GX = 16,384 plain, W'
    # = 8*16*9*4 = 4,608, oneDNN's scratchpad 12,288 + 24,600 per thread (36,888 at one
    # thread, 61,488 at two): GY + W' + GX + P = 61,976 and 86,576. Outputs GX + GW 2,304 +
    # GB 32 = 18,720: 43,256 and 67,856 (measured 43,256 at one thread, 67,856 at two; the
    # scratchpad is that at 16x16 inputs of 2 to 32 channels, more at larger ones: the least
    # measured is modelled)
    made = backward(tensor("gy", 2, 8, 8, 8), tensor("x", 2, 8, 16, 16),
                    tensor("w", 8, 8, 3, 3), stride=2)
    assert scratch_bytes(made, {}, threads) == expected


def test_a_permuted_output_gradient_is_made_contiguous() -> None:
    # the U-Net's classifier, 2x16x32x32 -> 10 channels 1x1, gy a permute of a [2, 32, 32, 10]
    # gradient (log_softmax's over the channels): copied contiguous first, GY = 2*10*32*32*4 =
    # 81,920, held to the end. Weight phase: GY + GX 131,072 + GYb (10 -> 16 channels)
    # 131,072 + Xb 131,072 + GWb 16*16*4 = 1,024: 476,160; less the outputs GX + GW 640 + GB
    # 40 = 131,752: 344,408, and backward-weights' scratchpad at 2 threads (jit_1x1, both
    # threads on the minibatch: tests/test_onednn_weight_grad.py), 21,888, and the bias
    # gradient as computed, 40: 366,336 (measured 366,336)
    source = tensor("g", 2, 32, 32, 10)
    gy = tensor("gy", 2, 10, 32, 32)
    node("aten.permute.default", [source], [gy])
    gy.alias_of = source
    made = backward(gy, tensor("x", 2, 16, 32, 32), tensor("w", 10, 16, 1, 1))
    assert scratch_bytes(made, {}, 2) == 366_336


def test_convolution_backward_dense() -> None:
    # 16 -> 16 channels, 3x3, 8x16x32x32 (every gradient), 2 threads: GY = X = GX = 524,288
    # (blocked the same), W = GW = 9,216, GB = 64. Input phase: GYb + Wb + GXb = 1,057,792,
    # then GXb + GX = 1,048,576. Weight phase (jit:avx512_core): GX + GYb + Xb + GWb +
    # oneDNN's scratchpad P 29,952 (tests/test_onednn_weight_grad.py) + the bias gradient
    # as computed GBo 64 = 1,612,096. Outputs GX + GW + GB = 533,568: 1,078,528 (measured
    # 1,078,528)
    made = backward(tensor("gy", 8, 16, 32, 32), tensor("x", 8, 16, 32, 32),
                    tensor("w", 16, 16, 3, 3))
    assert scratch_bytes(made, {}, 2) == 1_078_528


def test_convolution_backward_strided_copies_the_input_gradient() -> None:
    # 16 -> 32 channels, 3x3 stride 2, 8x16x32x32 -> 8x32x16x16: GY = GYb = 262,144, X = GX =
    # 524,288, W = 18,432. Input phase: GYb + W + GXb = 804,864; then GXb + GX + a copy of GX
    # = 1,572,864. Weight phase: GX + GYb + Xb + GW = 1,329,152. Outputs 542,720 + GB 128:
    # 1,572,864 - 542,848 = 1,030,016 (measured 1,030,016)
    made = backward(tensor("gy", 8, 32, 16, 16), tensor("x", 8, 16, 32, 32),
                    tensor("w", 32, 16, 3, 3), stride=2)
    assert scratch_bytes(made, {}) == 1_030_016


def test_first_layer_backward_makes_no_input_gradient() -> None:
    # ResNet's stem: output_mask (0, 1, 0), 3 input channels read plain. Weight phase only:
    # [+GYb 2,097,152, +GW 37,632, -GYb, +GW, -GW]: peak GYb + GW = 2,134,784, less GW:
    # 2,097,152 (measured 2,143,360: oneDNN's scratchpad, 46,208 B, is not modelled)
    made = backward(tensor("gy", 8, 64, 32, 32), tensor("x", 8, 3, 64, 64),
                    tensor("w", 64, 3, 7, 7), stride=2, mask=(0, 1, 0))
    assert scratch_bytes(made, {}) == 2_097_152


def test_channels_last_depthwise_backward_weight_slices() -> None:
    # ConvNeXt's depthwise 7x7 on channels-last tensors, 128 channels, 8x128x4x4: GX =
    # 65,536, W = 128*49*4 = 25,088, GB = 512; slices = 256 * W = 6,422,528 (measured
    # 6,422,528, whatever the batch, image or threads). [+GX, +slices, +GW, +GW, -GW,
    # -slices]: peak 6,538,240, less the outputs 91,136: 6,447,104 (measured 6,456,448:
    # oneDNN's scratchpad, 8,320 B, and a second bias gradient, 512 B, are not modelled)
    made = backward(tensor("gy", 8, 128, 4, 4), tensor("x", 8, 128, 4, 4),
                    tensor("w", 128, 1, 7, 7), groups=128, channels_last=1)
    assert scratch_bytes(made, {}) == 6_447_104


def test_bf16_weight_gradient_accumulates_in_fp32() -> None:
    # bf16, 512 -> 512 channels 3x3 on 8x512x2x2 (ResNet's last stage): GY = X = GX = 32,768,
    # W = GW = 512*512*9*2 = 4,718,592, F = its fp32 copy 9,437,184. Input phase: GYb + W +
    # GXb = 4,784,128. Weight phase: GX + GYb + Xb + GW + F + the bias gradient as computed,
    # GBo 1,024 = 14,255,104. Outputs GX + GW + GB 1,024 = 4,752,384: scratch 9,502,720
    # (measured 9,531,780: oneDNN's own bf16 scratchpad, 29,060 B, is not modelled)
    def bf16(name: str, *shape: int) -> Value:
        return Value(name, DType.BFLOAT16, tuple(SymInt.const(d) for d in shape),
                     Role.ACTIVATION)

    made = node(BACKWARD, [bf16("gy", 8, 512, 2, 2), bf16("x", 8, 512, 2, 2),
                           bf16("w", 512, 512, 3, 3)],
                [bf16("gx", 8, 512, 2, 2), bf16("gw", 512, 512, 3, 3), bf16("gb", 512)],
                stride=(1, 1), groups=1, transposed=0, output_mask=(1, 1, 1), channels_last=0)
    assert scratch_bytes(made, {}) == 9_502_720


def test_batch_norm_backward_temporary() -> None:
    # one temporary the size of x: 8*64*32*32*4 = 2,097,152 (measured 2,097,152)
    x = tensor("x", 8, 64, 32, 32)
    made = node("aten.native_batch_norm_backward.default", [tensor("gy", 8, 64, 32, 32), x],
                [tensor("gx", 8, 64, 32, 32), tensor("gw", 64), tensor("gb", 64)])
    assert scratch_bytes(made, {}) == 2_097_152


def test_other_ops_have_none() -> None:
    made = node("aten.relu.default", [tensor("x", 8, 64)], [tensor("y", 8, 64)])
    assert scratch_bytes(made, {}) == 0


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize(("builder", "optimizer", "amp", "scratch_at_peak"), [
    ("build_resnet_small", "sgd", None, True),
    # AdamW's foreach update (two states, sqrt's temporaries) is above every kernel's scratch
    ("build_resnet_small", "adamw", None, False),
    ("build_resnet_small", "sgd", "bf16", True),
    ("build_convnext_small", "adamw", None, True),
    ("build_convnext_small", "adamw", "bf16", True)])
def test_training_step_peak_with_scratch_matches_the_allocator(
        builder: str, optimizer: str, amp: str | None, scratch_at_peak: bool) -> None:
    from graphmem.verify.torch_run import verify_torch

    result = verify_torch(f"tests/torch_models/convnets.py:{builder}", ["8x3x64x64"],
                          train=True, optimizer=optimizer, amp=amp)
    measured = result.measured
    assert measured.allocator_peak_bytes is not None
    assert measured.kernel_scratch_bytes is not None
    # with each kernel's scratch at its node, within 2% of the allocator's peak
    assert result.allocator_error_pct is not None
    assert abs(result.allocator_error_pct) < 2.0, result
    predicted = result.predicted_scratch_bytes or 0
    assert (predicted > 100_000) is scratch_at_peak
    assert (measured.kernel_scratch_bytes > 100_000) is scratch_at_peak


def test_torch_cpu_refuses_onnx_and_a_gpu() -> None:
    from graphmem.errors import GraphmemError
    from graphmem.runtime_models.select import check_runtime

    check_runtime("torch-cpu", is_onnx=False, has_gpu=False, training=True)
    with pytest.raises(GraphmemError, match="ort-cpu"):
        check_runtime("torch-cpu", is_onnx=True, has_gpu=False, training=False)
    with pytest.raises(GraphmemError, match="--gpu"):
        check_runtime("torch-cpu", is_onnx=False, has_gpu=True, training=True)


@pytest.mark.slow
@pytest.mark.torch
def test_analyze_shows_the_scratch_as_its_own_line() -> None:
    from rich.console import Console

    from graphmem.core.conventions import AmpPolicy, TrainingOptions
    from graphmem.pipeline import run
    from graphmem.pipeline.request import Request, RuntimeOptions, SuggestOptions
    from graphmem.report.terminal.runtime import print_runtime
    from graphmem.runtime_models.base import Runtime

    analysis = run.analyze(Request(
        "tests/torch_models/convnets.py:build_convnext_small", ("8x3x64x64",),
        training=TrainingOptions("adamw", None, amp_policy=AmpPolicy.CPU),
        runtime=RuntimeOptions(Runtime.TORCH_CPU), suggest=SuggestOptions(enabled=False)))
    estimate = analysis.runtime
    assert estimate is not None and estimate.runtime == "torch-cpu"
    # the peak moves to the depthwise backward whose weight slices are the largest scratch
    assert estimate.workspace_bytes > 6_000_000
    assert estimate.workspace_node is not None
    assert estimate.workspace_node.startswith("convolution_backward")
    assert estimate.device_total_bytes == (estimate.tensors_at_peak_bytes + estimate.resident_bytes
                                           + estimate.workspace_bytes)
    console = Console(record=True, width=100)
    print_runtime(analysis, console)
    assert "kernels' scratch" in console.export_text()


@pytest.mark.parametrize(("threads", "kernel", "expected"), [
    # 2x16x8x8 -> 8 channels 3x3, channels-last: Y = 2*8*8*8*4 = 4,096 (returned); the
    # scratchpad 4,096 + 4,120 per thread (8,216 at one, 12,336 at two) and the weights padded
    # to 16 output channels, 16*16*9*4 = 9,216: 17,432 and 21,552 (measured 17,432, 21,552)
    (1, 3, 17_432), (2, 3, 21_552),
    # 1x1: at one thread neither (measured 0); at two 12,336 + 16*16*4 = 13,360 (measured
    # 13,360 for 16 -> 2 channels; 16 -> 8 here pads the same)
    (1, 1, 0), (2, 1, 13_360)])
def test_channels_last_forward_scratchpad_per_thread(threads: int, kernel: int,
                                                      expected: int) -> None:
    made = conv(tensor("x", 2, 16, 8, 8), tensor("w", 8, 16, kernel, kernel),
                tensor("y", 2, 8, 8, 8), channels_last=1)
    assert scratch_bytes(made, {}, threads) == expected


def test_channels_last_depthwise_forward_copies_its_weights() -> None:
    # 8 channels 3x3 depthwise, channels-last: the weights with channels padded to 16,
    # 16*9*4 = 576 (measured 576; 64 channels 7x7: 64*49*4 = 12,544, measured 12,544)
    made = conv(tensor("x", 2, 8, 8, 8), tensor("w", 8, 1, 3, 3), tensor("y", 2, 8, 8, 8),
                groups=8, channels_last=1)
    assert scratch_bytes(made, {}, 2) == 576
