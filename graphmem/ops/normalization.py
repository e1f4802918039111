"""Normalizations and softmax: FLOPs per element, one table.

Convention (shared with reduction.py): every element costs the arithmetic done on it; the
per-row (or per-channel) finalisation, a division by the count, an rsqrt of the variance, a
log of a sum, is O(rows) rather than O(elements) and is not counted. No MACs.

- Statistics of a normalized row (mean and variance): sum x, d = x - mean, d*d, sum d*d = 4;
  applying them, d * rstd = 1; so a plain normalization is 5 per element, plus 1 each for the
  scale (gamma) and the shift (beta) when the op has them.
- RMS statistics: x*x, sum = 2; applying them, x * rrms = 1; so 3, plus 1 for the scale.
- Softmax as every runtime computes it, numerically stable: max, x - max, exp, sum, divide = 5.
  LogSoftmax: max, x - max, exp, sum, (x - max) - log(sum) = 5.
- BatchNormalization at inference folds mean, var, scale and bias into one per-channel
  multiply-add (the folding is O(channels)): 2. In training mode it also computes the batch
  statistics: + 4.
"""

from __future__ import annotations

from graphmem.core.ir import DType, Node, Shape
from graphmem.core.symbolic import SymInt
from graphmem.ops.registry import (
    BackwardRule,
    OpCost,
    input_numel,
    output_numel,
    pointwise_backward_flops,
    register,
    register_backward,
    register_traits,
    saved_extra,
    saved_input,
    saved_output,
)
from graphmem.ops.traits import Autocast

MS_DOMAIN = "com.microsoft"

STATISTICS_FLOPS = 4  # sum x, x - mean, square, sum of squares
RMS_STATISTICS_FLOPS = 2  # square, sum of squares
APPLY_FLOPS = 1  # multiply by rstd (or rrms)
AFFINE_FLOPS = 1  # each of gamma (multiply) and beta (add)
SKIP_ADD_FLOPS = 1  # each of input + skip and + bias of the Skip*Normalization fusions

NORMALIZE_FLOPS = STATISTICS_FLOPS + APPLY_FLOPS  # 5
RMS_NORMALIZE_FLOPS = RMS_STATISTICS_FLOPS + APPLY_FLOPS  # 3
SOFTMAX_FLOPS_PER_ELEMENT = 5  # max, subtract, exp, sum, divide
LOG_SOFTMAX_FLOPS_PER_ELEMENT = 5  # max, subtract, exp, sum, subtract log-sum
BATCH_NORM_INFERENCE_FLOPS = 2  # folded per-channel multiply + add
LP_NORM_FLOPS = 3  # |x|^p, sum, divide by the norm
# weight normalization (torch's _weight_norm_interface), w = v * (g / ||v||) per row of v:
# square, sum, multiply per element of v (g / ||v|| is one per row, not counted); its
# backward: grad_g = sum(grad_w * v) / ||v|| (multiply, sum), grad_v = (g / ||v||) *
# (grad_w - v * grad_g / ||v||) (multiply, subtract, multiply): 5 per element of v
WEIGHT_NORM_FLOPS = 3
WEIGHT_NORM_BACKWARD_FLOPS = 5
LRN_FLOPS_OUTSIDE_WINDOW = 5  # square, scale, add bias, pow beta, divide


def affine_flops(node: Node, *indices: int) -> int:
    """1 FLOP per element for each present affine input (scale, bias) at `indices`."""
    return AFFINE_FLOPS * sum(node.input(i) is not None for i in indices)


@register("BatchNormalization")
def batch_normalization(node: Node) -> OpCost:
    # inputs: X, scale, B, input_mean, input_var
    per_element = BATCH_NORM_INFERENCE_FLOPS
    if node.attr_int("training_mode", 0):
        per_element += STATISTICS_FLOPS
    return OpCost.from_flops(output_numel(node) * per_element)


@register("LayerNormalization")
def layer_normalization(node: Node) -> OpCost:
    # inputs: X, Scale, B (optional): 5 + 1 (+ 1 with B) = 6 or 7 per element
    return OpCost.from_flops(output_numel(node) * (NORMALIZE_FLOPS + affine_flops(node, 1, 2)))


@register("InstanceNormalization", "GroupNormalization")
def instance_normalization(node: Node) -> OpCost:
    # inputs: X, scale, B (both required): 5 + 2 = 7 per element
    return OpCost.from_flops(output_numel(node) * (NORMALIZE_FLOPS + affine_flops(node, 1, 2)))


@register("SimplifiedLayerNormalization", domain=MS_DOMAIN)
@register("RMSNormalization", "SimplifiedLayerNormalization")
def rms_normalization(node: Node) -> OpCost:
    # inputs: X, scale: 3 + 1 = 4 per element. SimplifiedLayerNormalization is ORT's RMSNorm;
    # ORT registers it in the default domain, some exporters write com.microsoft.
    return OpCost.from_flops(output_numel(node) * (RMS_NORMALIZE_FLOPS + affine_flops(node, 1)))


def skip_add_flops(node: Node) -> int:
    # input + skip, and + bias (input 4 in both Skip* fusions) when present
    return SKIP_ADD_FLOPS * (1 + (node.input(4) is not None))


@register("SkipLayerNormalization", domain=MS_DOMAIN)
def skip_layer_normalization(node: Node) -> OpCost:
    # inputs: input, skip, gamma, beta (optional), bias (optional): 1 (+1) + 5 + 1 (+1)
    per_element = skip_add_flops(node) + NORMALIZE_FLOPS + affine_flops(node, 2, 3)
    return OpCost.from_flops(output_numel(node) * per_element)


@register("SkipSimplifiedLayerNormalization", domain=MS_DOMAIN)
def skip_simplified_layer_normalization(node: Node) -> OpCost:
    # inputs: input, skip, gamma, (unused), bias (optional): 1 (+1) + 3 + 1
    per_element = skip_add_flops(node) + RMS_NORMALIZE_FLOPS + affine_flops(node, 2)
    return OpCost.from_flops(output_numel(node) * per_element)


@register("MeanVarianceNormalization")
def mean_variance_normalization(node: Node) -> OpCost:
    # (x - mean) / sqrt(var) over `axes`: the statistics and their application, no affine: 5
    return OpCost.from_flops(output_numel(node) * NORMALIZE_FLOPS)


@register("LpNormalization")
def lp_normalization(node: Node) -> OpCost:
    return OpCost.from_flops(output_numel(node) * LP_NORM_FLOPS)


@register("LRN")
def local_response_normalization(node: Node) -> OpCost:
    # y = x / (bias + alpha/size * sum over `size` channels of x^2)^beta
    window_adds = node.attr_int("size", 1)
    return OpCost.from_flops(output_numel(node) * (window_adds + LRN_FLOPS_OUTSIDE_WINDOW))


@register("Softmax")
def softmax(node: Node) -> OpCost:
    return OpCost.from_flops(input_numel(node, 0) * SOFTMAX_FLOPS_PER_ELEMENT)


@register("LogSoftmax")
def log_softmax(node: Node) -> OpCost:
    return OpCost.from_flops(input_numel(node, 0) * LOG_SOFTMAX_FLOPS_PER_ELEMENT)


@register("BiasSoftmax", domain=MS_DOMAIN)
def bias_softmax(node: Node) -> OpCost:
    # softmax(data + bias): one add more per element
    return OpCost.from_flops(input_numel(node, 0) * (SOFTMAX_FLOPS_PER_ELEMENT + 1))


# ----- backward (training) --------------------------------------------------------------------
# derivatives.yaml: native_layer_norm saves input, weight, bias and its result1/result2 (mean
# and rstd, float32, one per normalized row: shape [*leading dims, 1, ...]);
# native_batch_norm (training) saves input, weight, running stats and save_mean/save_invstd
# (float32 [C]); _softmax and _log_softmax save their result.
# Backward FLOPs per element: layer/batch norm 12 (recompute x_hat 2, g * w 1, two row sums 2,
# g * w * x_hat 1, two subtracts 2, times rstd 1, the weight's g * x_hat and sum 2, the bias's
# sum 1); RMS norm 8 (the same without the mean terms); softmax y * (g - sum(g * y)) 4;
# log-softmax g - exp(y) * sum(g) 4.
NORM_BACKWARD_FLOPS = 12
RMS_NORM_BACKWARD_FLOPS = 8
SOFTMAX_BACKWARD_FLOPS = 4


def row_statistics_shape(node: Node) -> Shape:
    """[d0, ..., d(axis-1), 1, ..., 1]: one mean or rstd per normalized row."""
    x = node.input(0)
    shape = x.shape if x is not None else None
    if shape is None:
        return ()
    axis = node.attr_int("axis", -1) % len(shape)
    return (*shape[:axis], *(SymInt.const(1) for _ in shape[axis:]))


def channel_statistics_shape(node: Node) -> Shape:
    """[C]: BatchNorm's per-channel save_mean and save_invstd."""
    x = node.input(0)
    shape = x.shape if x is not None else None
    return () if shape is None or len(shape) < 2 else (shape[1],)


_FP32 = DType.FLOAT32
register_backward("LayerNormalization")(BackwardRule(
    (saved_input(0), saved_input(1), saved_extra("mean", _FP32, row_statistics_shape),
     saved_extra("rstd", _FP32, row_statistics_shape)),
    pointwise_backward_flops(NORM_BACKWARD_FLOPS), differentiable=(0, 1, 2)))
register_backward("RMSNormalization", "SimplifiedLayerNormalization")(BackwardRule(
    (saved_input(0), saved_input(1), saved_extra("rstd", _FP32, row_statistics_shape)),
    pointwise_backward_flops(RMS_NORM_BACKWARD_FLOPS), differentiable=(0, 1)))
register_backward("BatchNormalization")(BackwardRule(
    (saved_input(0), saved_input(1), saved_extra("save_mean", _FP32, channel_statistics_shape),
     saved_extra("save_invstd", _FP32, channel_statistics_shape)),
    pointwise_backward_flops(NORM_BACKWARD_FLOPS), differentiable=(0, 1, 2)))
register_backward("Softmax", "LogSoftmax")(BackwardRule(
    (saved_output(),), pointwise_backward_flops(SOFTMAX_BACKWARD_FLOPS), differentiable=(0,)))


# ----- traits ---------------------------------------------------------------------------------
# CUDA autocast's fp32 list (softmax, log_softmax, layer_norm, group_norm, norm); CPU autocast
# runs them in the input's type
register_traits("Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization",
                "InstanceNormalization", "RMSNormalization", "LpNormalization",
                autocast_cuda=Autocast.FLOAT32)
