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

from graphmem.costs.registry import OpCost, input_numel, output_numel, register
from graphmem.ir import Node

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
