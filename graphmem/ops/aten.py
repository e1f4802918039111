"""aten ops, the nodes of a traced PyTorch step: the ONNX op each one computes, and its FLOPs.

A traced node's op type is `aten.<packet>.<overload>` in domain "aten"; graphmem names it by
its overload packet (`op_name`: `aten.addmm.default` -> `addmm`). This module
- maps packets to the canonical ONNX op of the same math (`addmm` -> Gemm,
  `native_layer_norm` -> LayerNormalization) and registers each with that op's traits, so a
  pass asks `traits_of(node)` and gets the same answer in both vocabularies. aten-only traits
  are added here: PyTorch's in-place form (`relu_`), and being one (`relu_`, `add_`);
- holds the torch path's FLOPs conventions as tables. Every number in them is a family's
  constant, imported (never retyped): graphmem/frontends/torch/costs.py applies them to the
  traced shapes, after PyTorch's own FlopCounterMode formulas (contractions, attention).

No torch here: only the front end imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from graphmem.ops.elementwise import BACKWARD_TABLE, FLOPS_PER_ELEMENT, PRIMITIVE_FLOPS
from graphmem.ops.movement import SCATTER_ADD_FLOPS
from graphmem.ops.normalization import (
    AFFINE_FLOPS,
    BATCH_NORM_INFERENCE_FLOPS,
    LOG_SOFTMAX_FLOPS_PER_ELEMENT,
    NORM_BACKWARD_FLOPS,
    NORMALIZE_FLOPS,
    RMS_NORMALIZE_FLOPS,
    SOFTMAX_BACKWARD_FLOPS,
    SOFTMAX_FLOPS_PER_ELEMENT,
    STATISTICS_FLOPS,
    WEIGHT_NORM_BACKWARD_FLOPS,
    WEIGHT_NORM_FLOPS,
)
from graphmem.ops.pooling import (
    MAX_POOL_BACKWARD_FLOPS,
    WINDOW_ELEMENT_FLOPS,
    cubic_flops,
    lerp_flops,
)
from graphmem.ops.reduction import FLOPS_PER_INPUT_ELEMENT, HISTOGRAM_FLOPS_PER_ELEMENT
from graphmem.ops.registry import (
    ATEN_DOMAIN,
    find_spec,
    register_canonical,
    register_traits,
)
from graphmem.ops.sampling import binary_search_compares
from graphmem.ops.training import NLL_FLOPS_PER_ROW
from graphmem.ops.traits import Traits

# ----- aten packet -> the ONNX op of the same math --------------------------------------------
CANONICAL: dict[str, str] = {
    # contractions (FlopCounterMode prices those that reach a trace; linear, matmul and
    # conv2d are composite: a trace holds the mm/addmm/bmm/convolution they become)
    "mm": "MatMul", "bmm": "MatMul", "matmul": "MatMul", "baddbmm": "MatMul",
    "addbmm": "MatMul", "addmm": "Gemm", "linear": "Gemm", "_grouped_mm": "MatMul",
    "convolution": "Conv", "_convolution": "Conv", "conv1d": "Conv", "conv2d": "Conv",
    "conv3d": "Conv", "conv_transpose1d": "ConvTranspose", "conv_transpose2d": "ConvTranspose",
    "conv_transpose3d": "ConvTranspose",
    # views and reshapes
    "view": "Reshape", "_unsafe_view": "Reshape", "reshape": "Reshape", "flatten": "Flatten",
    "squeeze": "Squeeze", "unsqueeze": "Unsqueeze", "permute": "Transpose",
    "transpose": "Transpose", "t": "Transpose", "expand": "Expand", "slice": "Slice",
    "split": "Split", "split_with_sizes": "Split",
    # an embedding reads rows of its weight
    "embedding": "Gather",
    # elementwise
    "relu": "Relu", "leaky_relu": "LeakyRelu", "elu": "Elu", "sigmoid": "Sigmoid",
    "tanh": "Tanh", "hardsigmoid": "HardSigmoid", "hardswish": "HardSwish", "silu": "Swish",
    "gelu": "Gelu", "hardtanh": "Clip", "relu6": "Clip", "clamp": "Clip", "clamp_min": "Clip",
    "clamp_max": "Clip", "add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "neg": "Neg",
    "exp": "Exp", "log": "Log", "pow": "Pow", "sqrt": "Sqrt", "abs": "Abs", "where": "Where",
    "softplus": "Softplus",
    # normalizations and softmax
    "_softmax": "Softmax", "_safe_softmax": "Softmax", "_log_softmax": "LogSoftmax",
    "native_layer_norm": "LayerNormalization", "native_group_norm": "GroupNormalization",
    "native_batch_norm": "BatchNormalization", "_native_batch_norm_legit": "BatchNormalization",
    "_native_batch_norm_legit_no_training": "BatchNormalization",
    "_fused_rms_norm": "RMSNormalization",
    # reductions and pools
    "sum": "ReduceSum", "mean": "ReduceMean", "amax": "ReduceMax", "amin": "ReduceMin",
    "max": "ReduceMax", "min": "ReduceMin", "prod": "ReduceProd", "argmax": "ArgMax",
    "argmin": "ArgMin", "cumsum": "CumSum", "logsumexp": "ReduceLogSumExp",
    "norm": "ReduceL2", "linalg_vector_norm": "ReduceL2",
    "max_pool1d": "MaxPool", "max_pool2d": "MaxPool", "max_pool2d_with_indices": "MaxPool",
    "max_pool3d_with_indices": "MaxPool", "avg_pool1d": "AveragePool",
    "avg_pool2d": "AveragePool", "avg_pool3d": "AveragePool",
    "_adaptive_avg_pool2d": "GlobalAveragePool", "adaptive_avg_pool3d": "GlobalAveragePool",
    # the loss
    "nll_loss_forward": "NegativeLogLikelihoodLoss",
}
# Packets with an in-place form `<packet>_` a model could call instead (F.relu(x, inplace=True))
INPLACE_FORMS = frozenset({
    "relu", "relu6", "hardtanh", "leaky_relu", "elu", "silu", "hardswish", "hardsigmoid",
    "sigmoid", "tanh", "clamp", "clamp_min", "clamp_max", "add", "sub", "mul", "div", "neg",
    "exp",
})
# what the aten op does not share with its canonical ONNX op: its own in-place form
_OWN_TRAITS = frozenset({"inplace_variant", "is_inplace"})


# ----- the torch path's FLOPs conventions -----------------------------------------------------
@dataclass(frozen=True)
class PerElement:
    """`flops` per element of one argument: `argument` (a positional index), or None for the
    first tensor argument; `if_training` more when the bool at `training_argument` is true."""

    flops: int
    argument: int | None = None
    if_training: int = 0
    training_argument: int | None = None


_REDUCE = FLOPS_PER_INPUT_ELEMENT
# glu(x, dim) -> a * sigmoid(b), x split in halves a, b along dim: per output element a
# sigmoid and a multiply (4 + 1 = 5). glu_backward(grad, x, dim), per gradient element: the
# sigmoid again, the multiply's two gradients (grad * s, grad * a) and the sigmoid's
# backward (s * (1 - s) * grad_s): 4 + 2 * 1 + 3 = 9
_SIGMOID = FLOPS_PER_ELEMENT["Sigmoid"]
GLU_FLOPS = _SIGMOID + FLOPS_PER_ELEMENT["Mul"]
GLU_BACKWARD_FLOPS = _SIGMOID + 2 * BACKWARD_TABLE["Mul"][1] + BACKWARD_TABLE["Sigmoid"][1]
# polar(abs, angle) -> abs * cos(angle) + i * abs * sin(angle): per element a cosine, a sine
# and two multiplies (1 + 1 + 2 = 4; DeepSeek-V2's rotary embedding as complex numbers)
POLAR_FLOPS = FLOPS_PER_ELEMENT["Cos"] + FLOPS_PER_ELEMENT["Sin"] + 2 * FLOPS_PER_ELEMENT["Mul"]
# mse_loss(self, target, reduction): per element a subtract, a square and the reduction's add
# (1 + 1 + 1 = 3; the mean's one divide not counted). mse_loss_backward(grad, self, target,
# reduction): (self - target) * (2 / N) * grad, per element a subtract and two multiplies
# (1 + 1 + 1 = 3; aten/src/ATen/native/Loss.cpp mse_loss_backward_out)
MSE_FLOPS = FLOPS_PER_ELEMENT["Sub"] + FLOPS_PER_ELEMENT["Mul"] + _REDUCE["ReduceSum"]
MSE_BACKWARD_FLOPS = FLOPS_PER_ELEMENT["Sub"] + 2 * FLOPS_PER_ELEMENT["Mul"]
_AFFINE_NORMALIZE = NORMALIZE_FLOPS + 2 * AFFINE_FLOPS  # weight and bias: 7
PER_ELEMENT: dict[str, PerElement] = {
    "sum": PerElement(_REDUCE["ReduceSum"]), "mean": PerElement(_REDUCE["ReduceMean"]),
    "amax": PerElement(_REDUCE["ReduceMax"]), "amin": PerElement(_REDUCE["ReduceMin"]),
    "max": PerElement(_REDUCE["ReduceMax"]), "min": PerElement(_REDUCE["ReduceMin"]),
    "prod": PerElement(_REDUCE["ReduceProd"]), "argmax": PerElement(_REDUCE["ArgMax"]),
    "argmin": PerElement(_REDUCE["ArgMin"]), "cumsum": PerElement(_REDUCE["CumSum"]),
    "logsumexp": PerElement(_REDUCE["ReduceLogSumExp"]),
    # any / all of a boolean tensor: a max / a min over it, one compare per element
    "any": PerElement(_REDUCE["ReduceMax"]), "all": PerElement(_REDUCE["ReduceMin"]),
    # the same over the whole tensor to one bool (torch.distributions' argument checks:
    # Gemma-3n's activation sparsity reads a Normal's quantile)
    "_is_any_true": PerElement(_REDUCE["ReduceMax"]),
    "_is_all_true": PerElement(_REDUCE["ReduceMin"]),
    "glu_backward": PerElement(GLU_BACKWARD_FLOPS),
    "polar": PerElement(POLAR_FLOPS),
    "norm": PerElement(_REDUCE["ReduceL2"]), "linalg_vector_norm": PerElement(_REDUCE["ReduceL2"]),
    "_adaptive_avg_pool2d": PerElement(_REDUCE["GlobalAveragePool"]),
    "adaptive_avg_pool3d": PerElement(_REDUCE["GlobalAveragePool"]),
    # _adaptive_avg_pool2d_backward(grad_output, self): the forward transposed, each input
    # element's share of its bins' gradients added in, per element of self (UperNet's pyramid
    # pooling)
    "_adaptive_avg_pool2d_backward": PerElement(_REDUCE["GlobalAveragePool"], argument=1),
    "_adaptive_avg_pool3d_backward": PerElement(_REDUCE["GlobalAveragePool"], argument=1),
    # a row's mean and variance: sum x, x - mean, square, sum of squares
    "var": PerElement(STATISTICS_FLOPS), "std": PerElement(STATISTICS_FLOPS),
    "var_mean": PerElement(STATISTICS_FLOPS),
    "_softmax": PerElement(SOFTMAX_FLOPS_PER_ELEMENT),
    # softmax that returns 0 for a fully masked row (the math SDPA backend): one more select
    "_safe_softmax": PerElement(SOFTMAX_FLOPS_PER_ELEMENT),
    "_log_softmax": PerElement(LOG_SOFTMAX_FLOPS_PER_ELEMENT),
    "_softmax_backward_data": PerElement(SOFTMAX_BACKWARD_FLOPS),
    "_log_softmax_backward_data": PerElement(SOFTMAX_BACKWARD_FLOPS),
    "native_layer_norm": PerElement(_AFFINE_NORMALIZE),
    "native_group_norm": PerElement(_AFFINE_NORMALIZE),
    "_fused_rms_norm": PerElement(RMS_NORMALIZE_FLOPS + AFFINE_FLOPS),
    # the folded multiply-add; in training mode the batch statistics first, as the ONNX rule
    # native_batch_norm(input, weight, bias, running_mean, running_var, training, ...)
    "native_batch_norm": PerElement(BATCH_NORM_INFERENCE_FLOPS, if_training=STATISTICS_FLOPS,
                                    training_argument=5),
    "_native_batch_norm_legit": PerElement(BATCH_NORM_INFERENCE_FLOPS,
                                           if_training=STATISTICS_FLOPS, training_argument=5),
    "_native_batch_norm_legit_no_training": PerElement(BATCH_NORM_INFERENCE_FLOPS),
    "native_layer_norm_backward": PerElement(NORM_BACKWARD_FLOPS),
    "native_batch_norm_backward": PerElement(NORM_BACKWARD_FLOPS),
    "native_group_norm_backward": PerElement(NORM_BACKWARD_FLOPS),
    # nll_loss_forward(self, target, ...), nll_loss_backward(grad, self, target, ...): one
    # pick per target, as the ONNX NegativeLogLikelihoodLoss
    "nll_loss_forward": PerElement(NLL_FLOPS_PER_ROW, argument=1),
    "nll_loss_backward": PerElement(NLL_FLOPS_PER_ROW, argument=2),
    "mse_loss": PerElement(MSE_FLOPS),
    "mse_loss_backward": PerElement(MSE_BACKWARD_FLOPS, argument=1),
    "embedding_dense_backward": PerElement(SCATTER_ADD_FLOPS),
    # index_add(self, dim, index, source): each source element added into its row
    "index_add": PerElement(SCATTER_ADD_FLOPS, argument=3),
    "index_add_": PerElement(SCATTER_ADD_FLOPS, argument=3),
    # a router's tokens per expert: each choice counted into its expert's bin
    "histc": PerElement(HISTOGRAM_FLOPS_PER_ELEMENT),
    "bincount": PerElement(HISTOGRAM_FLOPS_PER_ELEMENT),
    # scatter_add(self, dim, index, src): each src element added into self at its index
    # (DeBERTa's relative-position gathers differentiate to it)
    "scatter_add": PerElement(SCATTER_ADD_FLOPS, argument=3),
    "scatter_add_": PerElement(SCATTER_ADD_FLOPS, argument=3),
    # col2im(columns [n, c*kh*kw, L], ...) -> [n, c, h, w]: each column element added into
    # its pixel (nn.Fold; the backward of im2col, ConvBERT's span convolution)
    "col2im": PerElement(SCATTER_ADD_FLOPS),
    # max_pool*_with_indices_backward(grad_output, self, ...): each gradient element added at
    # its argmax, as the ONNX MaxPool's backward rule
    "max_pool2d_with_indices_backward": PerElement(MAX_POOL_BACKWARD_FLOPS),
    "max_pool3d_with_indices_backward": PerElement(MAX_POOL_BACKWARD_FLOPS),
    # softplus_backward(grad_output, self, beta, threshold): the ONNX Softplus backward's
    # per-element FLOPs (exp, add, divide, multiply)
    "softplus_backward": PerElement(BACKWARD_TABLE["Softplus"][1]),
    # elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result): the
    # ONNX Elu backward's per-element FLOPs (EnCodec's residual units)
    "elu_backward": PerElement(BACKWARD_TABLE["Elu"][1]),
    # reflection_pad*_backward(grad_output, self, padding): each gradient element added into
    # the element it was copied from (EnCodec's reflect padding)
    "reflection_pad1d_backward": PerElement(SCATTER_ADD_FLOPS),
    "reflection_pad2d_backward": PerElement(SCATTER_ADD_FLOPS),
    "reflection_pad3d_backward": PerElement(SCATTER_ADD_FLOPS),
    # hardswish_backward(grad_output, self), hardtanh_backward(grad_output, self, min, max)
    # (ReLU6): the ONNX HardSwish and Clip backwards' per-element FLOPs
    "hardswish_backward": PerElement(BACKWARD_TABLE["HardSwish"][1]),
    "hardtanh_backward": PerElement(BACKWARD_TABLE["Clip"][1]),
    # upsample_nearest*_backward(grad_output, ...): each gradient element added into the
    # pixel it was copied from
    "upsample_nearest1d_backward": PerElement(SCATTER_ADD_FLOPS),
    "upsample_nearest2d_backward": PerElement(SCATTER_ADD_FLOPS),
    "upsample_nearest3d_backward": PerElement(SCATTER_ADD_FLOPS),
    # _weight_norm_interface(v, g, dim) -> (w, norms); its backward(grad_w, v, g, norms, dim):
    # per element of v (graphmem/ops/normalization.py; wav2vec2's positional conv)
    "_weight_norm_interface": PerElement(WEIGHT_NORM_FLOPS),
    "_weight_norm_interface_backward": PerElement(WEIGHT_NORM_BACKWARD_FLOPS),
    # upsample_*_backward(grad_output, output_size, input_size, ...): the interpolation's
    # transpose, the same taps per output-gradient element (the ONNX Resize backward)
    "upsample_linear1d_backward": PerElement(lerp_flops(1)),
    "upsample_bilinear2d_backward": PerElement(lerp_flops(2)),
    "upsample_trilinear3d_backward": PerElement(lerp_flops(3)),
    "upsample_bicubic2d_backward": PerElement(cubic_flops(2)),
    # grid_sampler_2d_backward(grad_output, input, grid, ...): the bilinear taps transposed,
    # per gradient element (Mask2Former's deformable attention)
    "grid_sampler_2d_backward": PerElement(lerp_flops(2)),
    # leaky_relu_backward(grad_output, self, negative_slope, self_is_result): the ONNX
    # LeakyRelu backward's per-element FLOPs (a graph attention's scores)
    "leaky_relu_backward": PerElement(BACKWARD_TABLE["LeakyRelu"][1]),
    # scatter_reduce(self, dim, index, src, reduce): each src element combined into self at
    # its index (sum, prod, amax, amin; mean's one divide per output element is O(outputs),
    # not counted): a softmax over a node's neighbours takes its maximum so
    "scatter_reduce": PerElement(SCATTER_ADD_FLOPS, argument=3),
}
# Interpolations, FLOPs per output element (the ONNX Resize rule's; nearest copies: 0):
# upsample_bilinear2d [n, c, h, w] -> [n, c, H, W] is n * c * H * W * 3 lerps x 3 FLOPs;
# glu's too (its output is half its input)
PER_OUTPUT_ELEMENT: dict[str, int] = {
    "upsample_linear1d": lerp_flops(1), "upsample_bilinear2d": lerp_flops(2),
    "upsample_trilinear3d": lerp_flops(3), "upsample_bicubic2d": cubic_flops(2),
    "glu": GLU_FLOPS,
    # grid_sampler_2d(input [n, c, h, w], grid [n, H, W, 2]) -> [n, c, H, W]: bilinear, each
    # output element the 3 lerps of its 4 taps, as upsample_bilinear2d (the sampling points
    # of a deformable attention)
    "grid_sampler_2d": lerp_flops(2),
}
# Window pools: per output element, this many FLOPs per window element (ONNX MaxPool's and
# AveragePool's); kernel_size is argument 1, the spatial dims are in the name
WINDOW_POOLS: dict[str, int] = dict.fromkeys(
    ("max_pool1d", "max_pool2d", "max_pool2d_with_indices", "max_pool3d_with_indices",
     "avg_pool1d", "avg_pool2d", "avg_pool3d"), WINDOW_ELEMENT_FLOPS)
# avg_pool*_backward(grad_output, self, kernel_size, ...): each gradient element spread over
# its window, per window element (the ONNX AveragePool backward's)
WINDOW_POOL_BACKWARDS: dict[str, int] = dict.fromkeys(
    ("avg_pool2d_backward", "avg_pool3d_backward"), WINDOW_ELEMENT_FLOPS)
# aten's `pointwise` tag: simple arithmetic, one primitive per output element
POINTWISE_FLOPS = PRIMITIVE_FLOPS
# elementwise ops PyTorch does not tag `pointwise`, counted as the tagged ones
POINTWISE_UNTAGGED = frozenset({"hardswish", "hardswish_", "floor_divide", "floor_divide_"})
# Contractions FlopCounterMode has no formula for, priced by another op's formula: addbmm is
# baddbmm's batched product, summed over the batch (the sum is O(outputs), not counted)
SAME_CONTRACTION = {"addbmm": "baddbmm"}
# Contractions FlopCounterMode has no formula for at all: the grouped products of a mixture of
# experts (graphmem/ops/linear.py grouped_matmul_macs)
GROUPED_CONTRACTIONS = frozenset({"_grouped_mm"})
# Triangular solves, which FlopCounterMode does not count either: substitution's MACs
# (graphmem/ops/linear.py triangular_solve_macs); linalg_solve_triangular(A, B, *, upper,
# left, unitriangular): A is argument 0, `unitriangular` a keyword
TRIANGULAR_SOLVES = frozenset({"linalg_solve_triangular"})
# Matrix-vector and vector products FlopCounterMode does not count (spectral norm's power
# iteration): their MACs are the elements of the argument named, each multiplied once:
# mv(A [m, n], x [n]) m * n, addmv(self, A, x) A's, dot / vdot(a [n], b [n]) n
VECTOR_PRODUCTS = {"mv": 0, "addmv": 1, "dot": 0, "vdot": 0}
# affine_grid_generator(theta [N, d, d + 1], size, align_corners) -> grid [N, *spatial, d]
# (F.affine_grid): each grid coordinate the dot of theta's row with the homogeneous base
# point, d + 1 MACs (FlopCounterMode does not count it either)
AFFINE_GRIDS = frozenset({"affine_grid_generator"})
# bucketize(input, boundaries) and searchsorted(sorted_sequence, input): a binary search of each
# value among the n sorted boundaries of its row, ceil(log2(n + 1)) compares (Idefics3's and
# SmolVLM's patch positions): (argument of the values, argument of the boundaries)
SORTED_SEARCHES = {"bucketize": (0, 1), "searchsorted": (1, 0)}


def binary_search_flops(values: int, boundaries: int) -> int:
    """A search among n boundaries' n + 1 slots per value (ops/sampling.py)."""
    return values * binary_search_compares(max(0, boundaries) + 1)


# one LSTM layer and direction on the CPU (oneDNN), forward and backward: ops/recurrent.py
RECURRENT_LAYERS = frozenset({"mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"})


@dataclass(frozen=True)
class EmbeddingBagArgs:
    """Where an EmbeddingBag op reads its rows' source (the weight, or the bags' gradient:
    the width is its last dim), the ids (argument 1) and the mode (graphmem/ops/movement.py
    embedding_bag_flops); the bags are the offsets' count, argument 2."""

    rows_argument: int
    mode_argument: int
    backward: bool


# _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, ...) and its
# inference-only twin; _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size,
# maximum_indices, num_weights, scale_grad_by_freq, mode, ...) (the dense one has no offsets:
# its bags are the gradient's rows)
EMBEDDING_BAGS: dict[str, EmbeddingBagArgs] = {
    "_embedding_bag": EmbeddingBagArgs(0, 4, False),
    "_embedding_bag_forward_only": EmbeddingBagArgs(0, 4, False),
    "_embedding_bag_backward": EmbeddingBagArgs(0, 8, True),
    "_embedding_bag_dense_backward": EmbeddingBagArgs(0, 7, True),
}
# Fourier transforms (graphmem/ops/signal.py nd_fft_flops): _fft_r2c(self, dim, norm,
# onesided), _fft_c2r(self, dim, norm, last_dim_size), _fft_c2c(self, dim, norm, forward)
FOURIER_TRANSFORMS = frozenset({"_fft_r2c", "_fft_c2r", "_fft_c2c"})


@dataclass(frozen=True)
class FusedAttention:
    """Where a fused attention op reads Q (K and V are the next two arguments), in which
    layout, and whether it is the backward (the formulas: graphmem/ops/attention.py)."""

    backward: bool
    query_argument: int
    heads_first: bool = True  # Q [b, h, s, d]; False: [b, s, h, d]


# PyTorch's scaled-dot-product kernels and their backward. The `_scaled_dot_product_*` ops
# take Q, K, V as [b, h, s, d] (their backward after grad_out); `_flash_attention_*` and
# `_efficient_attention_*` are the kernels under them, Q, K, V as [b, s, h, d].
_FORWARD, _BACKWARD = FusedAttention(False, 0), FusedAttention(True, 1)
FUSED_ATTENTION: dict[str, FusedAttention] = {
    **{name: _FORWARD for name in (
        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_fused_attention_overrideable")},
    **{name: _BACKWARD for name in (
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_cudnn_attention_backward",
        "_scaled_dot_product_fused_attention_overrideable_backward")},
    "_flash_attention_forward": FusedAttention(False, 0, heads_first=False),
    "_efficient_attention_forward": FusedAttention(False, 0, heads_first=False),
    "_flash_attention_backward": FusedAttention(True, 1, heads_first=False),
    "_efficient_attention_backward": FusedAttention(True, 1, heads_first=False),
}
# nn.MultiheadAttention's fused inference kernel (its fast path: frontends/torch/fast_paths.py):
# in-projection, attention and out-projection in one op (graphmem/ops/attention.py)
SELF_ATTENTION_LAYER = "_native_multi_head_attention"
# nn.TransformerEncoderLayer's: that, then the feed-forward block and two layer norms, in one op
ENCODER_LAYER = "_transformer_encoder_layer_fwd"
# a `_foreach_*` op: one elementwise op over every tensor of its first argument; GradScaler's
# `_amp_foreach_non_finite_check_and_unscale_` multiplies each gradient by 1/scale
FOREACH_FLOPS = PRIMITIVE_FLOPS
FOREACH_PREFIXES = ("_foreach_", "_amp_foreach_")
# Ops that only move or make bytes: 0 FLOPs
NO_ARITHMETIC = frozenset({
    "_to_copy", "clone", "copy", "copy_", "contiguous", "empty", "empty_like", "empty_strided",
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "scalar_tensor", "arange",
    "lift_fresh_copy", "linspace", "new_empty", "new_zeros", "new_ones", "new_full",
    "embedding", "index",
    "index_select", "gather", "scatter", "slice_scatter", "select_scatter", "cat", "stack",
    "constant_pad_nd", "repeat", "index_put", "index_put_", "masked_fill", "tril", "triu",
    # masked_fill_ writes the fill value where the mask is set, in place (BART's and
    # SigLIP's attention masks, ConvNeXt-V2): a select, as masked_fill
    "masked_fill_", "new_empty_strided",
    # masked_scatter copies the source's elements, in order, where the mask is set (a
    # vision-language model's image features into the placeholders' embeddings)
    "masked_scatter", "masked_scatter_",
    # its backward: the gradient at the mask's positions gathered into the source's shape
    "masked_scatter_backward",
    # each element copied its count of times (Qwen2-VL's vision tower: each image's
    # attention window bounds from its grid)
    "repeat_interleave",
    # nearest upsampling copies each source pixel; a pixel (un)shuffle moves each element
    # (ESPCN's sub-pixel upsampling), as a channel shuffle does
    "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle",
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
    # im2col (nn.Unfold): each window's pixels copied into a column
    "im2col",
    # reflect and replicate padding copy their input's elements (F.pad's other modes)
    "reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d",
    "replication_pad2d", "replication_pad3d",
    "_unsafe_view", "detach", "alias", "fill", "fill_", "zero_", "bernoulli", "bernoulli_",
    "native_dropout", "rand", "randn", "rand_like", "randn_like", "split_with_sizes", "roll",
    "flip", "as_strided_scatter", "as_strided_", "_foreach_copy_", "sort", "topk",
    # the gradient of a slice / select / index: zeros with the gradient copied in
    "slice_backward", "select_backward", "unfold_backward",
    # CUDA's fused dropout draws its mask (random bits), as native_dropout
    "_fused_dropout",
    # the positions of a router's choices: a scan and a copy, as ONNX NonZero (movement.py)
    "nonzero", "nonzero_static",
    # GradScaler (fp16 AMP on CUDA): the inf check and the scale update are O(1) per tensor
    "_amp_update_scale_", "_amp_update_scale",
    # unsafe_split / unsafe_chunk: split's views, not tracked as views by autograd (the
    # CPU GRU's gates)
    "unsafe_split", "unsafe_split_with_sizes", "unsafe_chunk",
    # `.item()` of a value the trace knows: one element read to the host (a 0-dim tensor
    # formatted into a message while tracing, frontends/torch/conversions.py)
    "_local_scalar_dense",
})


# ----- registration ---------------------------------------------------------------------------
def _shared_traits(canonical: str) -> dict[str, object]:
    """The canonical op's traits that hold for the aten op too (all but the in-place ones)."""
    spec = find_spec(canonical)
    traits = spec.traits if spec is not None else Traits()
    default = Traits()
    return {f.name: getattr(traits, f.name) for f in fields(Traits)
            if f.name not in _OWN_TRAITS and getattr(traits, f.name) != getattr(default, f.name)}


def _register() -> None:
    for packet, canonical in CANONICAL.items():
        register_canonical(packet, canonical)
        shared = _shared_traits(canonical)
        own = {"inplace_variant": f"{packet}_"} if packet in INPLACE_FORMS else {}
        register_traits(packet, domain=ATEN_DOMAIN, **shared, **own)
    for packet in sorted(INPLACE_FORMS):  # relu_, add_: they write their input 0
        register_canonical(f"{packet}_", CANONICAL[packet])
        register_traits(f"{packet}_", domain=ATEN_DOMAIN, is_inplace=True,
                        commutative=bool(_shared_traits(CANONICAL[packet]).get("commutative")))


_register()
