"""Quantized ops: which inputs hold quantized values, scales and zero points, how many
parameters a packed weight holds, and the cost of the quantized ops that are not contractions.

The contractions (QLinearMatMul, QLinearConv, MatMulInteger, ConvInteger, QGemm, MatMulNBits,
MatMulBnb4, ...) are costed in linear.py with the MACs of their float form; their weight's input
position is read from `OPERANDS` below, one table for both.

Sources: ONNX Operators.md (QuantizeLinear/DequantizeLinear opset 21+: blocked quantization,
`block_size`, `output_dtype`, int4/uint4 packed two to a byte) and onnxruntime's
docs/ContribOperators.md (com.microsoft MatMulNBits, MatMulBnb4, GatherBlockQuantized, QGemm,
QLinear*, DynamicQuantizeMatMul, MatMulIntegerToFloat, QAttention).

Packed storage (what `parameter_count` undoes):
- ONNX int4/uint4 tensors hold their logical shape; two values share a byte (the shape is the
  element count, the file stores ceil(numel / 2) bytes).
- MatMulNBits B is uint8 [N, ceil(K / block_size), block_size * bits / 8]: N * K weights of
  `bits` bits, the padding of the last block aside.
- MatMulBnb4 B is uint8 [(N * K + 1) / 2]: N * K 4-bit weights (FP4 or NF4).
- GatherBlockQuantized data of type uint8 with bits < 8 packs 8 / bits values per byte along
  the last dim; int4/uint4 data is an ONNX 4-bit tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from graphmem.core.ir import DType, Node, Value
from graphmem.ops.elementwise import FLOPS_PER_ELEMENT
from graphmem.ops.registry import (
    OpCost,
    ShapeUnknownError,
    find_rule,
    known_dim,
    known_numel,
    output_numel,
    register,
)

MS_DOMAIN = "com.microsoft"


@dataclass(frozen=True)
class QuantizedOperands:
    """Input positions of a quantized op. `data`: quantized values (a quantized weight when
    the input is an initializer, e.g. DequantizeLinear's x, QLinearConv's w and int32 bias);
    `scales` and `zero_points`: what dequantizes them (a block's, a channel's or a tensor's);
    `weight`: the contraction's weight, for its MACs (None: not a contraction)."""

    data: tuple[int, ...]
    scales: tuple[int, ...] = ()
    zero_points: tuple[int, ...] = ()
    weight: int | None = None
    # variadic (QLinearConcat): (tensor, scale, zero point) triples from this input on
    triples_from: int | None = None

    def of(self, node: Node) -> QuantizedOperands:
        """The positions for this node (a variadic op's depend on its input count)."""
        if self.triples_from is None:
            return self
        starts = range(self.triples_from, len(node.inputs), 3)
        return QuantizedOperands(self.data + tuple(starts),
                                 self.scales + tuple(s + 1 for s in starts),
                                 self.zero_points + tuple(s + 2 for s in starts))


# x, x_scale, x_zero_point (DequantizeLinear); QuantizeLinear's x is float: only its scale
_DEQUANTIZE = QuantizedOperands(data=(0,), scales=(1,), zero_points=(2,))
_QUANTIZE = QuantizedOperands(data=(), scales=(1,), zero_points=(2,))
# X, X_scale, X_zero_point, Y_scale, Y_zero_point (QLinearSigmoid, pools, softmax, ...)
_UNARY = QuantizedOperands(data=(0,), scales=(1, 3), zero_points=(2, 4))
# A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point
_BINARY = QuantizedOperands(data=(0, 3), scales=(1, 4, 6), zero_points=(2, 5, 7))

OPERANDS: dict[tuple[str, str], QuantizedOperands] = {
    ("", "DequantizeLinear"): _DEQUANTIZE,
    (MS_DOMAIN, "DequantizeLinear"): _DEQUANTIZE,
    ("", "QuantizeLinear"): _QUANTIZE,
    (MS_DOMAIN, "QuantizeLinear"): _QUANTIZE,
    # x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B (int32 bias)
    ("", "QLinearConv"): QuantizedOperands((0, 3, 8), (1, 4, 6), (2, 5, 7), weight=3),
    (MS_DOMAIN, "QLinearConv"): QuantizedOperands((0, 3, 8), (1, 4, 6), (2, 5, 7), weight=3),
    # a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp
    ("", "QLinearMatMul"): QuantizedOperands((0, 3), (1, 4, 6), (2, 5, 7), weight=3),
    # A, B, a_zero_point, b_zero_point (no scales: the output is int32)
    ("", "MatMulInteger"): QuantizedOperands((0, 1), (), (2, 3), weight=1),
    ("", "ConvInteger"): QuantizedOperands((0, 1), (), (2, 3), weight=1),
    # A, a_scale, a_zp, B, b_scale, b_zp, C (int32), y_scale, y_zp
    (MS_DOMAIN, "QGemm"): QuantizedOperands((0, 3, 6), (1, 4, 7), (2, 5, 8), weight=3),
    # A, B, a_scale, b_scale, a_zp, b_zp, bias (float)
    (MS_DOMAIN, "MatMulIntegerToFloat"): QuantizedOperands((0, 1), (2, 3), (4, 5), weight=1),
    # A (float), B, b_scale, b_zp, bias (float)
    (MS_DOMAIN, "DynamicQuantizeMatMul"): QuantizedOperands((1,), (2,), (3,), weight=1),
    # A, B (packed), scales, zero_points (packed or float), g_idx (deprecated), bias (float)
    (MS_DOMAIN, "MatMulNBits"): QuantizedOperands((1,), (2, 4), (3,), weight=1),
    # A, B (packed 4-bit), absmax (the block scales)
    (MS_DOMAIN, "MatMulBnb4"): QuantizedOperands((1,), (2,), weight=1),
    # data, indices, scales, zero_points
    (MS_DOMAIN, "GatherBlockQuantized"): QuantizedOperands((0,), (2,), (3,)),
    # input, weight, bias (float), input_scale, weight_scale, mask, input_zp, weight_zp, past
    (MS_DOMAIN, "QAttention"): QuantizedOperands((0, 1), (3, 4), (6, 7)),
    (MS_DOMAIN, "QLinearAdd"): _BINARY,
    (MS_DOMAIN, "QLinearMul"): _BINARY,
    (MS_DOMAIN, "QLinearSigmoid"): _UNARY,
    (MS_DOMAIN, "QLinearLeakyRelu"): _UNARY,
    (MS_DOMAIN, "QLinearGlobalAveragePool"): _UNARY,
    (MS_DOMAIN, "QLinearAveragePool"): _UNARY,
    (MS_DOMAIN, "QLinearSoftmax"): _UNARY,
    (MS_DOMAIN, "QLinearReduceMean"): _UNARY,
    # condition, X, x_scale, x_zp, Y, y_scale, y_zp, z_scale, z_zp
    (MS_DOMAIN, "QLinearWhere"): QuantizedOperands((1, 4), (2, 5, 7), (3, 6, 8)),
    # Y_scale, Y_zero_point, then (tensor, scale, zero point) per input
    (MS_DOMAIN, "QLinearConcat"): QuantizedOperands((), (0,), (1,), triples_from=2),
}


def quantized_operands(node: Node) -> QuantizedOperands | None:
    """The quantized inputs of `node`; None for an op that has none."""
    operands = OPERANDS.get((_domain(node), node.op_type))
    return None if operands is None else operands.of(node)


def _domain(node: Node) -> str:
    return "" if node.domain in ("", "ai.onnx") else node.domain


def weight_index(op_type: str, domain: str = "") -> int:
    """Where a quantized contraction's weight is (linear.py's MACs read its shape)."""
    operands = OPERANDS[(domain, op_type)]
    assert operands.weight is not None, f"{op_type} is not a quantized contraction"
    return operands.weight


# ----- parameters of a packed weight ---------------------------------------------------------
@dataclass(frozen=True)
class StoredWeight:
    """A quantized weight as stored: its parameter count and how the report names its type."""

    parameters: int
    dtype: str  # "int8", "uint4", "nf4"...


def stored_weight(node: Node, value: Value) -> StoredWeight:
    """What a quantized data input of `node` holds. A packed uint8 tensor holds more
    parameters than elements; an ONNX 4-bit tensor's shape already counts its values."""
    numel = int(value.numel) if value.numel is not None else 0
    packed = _PACKED.get((_domain(node), node.op_type))
    stored = packed(node, value) if packed is not None else None
    return stored or StoredWeight(numel, value.dtype.label)


def _nbits(node: Node, value: Value) -> StoredWeight | None:
    # B [N, ceil(K / block_size), block_size * bits / 8] holds the N x K weight matrix
    n, k = node.attr_int("N", 0), node.attr_int("K", 0)
    if value is not node.input(1) or n <= 0 or k <= 0:
        return None
    return StoredWeight(n * k, f"uint{node.attr_int('bits', 4)}")


def _bnb4(node: Node, value: Value) -> StoredWeight | None:
    # B [(N * K + 1) / 2]: quant_type 0 is FP4, 1 is NF4 (QLoRA's NormalFloat)
    n, k = node.attr_int("N", 0), node.attr_int("K", 0)
    if value is not node.input(1) or n <= 0 or k <= 0:
        return None
    return StoredWeight(n * k, "nf4" if node.attr_int("quant_type", 1) == 1 else "fp4")


def _gather_block(node: Node, value: Value) -> StoredWeight | None:
    # uint8 data with bits < 8 packs 8 / bits values per byte (int4/uint4 data: ONNX 4-bit)
    bits = node.attr_int("bits", 4)
    if value is not node.input(0) or value.dtype is not DType.UINT8 or bits >= 8:
        return None
    numel = int(value.numel) if value.numel is not None else 0
    return StoredWeight(numel * (8 // bits), f"uint{bits}")


_PACKED: dict[tuple[str, str], Callable[[Node, Value], StoredWeight | None]] = {
    (MS_DOMAIN, "MatMulNBits"): _nbits,
    (MS_DOMAIN, "MatMulBnb4"): _bnb4,
    (MS_DOMAIN, "GatherBlockQuantized"): _gather_block,
}


# ----- cost of the quantized ops that are not contractions -----------------------------------
# com.microsoft's QuantizeLinear/DequantizeLinear compute what the ONNX ops of the same name do
@register("QuantizeLinear", domain=MS_DOMAIN)
def microsoft_quantize_linear(node: Node) -> OpCost:
    return OpCost.from_flops(output_numel(node) * FLOPS_PER_ELEMENT["QuantizeLinear"])


@register("DequantizeLinear", domain=MS_DOMAIN)
def microsoft_dequantize_linear(node: Node) -> OpCost:
    return OpCost.from_flops(output_numel(node) * FLOPS_PER_ELEMENT["DequantizeLinear"])


@register("GatherBlockQuantized", domain=MS_DOMAIN)
def gather_block_quantized(node: Node) -> OpCost:
    # a Gather (no arithmetic) whose every output element is dequantized: (q - zp) * scale.
    # Output elements = numel(indices) * values per slice of data along gather_axis, read from
    # the inputs: shape inference takes a packed uint8 table's bytes for its values.
    data, indices = node.input(0), node.input(1)
    axis = node.attr_int("gather_axis", 0)
    slices = known_dim(data, axis, node)
    if data is None or data.numel is None or not slices.is_constant or int(slices) <= 0:
        raise ShapeUnknownError(f"{node.describe()}: shape of its data is unknown")
    values = stored_weight(node, data).parameters // int(slices)
    gathered = known_numel(indices, node) * values
    return OpCost.from_flops(gathered * FLOPS_PER_ELEMENT["DequantizeLinear"])


# A QLinear<Op> dequantizes its inputs, runs <Op> in float and requantizes the result: it
# costs what <Op> costs. The (de)quantization per element is O(elements), not counted, as
# linear.py does not count the requantization of QLinearConv/QLinearMatMul outputs.
FLOAT_FORM: dict[str, str] = {
    "QLinearAdd": "Add",
    "QLinearMul": "Mul",
    "QLinearSigmoid": "Sigmoid",
    "QLinearLeakyRelu": "LeakyRelu",
    "QLinearGlobalAveragePool": "GlobalAveragePool",  # per input element of input 0
    "QLinearAveragePool": "AveragePool",  # kernel_shape attribute, as AveragePool
    "QLinearSoftmax": "Softmax",
    "QLinearReduceMean": "ReduceMean",
    "QLinearWhere": "Where",
    "QLinearConcat": "Concat",
}


def float_form_rule(float_op: str) -> Callable[[Node], OpCost]:
    """The float op's rule applied to the quantized node: those rules read only input 0, the
    output and attributes, which sit where the quantized form has them."""

    def rule(node: Node) -> OpCost:
        float_rule = find_rule(float_op)
        if float_rule is None:
            raise ShapeUnknownError(f"{node.describe()}: no rule for its float form {float_op}")
        return float_rule(node)

    return rule


for _quantized_op, _float_op in FLOAT_FORM.items():
    register(_quantized_op, domain=MS_DOMAIN)(float_form_rule(_float_op))
