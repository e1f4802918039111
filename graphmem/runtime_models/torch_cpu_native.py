"""PyTorch's own CPU convolutions (slow_conv2d, slow_conv3d) and the choice between them and
oneDNN, for the torch-cpu runtime model (graphmem/runtime_models/torch_cpu.py): the
allocations of the kernels PyTorch runs itself, and the sizes both modules read."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import overload

from graphmem.core.ir import AttributeValue, Node, Value
from graphmem.core.symbolic import SymInt
from graphmem.passes.memory_model import size_at

Dims = Mapping[str, int]
Allocations = list[int]  # +bytes allocated / -bytes freed inside one kernel call, in order


def nbytes_at(value: Value | None, dims: Dims) -> int:
    return 0 if value is None else size_at(value.nbytes, dims)


def is_fp32(value: Value) -> bool:
    return value.dtype.has_known_size and value.dtype.bits == 32 and value.dtype.is_float


def sizes_at(value: Value, dims: Dims) -> list[int]:
    assert value.shape is not None  # the callers check the rank (torch_cpu._is_conv2d)
    return [size_at(d, dims) for d in value.shape]


def uses_onednn(node: Node, x: Value, w: Value, dims: Dims, threads: int) -> bool:
    """PyTorch's choice (aten/src/ATen/native/Convolution.cpp ConvParams::use_mkldnn) for a
    CPU fp32 convolution: oneDNN unless a 1x1 kernel, unstrided, on fewer than 16 images at
    one thread ('THNN is faster when single-threaded'), or a dense kernel of at most 3 wide or
    high on one image of at most 20,480 elements; 16-bit inputs always take oneDNN."""
    if not is_fp32(x):
        return True
    mb, (kh, kw) = sizes_at(x, dims)[0], sizes_at(w, dims)[-2:]
    strided = any(s > 1 for s in node.attr_ints("stride", (1,)))
    pointwise = kh == kw == 1
    if not (strided or mb >= 16 or not pointwise or threads > 1):
        return False
    # "input.size(0..3)": N x C x H x W in 2-D, N x C x T x H in 3-D (measured: a Conv3d on
    # 1x8x8x48x48, 3x3x3, runs PyTorch's own at 3,072 < 20,480 of 147,456 elements)
    return (node.attr_int("groups", 1) > 1 or (kh > 3 and kw > 3) or mb > 1
            or math.prod(sizes_at(x, dims)[:4]) > 20_480)


def native(node: Node, x: Value, w: Value, y: Value, dims: Dims,
            made: Allocations) -> Allocations:
    """PyTorch's own slow_conv2d / slow_conv3d (forward, or backward with y the output
    gradient): the outputs, then the input unfolded to columns (N x Cin*kernel x output
    area; none for a 1x1 kernel, unstrided: measured 1x8x16x16 -> 8, 3x3, fp32: 8 * 9 * 256
    * 4 = 73,728 B in each; 3-D 1x16x4x16x16 -> 16, 3x3x3: 16 * 27 * 1,024 * 4 =
    1,769,472)."""
    columns, unfolded = _columns(node, x, w, y, dims)
    return [*made, columns if unfolded else 0, -columns if unfolded else 0]


def _columns(node: Node, x: Value, w: Value, y: Value, dims: Dims) -> tuple[int, bool]:
    """PyTorch's own convolution's columns, N x Cin*kernel x output area, and whether it
    unfolds them (a kernel larger than 1, or a stride)."""
    (mb, ic, *_), w_dims, y_dims = sizes_at(x, dims), sizes_at(w, dims), sizes_at(y, dims)
    kernel, area = math.prod(w_dims[2:]), math.prod(y_dims[2:])
    strided = any(s > 1 for s in node.attr_ints("stride", (1,)))
    return mb * ic * kernel * area * x.dtype.bits // 8, kernel > 1 or strided


def slow_conv3d_backward(node: Node, x: Value, w: Value, gy: Value,
                          dims: Dims) -> Allocations:
    """slow_conv3d's backward: [+GX, +C, -C, +GB, +GW, +C', -C'], C the input gradient's
    columns (taken even for an unstrided 1x1x1), C' the input unfolded again for the weight
    gradient (where it unfolds). e.g. 1x20x4x16x16 -> 24, 3x3x3 padding 1: C = C' = 20 x 27
    x 1,024 x 4 = 2,211,840 (measured 2,211,840 of scratch); 1x32x4x16x16 -> 32, 1x1x1: GX =
    C = 131,072, GB 128, GW 4,096: peak 262,144 - 135,296 = 126,848 (measured)."""
    columns, unfolded = _columns(node, x, w, gy, dims)
    mask = node.attr_ints("output_mask", (1, 1, 1))
    outputs = [nbytes_at(v, dims) for v in node.outputs]
    gx, rest = (outputs[:1], outputs[1:]) if mask[0] else ([], outputs)
    steps = [*gx, columns, -columns] if mask[0] else []
    again = columns if unfolded and mask[1] else 0
    return [*steps, *rest, again, -again]


def as_2d(node: Node) -> Node:
    """A 1-D convolution (x [N, C, L], w [Cout, Cin/g, k]) as PyTorch runs it on the CPU: a
    2-D one on [N, C, 1, L] and [Cout, Cin/g, 1, k] (Convolution.cpp `view1d_as_2d`, after
    `input.contiguous()`), stride, padding and dilation 1 in the new dim; any other node as
    it is. e.g. Autoformer's trend projection, 32 -> 7 channels, k 3, x [2, 32, 20] fp32:
    [+Xb 5,120, +Wb 16 x 32 x 3 x 4 = 6,144, +Yb 2 x 16 x 18 x 4 = 2,304, -Wb, -Xb, +Y 1,008,
    -Yb] -> 12,560 B of scratch (measured 12,560)."""
    x, w = [*node.inputs, None, None][:2]
    if x is None or w is None or x.shape is None or w.shape is None or len(x.shape) != 3:
        return node
    unit = (SymInt.const(1),)
    extended: dict[str, AttributeValue] = {
        name: (1, *node.attr_ints(name)) for name in ("stride", "padding")
        if name in node.attributes}
    return replace(node, inputs=[_unit_dim(v, unit) for v in node.inputs],
                   outputs=[_unit_dim(v, unit) for v in node.outputs],
                   attributes={**node.attributes, **extended})


@overload
def _unit_dim(value: Value, unit: tuple[SymInt, ...]) -> Value: ...
@overload
def _unit_dim(value: None, unit: tuple[SymInt, ...]) -> None: ...
def _unit_dim(value: Value | None, unit: tuple[SymInt, ...]) -> Value | None:
    if value is None or value.shape is None or len(value.shape) != 3:
        return value
    return replace(value, shape=(*value.shape[:2], *unit, value.shape[2]))
