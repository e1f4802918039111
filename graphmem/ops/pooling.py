"""Pooling and resampling: FLOPs per output element times the window or the taps. No MACs.

- MaxPool, AveragePool, LpPool: numel(out) * prod(kernel_shape) * (1 compare or add per
  window element; LpPool 2: |x|^p and add). AveragePool's divide per output is not counted
  (O(outputs), as in reduction.py).
- Interpolation (Resize, Upsample, GridSample, RoiAlign samples), per output element, in d
  interpolated dims (for Resize: the dims whose size changes; for GridSample: the spatial
  dims):
    nearest: 0 (a gather; the bytes are counted, not arithmetic)
    linear:  (2^d - 1) lerps of 3 FLOPs each, a + w * (b - a): bilinear 9, trilinear 21
    cubic:   (4^d - 1) / 3 four-tap filters of 7 FLOPs each (4 multiplies, 3 adds):
             bicubic 5 * 7 = 35
  The interpolation weights depend on one coordinate along one axis and are shared by every
  channel, so computing them is not counted.
"""

from __future__ import annotations

import math

from graphmem.core.ir import DType, Node, Shape
from graphmem.ops.registry import (
    BackwardRule,
    CostRule,
    OpCost,
    ShapeUnknownError,
    known_dim,
    known_shape,
    output_numel,
    pointwise_backward_flops,
    register,
    register_backward,
    saved_extra,
    saved_input,
)

WINDOW_ELEMENT_FLOPS = 1  # MaxPool: a compare, AveragePool: an add, per window element
LP_WINDOW_ELEMENT_FLOPS = 2  # LpPool: |x|^p and an add
LERP_FLOPS = 3  # a + w * (b - a)
CUBIC_TAP_FILTER_FLOPS = 7  # 4 multiplies, 3 adds
ROI_ALIGN_DEFAULT_SAMPLES = 4  # sampling_ratio=0 is adaptive (data-dependent): assume 2 x 2


def window_size(node: Node) -> int:
    kernel = node.attr_ints("kernel_shape")
    if not kernel:
        raise ShapeUnknownError(f"{node.describe()}: no kernel_shape attribute")
    return math.prod(kernel)


def pool_rule(flops_per_window_element: int) -> CostRule:
    def rule(node: Node) -> OpCost:
        # [n, c, *in] -> [n, c, *out]: n*c*prod(out) windows of prod(kernel) elements
        return OpCost.from_flops(output_numel(node) * window_size(node) * flops_per_window_element)

    return rule


register("MaxPool", "AveragePool")(pool_rule(WINDOW_ELEMENT_FLOPS))
register("LpPool")(pool_rule(LP_WINDOW_ELEMENT_FLOPS))


def lerp_flops(dims: int) -> int:
    """(Multi)linear interpolation in `dims` dims, per output element: 2^dims corners
    blended by 2^dims - 1 lerps (bilinear: 3 lerps x 3 FLOPs = 9)."""
    return (2**dims - 1) * LERP_FLOPS


def cubic_flops(dims: int) -> int:
    """Cubic interpolation in `dims` dims, per output element: (4^dims - 1) / 3 four-tap
    filters (bicubic: 4 along one axis, then 1 across them: 5 x 7 = 35)."""
    return (4**dims - 1) // 3 * CUBIC_TAP_FILTER_FLOPS


def interpolation_flops(mode: str, dims: int, node: Node) -> int:
    """FLOPs per output element of `mode` interpolation in `dims` dimensions."""
    if dims == 0 or mode == "nearest":
        return 0
    if mode in ("linear", "bilinear", "trilinear"):
        return lerp_flops(dims)
    if mode in ("cubic", "bicubic"):
        return cubic_flops(dims)
    raise ShapeUnknownError(f"{node.describe()}: interpolation mode {mode!r} is not known")


def resized_dims(node: Node) -> int:
    # the axes whose size changes: [n, c, h, w] -> [n, c, 2h, 2w] interpolates in 2 dims
    before = known_shape(node.input(0), node)
    after = known_shape(node.outputs[0], node)
    return sum(old != new for old, new in zip(before, after, strict=True))


@register("Resize", "Upsample")
def resize(node: Node) -> OpCost:
    per_element = interpolation_flops(node.attr_str("mode", "nearest"), resized_dims(node), node)
    return OpCost.from_flops(output_numel(node) * per_element)


def resize_backward_flops(node: Node, needs_grad: frozenset[int]) -> OpCost:
    # the transpose of the interpolation: the same taps, accumulated into the input
    return resize(node)


@register("GridSample")
def grid_sample(node: Node) -> OpCost:
    # X [n, c, *in], grid [n, *out, d] -> [n, c, *out]: one d-dim interpolation per output
    spatial_dims = len(known_shape(node.input(0), node)) - 2
    per_element = interpolation_flops(node.attr_str("mode", "linear"), spatial_dims, node)
    return OpCost.from_flops(output_numel(node) * per_element)


@register("RoiAlign")
def roi_align(node: Node) -> OpCost:
    # [num_rois, c, out_h, out_w]: each output averages samples^2 bilinear samples (9 + 1 add)
    ratio = node.attr_int("sampling_ratio", 0)
    samples = ratio * ratio if ratio > 0 else ROI_ALIGN_DEFAULT_SAMPLES
    per_sample = interpolation_flops("linear", 2, node) + 1  # mode="max": a compare for the add
    return OpCost.from_flops(output_numel(node) * (samples * per_sample))


@register("AffineGrid")
def affine_grid(node: Node) -> OpCost:
    # theta [n, d, d + 1] applied to every homogeneous position [x, y, (z,) 1] of the grid:
    # out [n, *size, d]: each output coordinate is d MACs and the translation's add
    # (the evenly spaced base coordinates are O(sum of the sizes), not counted)
    dims = known_dim(node.input(0), 1, node)
    return OpCost.from_macs(output_numel(node) * dims) + OpCost.from_flops(output_numel(node))


@register("MaxRoiPool")
def max_roi_pool(node: Node) -> OpCost:
    # X [n, c, h, w], rois [r, 5] -> [r, c, ph, pw]: each ROI's bins tile the ROI, so every
    # element of the ROI is compared once. A ROI's extent is data: counted as the whole
    # feature map, r * c * h * w compares, an upper bound (the node says so)
    x = known_shape(node.input(0), node)
    if len(x) != 4:
        raise ShapeUnknownError(f"{node.describe()}: X has rank {len(x)}, not 4")
    rois = known_dim(node.input(1), 0, node)
    compares = rois * x[1] * x[2] * x[3] * WINDOW_ELEMENT_FLOPS
    return OpCost.from_flops(compares).noted("an upper bound: every ROI taken as the whole map")


# ----- backward (training) --------------------------------------------------------------------
# derivatives.yaml: max_pool2d_with_indices saves self and result1, the int64 argmax indices
# (one per output element); its backward scatters each gradient to its index (1 FLOP per
# output element: MAX_POOL_BACKWARD_FLOPS). avg_pool2d saves self (for its shape only; our
# inputs' sizes are kept by the gradient's shape): spreading each gradient over its window is
# 1 FLOP per window element.
def _indices_shape(node: Node) -> Shape:
    return node.outputs[0].shape or ()


def _window_backward_flops(node: Node, needs_grad: frozenset[int]) -> OpCost:
    return OpCost.from_flops(output_numel(node) * window_size(node))


MAX_POOL_BACKWARD_FLOPS = 1  # each output gradient added at its argmax
register_backward("MaxPool")(BackwardRule(
    (saved_input(0), saved_extra("indices", DType.INT64, _indices_shape)),
    pointwise_backward_flops(MAX_POOL_BACKWARD_FLOPS), differentiable=(0,)))
register_backward("AveragePool")(BackwardRule((), _window_backward_flops, differentiable=(0,)))
register_backward("Resize", "Upsample")(
    BackwardRule((), resize_backward_flops, differentiable=(0,)))
