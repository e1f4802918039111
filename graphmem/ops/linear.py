"""Contractions: MatMul, Gemm, Conv, ConvTranspose, their quantized forms and Einsum.

A quantized contraction (QLinearMatMul, MatMulInteger, QLinearConv, ConvInteger, QGemm,
MatMulNBits, MatMulBnb4, ...) has the MACs of its float form; where its weight sits comes from
graphmem/ops/quantized.py, which also says which inputs are quantized weights, scales and zero
points (the parameter count reads it).

Convention: FLOPs = 2 * MACs exactly, as PyTorch's FlopCounterMode counts them. A bias add
(Gemm's C, Conv's B), Gemm's alpha/beta scaling and the requantisation of QLinear* outputs are
O(outputs), not O(outputs * k), and are not counted: FlopCounterMode ignores them too (addmm
costs what mm costs), so the two tools agree to the FLOP on the ops that dominate a model.

Every contraction here is `numel(output) * (length of the reduced axis)` MACs; the output shape
(from shape inference) already holds broadcasting, groups, strides, padding and dilation.
"""

from __future__ import annotations

from graphmem.core.ir import Node, Value
from graphmem.core.symbolic import SymInt, product
from graphmem.ops.pooling import LERP_FLOPS
from graphmem.ops.quantized import weight_index
from graphmem.ops.registry import (
    BackwardRule,
    OpCost,
    ShapeUnknownError,
    find_rule,
    input_numel,
    known_dim,
    known_rank,
    known_shape,
    output_numel,
    register,
    register_backward,
    register_traits,
    saved_input,
)
from graphmem.ops.traits import HALF_UNDER_AUTOCAST, Contraction

MS_DOMAIN = "com.microsoft"


# ----- matrix products ------------------------------------------------------------------------
def matmul_macs(node: Node, reduced_dim: SymInt) -> SymInt:
    # [b, m, k] @ [b, k, n] -> [b, m, n]: b*m*n*k MACs = numel(out) * k
    # numpy rules: broadcast batch dims are in numel(out); a 1-D operand drops its m or n.
    return output_numel(node) * reduced_dim


def matmul_reduced_dim(node: Node, a_index: int = 0, b_index: int = 1) -> SymInt:
    # k is A's last dim ([..., m, k] or [k]), or else B's second-to-last ([..., k, n]), or its
    # only one ([k]): shape inference sometimes knows one and not the other
    a, b = node.input(a_index), node.input(b_index)
    if a is not None and a.shape and a.shape[-1] is not None:
        return a.shape[-1]
    return known_dim(b, -2 if known_rank(b, node) >= 2 else 0, node)


def grouped_matmul_macs(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """torch._grouped_mm(a, b, offs): `offs` splits the dim a 2-D operand does not share with
    the other into groups, each group one product; the groups cover that dim (offs[-1] is its
    size: every routed token is in one expert's group), so the groups' MACs sum to one
    product of the whole, whatever the split:
    # [M, K] @ [G, K, N], offs splits M -> [M, N]: sum_g m_g*K*N = M*K*N
    # [G, M, K] @ [K, N], offs splits N -> [M, N]: sum_g M*K*n_g = M*K*N
    # [M, K] @ [K, N], offs splits K -> [G, M, N]: sum_g M*k_g*N = M*K*N
    # [G, M, K] @ [G, K, N] -> [G, M, N] (no offs): G*M*K*N
    M is a's second-to-last dim in every case, K its last, N b's last."""
    batch = a[0] if len(a) == 3 and len(b) == 3 else 1
    return batch * a[-2] * a[-1] * b[-1]


def triangular_solve_macs(solution: tuple[int, ...], size: int) -> int:
    """torch.linalg.solve_triangular(A [..., n, n], B): X, B's shape, solved by substitution.
    Each right-hand side (a column of X for A X = B, a row for X A = B: numel(X) / n of them)
    takes row i's i products of the unknowns already found, subtracted from b_i:
    # sum over i < n of i = n * (n - 1) / 2 MACs per right-hand side
    (and one division per unknown unless A's diagonal is ones, counted as FLOPs:
    `triangular_solve_divisions`). Gated delta-net's chunked form (Qwen3-Next) solves
    [b, h, chunks, 64, 64] lower unitriangular systems."""
    count = 1
    for dim in solution:
        count *= dim
    return count // size * (size * (size - 1) // 2) if size else 0


def triangular_solve_divisions(solution: tuple[int, ...], unitriangular: bool) -> int:
    """One division by the diagonal per unknown of X, none where the diagonal is ones."""
    count = 1
    for dim in solution:
        count *= dim
    return 0 if unitriangular else count


@register("MatMul", "MatMulInteger")
def matmul(node: Node) -> OpCost:
    return OpCost.from_macs(matmul_macs(node, matmul_reduced_dim(node)))


@register("QLinearMatMul")
def qlinear_matmul(node: Node) -> OpCost:
    # inputs: a, a_scale, a_zero_point, b, b_scale, ...: the MACs of MatMul(a, b)
    b_index = weight_index("QLinearMatMul")
    return OpCost.from_macs(matmul_macs(node, matmul_reduced_dim(node, 0, b_index)))


@register("MatMulIntegerToFloat", "DynamicQuantizeMatMul", domain=MS_DOMAIN)
def microsoft_matmul(node: Node) -> OpCost:
    # A float or int8 [..., m, k] @ B int8 [k, n], scales and zero points after
    return matmul(node)


@register("MatMulNBits", domain=MS_DOMAIN)
def matmul_n_bits(node: Node) -> OpCost:
    # A [..., m, k] @ B packed as n rows of k/block_size blocks: k is a (required) attribute
    reduced_dim = node.attr_int("K", 0)
    if reduced_dim <= 0:
        raise ShapeUnknownError(f"{node.describe()}: no K attribute")
    return OpCost.from_macs(matmul_macs(node, SymInt.const(reduced_dim)))


@register("MatMulBnb4", domain=MS_DOMAIN)
def matmul_bnb4(node: Node) -> OpCost:
    # dequantized B is [N, K]; transB (default 1): A [..., K] @ B^T -> [..., N], else
    # A [..., N] @ B -> [..., K]: the reduced axis is K or N
    name = "K" if node.attr_int("transB", 1) else "N"
    reduced_dim = node.attr_int(name, 0)
    if reduced_dim <= 0:
        raise ShapeUnknownError(f"{node.describe()}: no {name} attribute")
    return OpCost.from_macs(matmul_macs(node, SymInt.const(reduced_dim)))


@register("FusedMatMul", domain=MS_DOMAIN)
def fused_matmul(node: Node) -> OpCost:
    # alpha * op(A) @ op(B): A is [..., m, k]; transA reads it as [..., k, m], and with
    # transBatchA too as [k, ..., m]
    axis = -1
    if node.attr_int("transA", 0):
        axis = 0 if node.attr_int("transBatchA", 0) else -2
    return OpCost.from_macs(matmul_macs(node, known_dim(node.input(0), axis, node)))


@register("Gemm")
def gemm(node: Node) -> OpCost:
    # Y = alpha * A' @ B' + beta * C, A' = [m, k] (A = [k, m] when transA): m*n*k MACs.
    # The C add, alpha and beta are not counted (FlopCounterMode: addmm == mm).
    reduced_axis = 0 if node.attr_int("transA", 0) else 1
    return OpCost.from_macs(matmul_macs(node, known_dim(node.input(0), reduced_axis, node)))


@register("QGemm", domain=MS_DOMAIN)
def qgemm(node: Node) -> OpCost:
    # the MACs of its float Gemm, A' [m, k] @ B' [k, n] -> [m, n]: m*n*k, read from A and B
    # (A = [k, m] when transA, B = [n, k] when transB): shape inference often has no rule
    # for this contrib op's output
    a, b = node.input(0), node.input(weight_index("QGemm", MS_DOMAIN))
    trans_a, trans_b = node.attr_int("transA", 0), node.attr_int("transB", 0)
    rows = known_dim(a, 1 if trans_a else 0, node)
    reduced = known_dim(a, 0 if trans_a else 1, node)
    columns = known_dim(b, 0 if trans_b else 1, node)
    return OpCost.from_macs(rows * columns * reduced)


# ----- convolutions ---------------------------------------------------------------------------
def weight_fan_in(weight: Value | None, node: Node) -> SymInt:
    """prod(W.shape[1:]): what one output element of a conv contracts over."""
    # Conv W: [c_out, c_in/groups, *kernel]; ConvTranspose W: [c_in, c_out/groups, *kernel]
    return product(known_shape(weight, node)[1:])


def conv_macs(node: Node, weight: Value | None) -> SymInt:
    # [n, c_in, *in] * W[c_out, c_in/groups, *k] -> [n, c_out, *out]:
    #   n * c_out * prod(out) * (c_in/groups) * prod(k) MACs = numel(out) * prod(W.shape[1:])
    # groups and depthwise (c_in/groups == 1) need nothing more: W already says it.
    return output_numel(node) * weight_fan_in(weight, node)


@register("Conv", "ConvInteger")
def conv(node: Node) -> OpCost:
    # bias B (input 2) not counted, as in FlopCounterMode
    return OpCost.from_macs(conv_macs(node, node.input(1)))


@register("QLinearConv", domain=MS_DOMAIN)
@register("QLinearConv")
def qlinear_conv(node: Node) -> OpCost:
    # inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B:
    # the MACs of Conv(x, w)
    return OpCost.from_macs(conv_macs(node, node.input(weight_index("QLinearConv"))))


@register("FusedConv", domain=MS_DOMAIN)
def fused_conv(node: Node) -> OpCost:
    # Conv + bias + activation (+ Z add): the activation is O(outputs), not counted
    return conv(node)


@register("ConvTranspose")
def conv_transpose(node: Node) -> OpCost:
    # [n, c_in, *in] * W[c_in, c_out/groups, *k] -> [n, c_out, *out]: every input element is
    # scattered into (c_out/groups) * prod(k) outputs:
    #   n * c_in * prod(in) * (c_out/groups) * prod(k) MACs = numel(x) * prod(W.shape[1:])
    return OpCost.from_macs(input_numel(node, 0) * weight_fan_in(node.input(1), node))


# A 1-D depthwise convolution over the past state and the input (opset 27; Mamba, Gated
# DeltaNet): input [b, c, L], weight [c, 1, k] -> output [b, c, L]: numel(out) * k MACs.
# Its fused activation "silu"/"swish" is x * sigmoid(x): 5 per output element.
SILU_FLOPS = 5


@register("CausalConvWithState")
def causal_conv_with_state(node: Node) -> OpCost:
    cost = OpCost.from_macs(conv_macs(node, node.input(1)))
    if node.attr_str("activation", "none") in ("silu", "swish"):
        cost = cost + OpCost.from_flops(output_numel(node) * SILU_FLOPS)
    return cost


# DeformConv (opset 19): X [n, c, *in], W [oc, c/g, *k], offset [n, og*prod(k)*d, *out]:
# the conv's MACs, numel(out) * prod(W.shape[1:]); before it, every input channel is sampled
# at every tap of every output position by bilinear interpolation at the offset position
# (n * c * prod(k) * prod(out) samples of 3 lerps per interpolated dim pair: 2-D 9), and
# multiplied by the mask when one is given (1 more).
@register("DeformConv")
def deform_conv(node: Node) -> OpCost:
    x, weight, out = node.input(0), node.input(1), node.outputs[0]
    spatial = known_rank(x, node) - 2
    if spatial < 1:
        raise ShapeUnknownError(f"{node.describe()}: X has rank {spatial + 2}")
    kernel = product(known_shape(weight, node)[2:])
    out_positions = product(known_shape(out, node)[2:])
    samples = known_dim(x, 0, node) * known_dim(x, 1, node) * kernel * out_positions
    per_sample = (2**spatial - 1) * LERP_FLOPS + (node.input(4) is not None)
    return OpCost.from_macs(conv_macs(node, weight)) + OpCost.from_flops(samples * per_sample)


@register("Col2Im")
def col2im(node: Node) -> OpCost:
    # [n, c * prod(block), L] column blocks summed into [n, c, *image]: each input element is
    # added into its pixel (overlapping blocks accumulate), numel(input) adds
    return OpCost.from_flops(input_numel(node, 0))


@register("Det")
def det(node: Node) -> OpCost:
    # [*, m, m] -> [*]: Gaussian elimination (LU with partial pivoting, as numpy and PyTorch
    # compute it): step j of m - 1 updates a (m - j) x (m - j) block, 1 MAC each:
    #   sum_{i=1}^{m-1} i^2 = (m - 1) m (2m - 1) / 6 MACs, the (m - 1) m / 2 divides that make
    #   the multipliers, and m - 1 multiplies of the diagonal's product (pivot search aside)
    m = known_dim(node.input(0), -1, node)
    matrices = output_numel(node)
    macs = ((m - 1) * m * (m * 2 - 1)).scaled(1, 6)
    flops = ((m - 1) * m).scaled(1, 2) + (m - 1)
    return OpCost.from_macs(matrices * macs) + OpCost.from_flops(matrices * flops)


# ----- Einsum ---------------------------------------------------------------------------------
Labels = tuple[str, ...]


def split_labels(term: str, rank: int) -> Labels:
    """'b...ij' of a rank-5 operand -> ('b', '…1', '…0', 'i', 'j').

    Ellipsis dims are named from the right so that broadcasting aligns them across operands.
    """
    head, ellipsis, tail = term.partition("...")
    if not ellipsis:
        return tuple(term)
    covered = rank - len(head) - len(tail)
    return (*head, *(f"…{i}" for i in reversed(range(covered))), *tail)


def einsum_terms(equation: str) -> tuple[list[str], str | None]:
    """'ij,jk->ik' -> (['ij', 'jk'], 'ik'); the output is None for an implicit equation."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    return lhs.split(","), (rhs if arrow else None)


def ellipsis_labels(operands: list[Labels]) -> Labels:
    """Every ellipsis label of the operands, leftmost (highest number) first."""
    names = {label for labels in operands for label in labels if label.startswith("…")}
    return tuple(sorted(names, reverse=True))


def output_labels(output_term: str | None, operands: list[Labels]) -> Labels:
    if output_term is not None:
        head, _, tail = output_term.partition("...")
        return (*head, *ellipsis_labels(operands), *tail)
    # implicit (numpy): ellipsis dims first, then the letters that appear exactly once, sorted
    letters = [label for labels in operands for label in labels if not label.startswith("…")]
    return (*ellipsis_labels(operands), *sorted(lb for lb in letters if letters.count(lb) == 1))


def label_sizes(operands: list[Labels], shapes: list[tuple[SymInt, ...]]) -> dict[str, SymInt]:
    """Size of every label; a broadcast 1 gives way to the real size."""
    sizes: dict[str, SymInt] = {}
    for labels, shape in zip(operands, shapes, strict=True):
        for label, dim in zip(labels, shape, strict=True):
            if sizes.get(label, SymInt.const(1)) == 1:
                sizes[label] = dim
    return sizes


def sum_out_private(
    labels: Labels, needed: set[str], sizes: dict[str, SymInt]
) -> tuple[Labels, SymInt]:
    """Drop labels nobody else needs by summing them first; additions = numel(operand)."""
    kept = tuple(label for label in labels if label in needed)
    if len(kept) == len(labels):
        return labels, SymInt()
    return kept, product(sizes[label] for label in labels)


def einsum_cost(operands: list[Labels], output: Labels, sizes: dict[str, SymInt]) -> OpCost:
    # Two operands: MACs = product of every distinct index size (the naive loop nest), e.g.
    # 'bhqd,bhkd->bhqk': b*h*q*k*d. More operands: contracted left to right as torch does,
    # each pair keeping the labels a later operand or the output needs. An index that only one
    # operand has and nobody needs is summed away first (additions), as torch.einsum does.
    # One operand ('ij->i', 'ij->ji'): additions only when something is summed.
    needed_later = set(output) | _labels_of(operands[1:])
    current, first_adds = sum_out_private(operands[0], needed_later, sizes)
    cost = OpCost.from_flops(first_adds)
    for position, right in enumerate(operands[1:], start=1):
        later = _labels_of(operands[position + 1 :]) | set(output)
        left, left_adds = sum_out_private(current, later | set(right), sizes)
        right, right_adds = sum_out_private(right, later | set(left), sizes)
        union = dict.fromkeys((*left, *right))
        macs = product(sizes[label] for label in union)
        cost = cost + OpCost.from_macs(macs) + OpCost.from_flops(left_adds + right_adds)
        current = tuple(label for label in union if label in later)
    return cost


def _labels_of(operands: list[Labels]) -> set[str]:
    return {label for labels in operands for label in labels}


@register("Einsum")
def einsum(node: Node) -> OpCost:
    terms, output_term = einsum_terms(node.attr_str("equation", ""))
    inputs = node.present_inputs
    if len(terms) != len(inputs):
        raise ShapeUnknownError(f"{node.describe()}: equation has {len(terms)} operands")
    shapes = [known_shape(value, node) for value in inputs]
    operands = [split_labels(term, len(shape)) for term, shape in zip(terms, shapes, strict=True)]
    output = output_labels(output_term, operands)
    return einsum_cost(operands, output, label_sizes(operands, shapes))


# ----- backward (training) --------------------------------------------------------------------
# derivatives.yaml: mm/addmm/bmm save mat1 for mat2's gradient and mat2 for mat1's
# (mm_mat1_backward(grad, mat2), mm_mat2_backward(grad, mat1)); convolution_backward saves
# input and weight the same way. Each gradient is one contraction as large as the forward:
#   grad_A = grad_Y @ B^T, grad_B = A^T @ grad_Y: forward MACs each, so 2x forward for both.
# A bias gradient is a sum of grad_Y over the rows: numel(Y) FLOPs.
def contraction_backward_flops(node: Node, needs_grad: frozenset[int]) -> OpCost:
    forward = find_rule(node.op_type, node.domain)
    macs = forward(node).macs if forward is not None else SymInt()
    operands = len(needs_grad & {0, 1})
    bias = output_numel(node) if 2 in needs_grad else SymInt()
    return OpCost.from_macs(macs * operands) + OpCost.from_flops(bias)


_OPERANDS_CROSS_SAVED = (saved_input(0, (1,)), saved_input(1, (0,)))
_CONTRACTION = BackwardRule(_OPERANDS_CROSS_SAVED, contraction_backward_flops)
register_backward("MatMul", "Gemm", "Conv", "ConvTranspose")(_CONTRACTION)
register_backward("FusedMatMul", domain=MS_DOMAIN)(_CONTRACTION)


def einsum_backward_flops(node: Node, needs_grad: frozenset[int]) -> OpCost:
    # one einsum of the forward's size per operand gradient
    forward = einsum(node)
    return OpCost(forward.macs * len(needs_grad), forward.flops * len(needs_grad))


register_backward("Einsum")(
    BackwardRule((saved_input(0), saved_input(1)), einsum_backward_flops))


# ----- traits ---------------------------------------------------------------------------------
# x @ W (what tensor parallelism splits and an FC head is), convolutions, the rest
register_traits("MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", contraction=Contraction.MATMUL)
register_traits("FusedMatMul", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMulNBits",
                "MatMulBnb4", "QGemm", domain=MS_DOMAIN, contraction=Contraction.MATMUL)
register_traits("Conv", "ConvInteger", "QLinearConv", contraction=Contraction.CONV)
register_traits("FusedConv", "QLinearConv", domain=MS_DOMAIN, contraction=Contraction.CONV)
register_traits("ConvTranspose", contraction=Contraction.CONV_TRANSPOSE)
register_traits("Einsum", contraction=Contraction.OTHER)
# PyTorch runs the float matrix products through cuBLAS; Linear with a bias (addmm, ONNX
# Gemm) through cuBLASLt, whose workspace is separate
register_traits("MatMul", "Gemm", runs_on_cublas=True)
register_traits("FusedMatMul", domain=MS_DOMAIN, runs_on_cublas=True)
register_traits("Gemm", runs_on_cublaslt=True)
# autocast's "lower precision" list, the same on CUDA and CPU: matmul, linear, conv*, einsum
register_traits("MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", **HALF_UNDER_AUTOCAST)
register_traits("FusedMatMul", domain=MS_DOMAIN, **HALF_UNDER_AUTOCAST)
