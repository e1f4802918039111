"""The torch-cpu runtime model: eager PyTorch on the CPU, kernels' scratch included.

The live tensors of a step are graphmem's liveness. On the CPU some aten kernels also
allocate buffers they free before they return: oneDNN's blocked-layout copies of a
convolution's operands (nChw16c on AVX-512: channels padded to 16), the weight-gradient
buffer of a channels-last depthwise convolution backward, batch norm backward's temporary.
They are no tensor of the step, but the allocator holds them while the kernel runs, so the
step's peak is the largest of (live tensors while a node runs + that node's scratch).

Each rule below is the kernel's own sequence of allocations and frees (+bytes / -bytes, in
order), as measured with `python benchmarks/cpu_scratch.py --raw` (torch 2.13, oneDNN 3.12,
AVX-512, fp32; benchmarks/results/cpu_scratch.md; Conv3d: --conv3d). Its scratch is the
running peak of that sequence less what the kernel returns. oneDNN's own scratchpads (tens of
KiB) and the bf16 paths' other layouts are not modelled, but for the measured constant ones
(a strided backward-data's, a channels-last forward's) and the fp32 weight gradient's, read from
oneDNN's sources (graphmem/runtime_models/onednn_weight_grad.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from graphmem.core.ir import Node, Value
from graphmem.passes.memory_model import size_at
from graphmem.runtime_models.conv1d_view import as_conv2d
from graphmem.runtime_models.cpu_promotion import promoted_copies
from graphmem.runtime_models.onednn_brgemm import strided_data_scratchpad
from graphmem.runtime_models.onednn_weight_grad import ConvShape, plan
from graphmem.runtime_models.torch_cpu_attention import (
    native_multi_head_attention,
    transformer_encoder_layer,
)
from graphmem.runtime_models.torch_cpu_native import (
    Allocations,
    Dims,
    native,
    slow_conv3d_backward,
)
from graphmem.runtime_models.torch_cpu_native import is_fp32 as _fp32
from graphmem.runtime_models.torch_cpu_native import nbytes_at as _bytes
from graphmem.runtime_models.torch_cpu_native import sizes_at as _sizes
from graphmem.runtime_models.torch_cpu_native import uses_onednn as _uses_onednn
from graphmem.runtime_models.torch_cpu_recurrent import rnn_layer, rnn_layer_backward

BLOCK = 16  # oneDNN's channel block on AVX-512 (nChw16c): blocked copies pad channels to it
# A channels-last depthwise convolution's weight gradient (kernel > 3x3) is reduced in a
# buffer of 256 weight-sized slices, whatever the batch, image or thread count (measured:
# 64 channels 7x7 fp32 -> 3,211,264 B = 256 * 64 * 49 * 4; 5x5 -> 1,638,400 B; bf16:
# 256 * the bf16 weight), and in bf16 a scratchpad of as many fp32 slices besides.
DEPTHWISE_WEIGHT_SLICES = 256
FORWARD = "aten.convolution.default"  # (x, w, bias, ...); its backward reads (gy, x, w, ...)


# Measured below oneDNN's block (benchmarks/results/cpu_scratch.md, "Below oneDNN's 16-channel
# block"): a forward whose output channels are not a multiple of 16 takes a bias padded to the
# block + 128 B while it runs (2, 4 or 8 channels fp32: 16 * 4 + 128 = 192; 24: 32 * 4 + 128 =
# 256), whatever the kernel or stride; a strided 1x1 forward copies its
# subsampled source, blocked, one image per thread, plus 128 B (oneDNN's reduce-to-unit-stride
# copy: 16 -> 16 channels, 8x8 out, fp32, 2 threads: 2 * 16 * 8 * 8 * 4 + 128 = 8,320; 32 -> 64
# channels at 1 thread: 32 * 8 * 8 * 4 + 128 = 8,320, at 2: 16,512, whatever the batch); a
# strided dense backward-data computes the input gradient plain beside oneDNN's scratchpad
# (graphmem/runtime_models/onednn_brgemm.py, from its source: 12,288 B + 24,600 B per thread
# at 16x16 inputs of 2 to 32 channels; 94,256, 127,024 and 684,080 at two threads for larger
# ones); where the padding is not known, or the convolution is grouped, the least measured.
ONEDNN_EXTRA_BYTES = 128  # beside a padded bias and a subsampled copy (measured)
# A channels-last dense forward takes a scratchpad of 4,096 B + 4,120 B per thread (8,216 B at
# one thread, 12,336 at two, whatever the batch, channels, image or kernel: 2 to 64 channels,
# 1x1 to 3x3, batch 2 and 8) and its weights padded to 16 output channels; a 1x1 kernel at one
# thread neither (another oneDNN kernel). A channels-last depthwise one copies its weights,
# channels padded to 16 (8 channels 3x3: 16 * 9 * 4 = 576 B).
# (oneDNN's source explains both: a brgemm convolution books per thread its batch elements, 40
# B each, as many as a page holds rounded up, 103 = 4,120 B, page-aligned: + 4,096 B;
# jit_brgemm_conv_utils.cpp `adjusted_batch_size`, `key_brgemm_primitive_batch`)
CHANNELS_LAST_SCRATCHPAD_BYTES = 4_096
CHANNELS_LAST_SCRATCHPAD_THREAD_BYTES = 4_120
STRIDED_BACKWARD_DATA_SCRATCHPAD_BYTES = 12_288
STRIDED_BACKWARD_DATA_SCRATCHPAD_THREAD_BYTES = 24_600


@dataclass(frozen=True)
class Conv:
    """A convolution's operands in bytes at bound dims, plain and in oneDNN's blocked layout."""

    input_bytes: int
    output_bytes: int
    weight_bytes: int
    blocked_input_bytes: int  # channels padded to BLOCK
    blocked_output_bytes: int
    # the weights as the forward and the weight gradient hold them: output channels padded
    # where the input is read plain, both channel dims where it is blocked
    blocked_weight_bytes: int
    data_weight_bytes: int  # the weights as backward-data holds them: both dims padded
    output_padded_weight_bytes: int  # output channels padded (channels-last forward)
    strided_data_weight_bytes: int  # ... and a strided one: input channels padded (_strided)
    plain_input: bool  # a kxk kernel (k > 1) on fewer than 16 input channels reads NCHW
    depthwise: bool
    dense: bool  # groups == 1
    kernel_area: int
    strided: bool
    channels_last: bool
    biased: bool  # a forward (transposed or not) given a bias; a backward: False
    padded_bias_bytes: int  # where output channels are not a multiple of BLOCK (dense)
    subsampled_image_bytes: int  # one image of the strided 1x1's source, subsampled, blocked
    layout_copy_bytes: int  # the input and weight PyTorch copies to NHWC first (channels-last)


def _padded(channels: int) -> int:
    return -(-channels // BLOCK) * BLOCK


def _strided_padded(channels: int) -> int:
    """The input channels a strided backward-data's weights are padded to: oneDNN's brgemm
    block, 16 up to 16 channels, 32 above (measured from 8 to 208 channels, 1 and 2 threads,
    a ConvTranspose2d's forward alike: 24 -> 32, 40 and 48 -> 64, 80 -> 96, 208 -> 224)."""
    block = BLOCK if channels <= BLOCK else 2 * BLOCK
    return -(-channels // block) * block



def _conv(node: Node, x: Value, w: Value, y: Value, dims: Dims) -> Conv:
    """Operands of a convolution `x` (N, Cin, [T,] H, W) * `w` (Cout, Cin/g, [kt,] kh, kw)
    -> `y`: 2-D or 3-D alike (the kernel's and the output's areas are over every spatial dim)."""
    groups = node.attr_int("groups", 1)
    assert x.shape is not None and w.shape is not None, node.describe()  # _is_conv2d's
    assert y.shape is not None, node.describe()
    c_in, c_out = size_at(x.shape[1], dims), size_at(w.shape[0], dims)
    kernel_area = math.prod(_sizes(w, dims)[2:])
    x_bytes, y_bytes, w_bytes = _bytes(x, dims), _bytes(y, dims), _bytes(w, dims)
    dense = groups == 1
    plain_input = dense and c_in < BLOCK and kernel_area > 1
    both = w_bytes * _padded(c_in) * _padded(c_out) // (c_in * c_out) if dense else w_bytes
    stride = node.attr_ints("stride", (1,))
    out_area = math.prod(_sizes(y, dims)[2:])
    item = x.dtype.bits // 8 if x.dtype.has_known_size else 4
    copies = node.attr_int("layout_copies", 0)
    return Conv(
        input_bytes=x_bytes, output_bytes=y_bytes, weight_bytes=w_bytes,
        blocked_input_bytes=x_bytes * _padded(c_in) // c_in,
        blocked_output_bytes=y_bytes * _padded(c_out) // c_out,
        blocked_weight_bytes=w_bytes * _padded(c_out) // c_out if plain_input else both,
        data_weight_bytes=both,
        output_padded_weight_bytes=w_bytes * _padded(c_out) // c_out,
        strided_data_weight_bytes=(w_bytes * _strided_padded(c_in) // c_in if dense
                                   else w_bytes),
        plain_input=plain_input, depthwise=groups > 1 and groups == c_in == c_out,
        dense=dense, kernel_area=kernel_area, strided=any(s > 1 for s in stride),
        channels_last=bool(node.attributes.get("channels_last", 0)),
        biased=node.op_type == FORWARD and len(node.inputs) > 2 and node.inputs[2] is not None,
        padded_bias_bytes=_padded(c_out) * item if dense and c_out % BLOCK else 0,
        subsampled_image_bytes=_padded(c_in) * out_area * item,
        layout_copy_bytes=(x_bytes * (copies & 1) + w_bytes * (copies >> 1 & 1)))


def _is_conv2d(node: Node, transposed: bool = False, ranks: tuple[int, ...] = (4,)) -> bool:
    inputs = node.inputs
    return (bool(node.attributes.get("transposed", 0)) == transposed and len(inputs) >= 2
            and all(v is not None and v.shape is not None and len(v.shape) in ranks
                    for v in inputs[:2]) and bool(node.outputs))


def convolution(node: Node, dims: Dims, threads: int) -> Allocations:
    """aten.convolution (x, w, b) -> y, NCHW (NCDHW alike): x and w reordered to blocked
    copies, y computed blocked, then copied out plain.
        [+C, +O, +S, +Xb, +Wb, +Yb, -Wb, -Xb, -S, -O, +Y, -Yb, -C]
    C: an operand that is a view, not contiguous (a permute's, a slice's), copied first
    (`input.contiguous()`: measured 2x16x8x8 sliced from 32 channels, 8,192 B; VideoMAE's
    permuted clip); Xb: none where a kxk kernel reads fewer than 16 channels plain (a 1x1
    kernel reorders them); O: the bias padded to 16 + 128 B where Cout is not a multiple of
    16 (none without a bias: measured 32 -> 7, 3x3, 2x32x8x8, 192 B with, 0 without); S: a
    strided 1x1's subsampled source, one blocked image per thread + 128 B. A 3-D kernel the
    same, areas over its three dims (tests/test_torch_cpu_conv3d.py); a depthwise one runs
    channels-last (_depthwise_3d).
    e.g. 16 -> 16 channels, 3x3, 8x16x32x32 fp32: Xb = Y = Yb = 524,288, Wb = 9,216:
    peak 1,057,792 - Y = 533,504 B of scratch (measured 533,504). A 1-D one is the 2-D one
    of height 1 that PyTorch runs (conv1d_view.py)."""
    node = as_conv2d(node)
    if _is_conv2d(node, transposed=True):
        return transposed_convolution(node, dims, threads)
    if not _is_conv2d(node, ranks=(4, 5)):
        return []
    x, w = node.inputs[0], node.inputs[1]
    assert x is not None and w is not None and x.shape is not None
    c = _conv(node, x, w, node.outputs[0], dims)
    if not _uses_onednn(node, x, w, dims, threads):
        return native(node, x, w, node.outputs[0], dims, [c.output_bytes])
    if c.depthwise and len(x.shape) == 5:
        return _depthwise_3d(c)
    if c.channels_last:  # nhwc is oneDNN's own layout: no reorder of x or y
        return _channels_last_forward(c, threads)
    xb = 0 if c.plain_input else c.blocked_input_bytes
    # no bias: no padded bias
    odd = c.padded_bias_bytes + ONEDNN_EXTRA_BYTES if c.padded_bias_bytes and c.biased else 0
    copy = (threads * c.subsampled_image_bytes + ONEDNN_EXTRA_BYTES
            if c.dense and c.strided and c.kernel_area == 1 else 0)
    held = c.layout_copy_bytes  # a view's operand made contiguous, held to the end
    return [held, odd, copy, xb, c.blocked_weight_bytes, c.blocked_output_bytes,
            -c.blocked_weight_bytes, -xb, -copy, -odd, c.output_bytes, -c.blocked_output_bytes,
            -held]


def _depthwise_3d(c: Conv) -> Allocations:
    """A depthwise Conv3d on oneDNN runs channels-last (ndhwc): x and y reordered unpadded,
    the weights padded to 16 channels, y copied out plain through one more copy:
    [+Xc, +W', +Yc, -W', -Xc, +Y, +Y, -Y, -Yc]. e.g. 2x24x4x16x16, 3x3x3 (measured): Xc = Yc
    = Y = 196,608, W' = 32 x 27 x 4 = 3,456: peak Yc + 2Y = 589,824 - Y = 393,216 B."""
    x, w, y = c.input_bytes, c.output_padded_weight_bytes, c.output_bytes
    return [x, w, y, -w, -x, y, y, -y, -y]


def transposed_convolution(node: Node, dims: Dims, threads: int) -> Allocations:
    """aten.convolution, transposed (x (N, Cin, H, W), w (Cin, Cout, kh, kw) -> y), NCHW,
    dense: oneDNN runs the reverse convolution's backward-data (y -> x, read backward), with
    its copies and scratchpad (`_input_gradient`, onednn_brgemm.py) and 128 B more where
    strided (the deconvolution's own registry entry): [+S, +X, +W', +Y, -W', -X, -S, +Y,
    +Y', -Y, -Y''] (the peak of [+X, +W', +Y, +S, ...]), unstrided [+B, +Xb, +Wd, +Yb, -Wd,
    -Xb, -B, +Y, -Yb], B the output made apart where a bias is added (in S where strided);
    where PyTorch runs it itself (_uses_onednn), slow_conv_transpose2d's columns, Cout x kh
    x kw by H x W per image.
    e.g. 2x16x8x8 -> 16 channels, 3x3 stride 2, 17x17 (a width the stride does not divide),
    one thread: S = 36,888 + 20,480 + 128 = 57,496, X = 8,192, W' = 9,216, Y = 36,992:
    peak 111,896 - Y = 74,904 B of scratch (measured 74,904)."""
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    assert x is not None and w is not None  # _is_conv2d's
    if not _uses_onednn(node, x, w, dims, threads):
        (_, _, ih, iw), (_, c_out, kh, kw) = _sizes(x, dims), _sizes(w, dims)
        columns = 0 if kh == kw == 1 else c_out * kh * kw * ih * iw * x.dtype.bits // 8
        # a channels-last input is copied plain first (measured: 1x1, one thread)
        plain = _bytes(x, dims) if node.attributes.get("channels_last", 0) else 0
        return [_bytes(y, dims), plain, columns, -columns, -plain]
    if node.attr_int("groups", 1) != 1:
        return []  # not measured
    if node.attributes.get("channels_last", 0):
        return _channels_last_transposed(node, x, w, y, dims, threads)
    c = _conv(node, y, w, x, dims)  # the reverse convolution: y -> x
    # with a bias, unstrided or over a width the stride does not divide, the output is made
    # in a buffer of its own first, + 128 B (measured, whatever the threads)
    uneven = _sizes(y, dims)[3] % node.attr_ints("stride", (1,))[-1] != 0
    made = c.input_bytes + ONEDNN_EXTRA_BYTES if c.biased and (uneven or not c.strided) else 0
    if not c.strided:
        xb, wd, yb = c.blocked_output_bytes, c.data_weight_bytes, c.blocked_input_bytes
        return [made, xb, wd, yb, -wd, -xb, -made, c.input_bytes, -yb]
    pad = _strided_data_pad(node, y, x, w, dims, threads) + ONEDNN_EXTRA_BYTES + made
    return _input_gradient(c, pad)


def _channels_last_transposed(node: Node, x: Value, w: Value, y: Value, dims: Dims,
                              threads: int) -> Allocations:
    """A dense transposed convolution on a channels-last input (SAM's mask decoder):
    [+Wc, +Y, +S, +W', -W', -S, -Wc], Wc the weights copied channels-last (none for a 1x1
    kernel, already so), S the reverse convolution's strided backward-data scratchpad + 128 B
    (unstrided: the channels-last forward's scratchpad + 128 B), W' the weights with Cout
    padded to oneDNN's block; no reorder of x or y, bias or not (measured, 1 and 2 threads).
    e.g. 2x16x4x4 -> 4 channels, 2x2 stride 2, two threads: Wc = 1,024, S = 12,288 + 2 x
    24,600 + 128 = 61,616, W' = 16 x 16 x 4 x 4 = 4,096: 66,736 B of scratch (measured)."""
    w_bytes, c_out = _bytes(w, dims), _sizes(w, dims)[1]
    copy = 0 if _sizes(w, dims)[2:] == [1, 1] else w_bytes
    if any(s > 1 for s in node.attr_ints("stride", (1,))):
        pad = _strided_data_pad(node, y, x, w, dims, threads)
    else:
        pad = CHANNELS_LAST_SCRATCHPAD_BYTES + CHANNELS_LAST_SCRATCHPAD_THREAD_BYTES * threads
    pad += ONEDNN_EXTRA_BYTES
    padded = w_bytes * _strided_padded(c_out) // c_out
    return [copy, _bytes(y, dims), pad, padded, -padded, -pad, -copy]


def _channels_last_forward(c: Conv, threads: int) -> Allocations:
    """[+C, +Y, +P, +W', -W', -P, -C]: C the input and weights copied to NHWC first where
    they are not (a slice of an NHWC tensor; a kxk kernel's NCHW weight), P the scratchpad
    (dense only), W' the weights padded to 16 output channels; [+C, +Y, -C] for a 1x1 kernel
    at one thread. e.g. 2x16x8x8 NHWC, 16 -> 16, 3x3, two threads: C 9,216 (the weight),
    Y 8,192, P 12,336, W' 9,216: 38,960 - Y = 30,768 B of scratch (measured 30,768)."""
    w, copies = c.output_padded_weight_bytes, c.layout_copy_bytes
    if c.depthwise:
        return [copies, c.output_bytes, w, -w, -copies]
    if not c.dense or (c.kernel_area == 1 and threads == 1):
        return [copies, c.output_bytes, -copies]
    pad = CHANNELS_LAST_SCRATCHPAD_BYTES + CHANNELS_LAST_SCRATCHPAD_THREAD_BYTES * threads
    return [copies, c.output_bytes, pad, w, -w, -pad, -copies]


def convolution_backward(node: Node, dims: Dims, threads: int) -> Allocations:
    """aten.convolution_backward (gy, x, w) -> (gx, gw, gb), as output_mask asks.

    Input gradient, NCHW: [+GYb, +Wd, +GXb, -Wd, -GYb, +GX, -GXb] (Wd: both channel dims
    padded); strided (not depthwise): computed plain beside oneDNN's scratchpad P, then copied
    out twice: [+GY, +W', +GX, +P, -P, -W', -GY, +GX, +GX, -GX, -GX] (W': input channels
    padded). Weight gradient, fp32 dense NCHW: [+GYb, +Xb, +GWb, +P, +GBo, -P, -GYb, -Xb, +GW,
    -GWb, -GBo], the layouts and oneDNN's scratchpad P of the kernel it picks
    (graphmem/runtime_models/onednn_weight_grad.py), GBo the bias gradient as computed;
    otherwise [+GYb, +Xb, +GWb, +F, -F, -GYb, -Xb, +GW, -GWb], F a 16-bit gradient's fp32
    accumulator (an input read plain: no Xb; a depthwise kernel larger than 3x3: computed on
    the plain tensors, no copies). Channels-last: no reorders; a depthwise weight gradient
    (kernel > 3x3) takes 256 weight-sized slices (and in 16 bits as many fp32 ones), then
    copies itself out ([+GX, +slices, +F, -F, +GW, +GW, -GW, -slices]). Where PyTorch runs
    the convolution itself (_uses_onednn), its column buffer.
    e.g. 16 -> 16 channels, 3x3, 8x16x32x32 fp32 (every gradient), 2 threads: GYb = GXb =
    GX = Xb = 524,288, GWb = 9,216, P = 29,952, GBo = 64: weight phase peak 1,612,096, less
    the outputs 533,568 -> 1,078,528 B (measured 1,078,528). 1-D: as convolution's."""
    node = as_conv2d(node)
    if not _is_conv2d(node, ranks=(4, 5)) or len(node.inputs) < 3:
        return []
    gy, x, w = node.inputs[0], node.inputs[1], node.inputs[2]
    assert gy is not None and x is not None and w is not None and x.shape is not None
    if not _uses_onednn(node, x, w, dims, threads):
        if len(x.shape) == 5:
            return slow_conv3d_backward(node, x, w, gy, dims)
        return native(node, x, w, gy, dims, [_bytes(v, dims) for v in node.outputs])
    if len(x.shape) == 5:
        return []  # oneDNN's Conv3d backward: not measured into a rule yet
    c = _conv(node, x, w, gy, dims)
    mask = node.attr_ints("output_mask", (1, 1, 1))
    grad_input, grad_weight = bool(mask[0]), bool(mask[1])
    if c.channels_last:
        return _channels_last_backward(c, w, grad_input, grad_weight)
    steps: Allocations = _input_gradient(c, _strided_data_pad(node, x, gy, w, dims, threads)
                                         ) if grad_input else []
    # a permuted or sliced output gradient is made contiguous first, held to the end
    # (measured: the U-Net's classifier 1x1, gy a permute of log_softmax's gradient, 81,920 B)
    copy = c.output_bytes if _strided_view(gy) else 0
    steps = [copy, *steps]
    if grad_weight:
        gw = c.weight_bytes
        # the bias gradient as oneDNN computes it, copied out like the weights' (GBo)
        gb = _bytes(node.outputs[-1], dims) if mask[2] else 0
        if c.depthwise and c.kernel_area > 9:
            steps += [gw]
        elif c.dense and _fp32(x):  # oneDNN's kernels as read from its sources
            p = plan(_shape(node, x, w, gy, dims, threads))
            steps += [p.output_grad_bytes, p.source_bytes, p.weight_bytes, p.scratchpad_bytes,
                      gb, -p.scratchpad_bytes, -p.output_grad_bytes, -p.source_bytes, gw,
                      -p.weight_bytes, -gb]
        else:
            xb = 0 if c.plain_input else c.blocked_input_bytes
            gwb = c.blocked_weight_bytes
            accumulate = _fp32_copy(gw, w)  # bf16 / fp16: the gradient accumulated in fp32
            steps += [c.blocked_output_bytes, xb, gwb, accumulate, gb, -accumulate,
                      -c.blocked_output_bytes, -xb, gw, -gwb, -gb]
    return [*steps, -copy]




def _shape(node: Node, x: Value, w: Value, gy: Value, dims: Dims, threads: int) -> ConvShape:
    """A dense convolution's weight gradient, in what oneDNN's kernels read (the bias
    gradient: output_mask's third)."""
    (mb, ic, ih, iw), (oc, _, kh, kw) = _sizes(x, dims), _sizes(w, dims)
    (_, _, oh, ow), stride = _sizes(gy, dims), node.attr_ints("stride", (1,))
    mask = node.attr_ints("output_mask", (1, 1, 1))
    return ConvShape(mb, ic, oc, ih, iw, oh, ow, kh, kw, stride[0], stride[-1],
                     bool(mask[2]), threads)






def _strided_view(value: Value) -> bool:
    """Whether `value` is a view whose elements are not contiguous: a permute that reorders
    its input's dims, or a slice of a dim with a dim of more than one element before it
    (shapes compared at their symbolic sizes)."""
    maker = value.producer
    if value.alias_of is None or maker is None or not maker.inputs:
        return False
    source = maker.inputs[0]
    if source is None or source.shape is None or value.shape is None:
        return False
    before, after = list(source.shape), list(value.shape)
    if maker.op_type in ("aten.permute.default", "aten.transpose.int"):
        kept = [d for d in before if d != 1]
        return kept != [d for d in after if d != 1]
    if maker.op_type == "aten.slice.Tensor" and len(before) == len(after):
        cut = next((i for i, (b, a) in enumerate(zip(before, after, strict=True)) if b != a),
                   None)
        return cut is not None and any(d != 1 for d in before[:cut])
    return False


def _strided_data_pad(node: Node, x: Value, gy: Value, w: Value, dims: Dims,
                      threads: int) -> int:
    """A strided backward-data's scratchpad (x the convolution's input, gy its output): oneDNN's
    booking where the padding is known and the convolution dense
    (graphmem/runtime_models/onednn_brgemm.py), else the least measured, 12,288 B + 24,600 B
    per thread."""
    padding, stride = node.attr_ints("padding", ()), node.attr_ints("stride", (1,))
    if not padding or node.attr_int("groups", 1) != 1:
        return (STRIDED_BACKWARD_DATA_SCRATCHPAD_BYTES
                + STRIDED_BACKWARD_DATA_SCRATCHPAD_THREAD_BYTES * threads)
    (_, ic, ih, iw), (_, oc, oh, ow) = _sizes(x, dims), _sizes(gy, dims)
    (_, _, kh, kw) = _sizes(w, dims)
    block = 1 if node.attributes.get("channels_last", 0) else BLOCK
    return strided_data_scratchpad(ih, iw, oh, ow, kh, kw, (stride[0], stride[-1]),
                                   (padding[0], padding[-1]), oc, threads, in_channels=ic,
                                   block=block)


def _input_gradient(c: Conv, pad: int) -> Allocations:
    if c.strided and not c.depthwise:
        # measured at 2 to 64 channels (and an image's 3 -> 64, 7x7 s2): plain, no reorders
        gy, gx = c.output_bytes, c.input_bytes
        weight = c.strided_data_weight_bytes
        return [gy, weight, gx, pad, -pad, -weight, -gy, gx, gx, -gx, -gx]
    return [c.blocked_output_bytes, c.data_weight_bytes, c.blocked_input_bytes,
            -c.data_weight_bytes, -c.blocked_output_bytes, c.input_bytes,
            -c.blocked_input_bytes]


def _channels_last_backward(c: Conv, w: Value, grad_input: bool,
                            grad_weight: bool) -> Allocations:
    blocked: Allocations = [c.input_bytes] if grad_input else []
    if grad_weight:
        gw = c.weight_bytes
        slices = DEPTHWISE_WEIGHT_SLICES * gw if c.depthwise and c.kernel_area > 9 else 0
        accumulate = _fp32_copy(slices, w)
        # the slices, the fp32 scratchpad (bf16), the gradient, then its plain copy
        blocked += [slices, accumulate, -accumulate, gw, gw, -gw, -slices]
    return blocked


def _fp32_copy(nbytes: int, like: Value) -> int:
    """The fp32 accumulator oneDNN keeps for a 16-bit weight gradient of `nbytes` (0 in
    fp32: measured 512x512x3x3 bf16, 4,718,592 B -> a 9,466,244 B scratchpad = 9,437,184 +
    29,060 of oneDNN's own)."""
    bits = like.dtype.bits if like.dtype.has_known_size else 32
    return nbytes * 32 // bits if bits < 32 else 0


def batch_norm_backward(node: Node, dims: Dims, threads: int) -> Allocations:
    """aten.native_batch_norm_backward (gy, x, ...) -> (gx, gw, gb): one temporary the size
    of x besides its outputs. e.g. x 8x64x32x32 fp32: [+GX 2,097,152, +256, +256,
    +2,097,152, -2,097,152] -> 2,097,152 B of scratch (measured 2,097,152)."""
    made = [_bytes(v, dims) for v in node.outputs]
    x = node.inputs[1] if len(node.inputs) > 1 else None
    return [*made, _bytes(x, dims), -_bytes(x, dims)]


def reduced_loss(node: Node, dims: Dims, threads: int) -> Allocations:
    """aten.mse_loss (x, target, reduction) reduced: the elementwise loss, then the storage the
    0-dim result keeps (the front end's `.unreduced` output: frontends/torch/loss_storage.py),
    the elementwise loss freed. e.g. x 1000x256 fp32: [+1,024,000, +1,024,000, -1,024,000] ->
    1,024,000 B of scratch (measured 1,024,012: the reduction's 8 and 4 B scalars aside)."""
    x = node.inputs[0] if node.inputs else None
    if len(node.outputs) < 2:  # reduction none: the elementwise loss is the output
        return []
    return [_bytes(x, dims), _bytes(node.outputs[1], dims), -_bytes(x, dims)]


RULES: dict[str, Callable[[Node, Dims, int], Allocations]] = {
    "aten.mse_loss.default": reduced_loss,
    FORWARD: convolution,
    "aten.convolution_backward.default": convolution_backward,
    "aten.native_batch_norm_backward.default": batch_norm_backward,
    "aten._native_multi_head_attention.default": native_multi_head_attention,
    "aten._transformer_encoder_layer_fwd.default": transformer_encoder_layer,
    "aten.mkldnn_rnn_layer.default": rnn_layer,
    "aten.mkldnn_rnn_layer_backward.default": rnn_layer_backward,
}


def scratch_bytes(node: Node, dims: Dims, threads: int = 1) -> int:
    """How far the kernel's allocations rise above the tensors it returns while it runs
    (`threads`: PyTorch's intra-op threads; oneDNN keeps some copies per thread)."""
    rule = RULES.get(node.op_type, promoted_copies if "promoted_inputs" in node.attributes
                     else None)
    if rule is None:
        return 0
    live = peak = 0
    for step in rule(node, dims, threads):
        live += step
        peak = max(peak, live)
    made = sum(_bytes(v, dims) for v in node.outputs if v.alias_of is None)
    return max(0, peak - max(live, made))
