"""Cost rules on hand-built nodes; every expected number states its working."""

from __future__ import annotations

import pytest

import graphmem.ops  # noqa: F401 - fills the registry
from graphmem.core.ir import Node
from graphmem.core.symbolic import SymInt
from graphmem.ops import OpCost, ShapeUnknownError, find_rule, registered_ops, registry
from graphmem.ops.elementwise import FLOPS_PER_ELEMENT
from graphmem.ops.registry import register
from tests.helpers.op_nodes import assert_cost, cost, node, tensor

MS = "com.microsoft"
BATCH = SymInt.symbol("batch")

# ----- registry ---------------------------------------------------------------------------------
def test_duplicate_registration_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def rule(n: Node) -> OpCost:
        return OpCost.zero()

    monkeypatch.setattr(registry, "_RULES", dict(registry._RULES))  # leave the real one alone
    register("GraphmemTestOp", domain="graphmem.test")(rule)
    with pytest.raises(ValueError, match="registered twice"):
        register("GraphmemTestOp", domain="graphmem.test")(rule)
    # an op already registered by the real rule families is refused the same way
    with pytest.raises(ValueError, match="registered twice"):
        register("Conv", domain="ai.onnx")(rule)


def test_ai_onnx_domain_is_the_default_domain() -> None:
    assert find_rule("Conv", "ai.onnx") is find_rule("Conv", "")


def test_unknown_op_has_no_rule() -> None:
    assert find_rule("NoSuchOp") is None
    assert find_rule("Conv", "com.example") is None


# Ops that torch.onnx.export writes for standard CNNs (ResNet, MobileNet, EfficientNet, VGG,
# DenseNet) and transformers (BERT, GPT-2, Llama, ViT, T5), and ORT's fusions of them.
EXPORTED_OPS = (
    "Conv", "Relu", "MaxPool", "Add", "GlobalAveragePool", "Flatten", "Gemm",
    "BatchNormalization", "Clip", "Mul", "Sigmoid", "Concat", "AveragePool", "Pad",
    "ReduceMean", "MatMul", "Softmax", "LayerNormalization", "Gelu", "Erf", "Where", "Gather",
    "Expand", "Range", "Trilu", "Transpose", "Reshape", "Split", "Slice", "Pow", "Sqrt", "Div",
    "Sub", "Tanh", "Cast", "Shape", "Unsqueeze", "Squeeze", "Equal", "ConstantOfShape", "Neg",
    "Cos", "Sin", "Reciprocal", "SimplifiedLayerNormalization", "Dropout", "Identity", "Less",
    "Not", "And", "Einsum", "HardSwish", "HardSigmoid", "Constant", "Resize", "ConvTranspose",
    "CumSum", "ArgMax", "TopK", "LogSoftmax", "ScatterND", "GatherElements", "Greater", "Max",
    "Min", "Exp", "Log", "Abs", "Tile", "Or", "InstanceNormalization", "GroupNormalization",
    "RMSNormalization", "Mod", "Floor", "Ceil", "Round", "IsNaN", "QuantizeLinear",
    "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ReduceSum", "ReduceMax",
    "CastLike", "Size", "NonZero", "OneHot", "Softplus", "Mish", "LeakyRelu", "PRelu", "Elu",
    "Selu", "Celu", "GridSample",
)
MICROSOFT_OPS = (
    "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "FastGelu", "BiasGelu",
    "Gelu", "Attention", "MultiHeadAttention", "GroupQueryAttention", "FusedMatMul",
    "MatMulNBits", "RotaryEmbedding", "QuickGelu",
)


def test_exported_ops_are_registered() -> None:
    registered = set(registered_ops())
    missing = [op for op in EXPORTED_OPS if ("", op) not in registered]
    missing += [f"{MS}:{op}" for op in MICROSOFT_OPS if (MS, op) not in registered]
    assert missing == []


def test_control_flow_is_left_to_the_pass() -> None:
    # If/Loop/Scan are flagged subgraphs, handled by the costs pass, not priced here
    assert all(find_rule(op) is None for op in ("If", "Loop", "Scan"))


# ----- linear -----------------------------------------------------------------------------------
def test_matmul_batched() -> None:
    # [2, 3, 4] @ [4, 5] -> [2, 3, 5]: 2*3*5*4 = 120 MACs, 240 FLOPs
    assert_cost(node("MatMul", [tensor(2, 3, 4), tensor(4, 5)], [tensor(2, 3, 5)]), 120, 240)


def test_matmul_broadcasts_batch_dims() -> None:
    # [2, 1, 3, 4] @ [5, 4, 6] -> [2, 5, 3, 6]: 2*5*3*6*4 = 720 MACs
    n = node("MatMul", [tensor(2, 1, 3, 4), tensor(5, 4, 6)], [tensor(2, 5, 3, 6)])
    assert_cost(n, 720, 1440)


@pytest.mark.parametrize(
    ("a", "b", "out", "macs"),
    [
        ((4,), (4, 5), (5,), 20),  # [4] @ [4, 5] -> [5]: 5*4
        ((3, 4), (4,), (3,), 12),  # [3, 4] @ [4] -> [3]: 3*4
        ((4,), (4,), (), 4),  # dot product: 4
        ((2, 4), (3, 4, 5), (3, 2, 5), 120),  # [2, 4] broadcast over 3: 3*2*5*4
    ],
)
def test_matmul_one_dimensional_operands(
    a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...], macs: int
) -> None:
    assert_cost(node("MatMul", [tensor(*a), tensor(*b)], [tensor(*out)]), macs, 2 * macs)


def test_matmul_symbolic_batch() -> None:
    # [batch, 3, 4] @ [4, 5] -> [batch, 3, 5]: batch*3*5*4 = 60*batch MACs
    n = node("MatMul", [tensor("batch", 3, 4), tensor(4, 5)], [tensor("batch", 3, 5)])
    assert_cost(n, BATCH * 60, BATCH * 120)
    assert cost(n).flops.evaluate({"batch": 8}) == 960


def test_matmul_needs_only_k_and_the_output() -> None:
    # [?, 3, 4] @ [4, 5] -> [2, 3, 5]: A's batch unknown, k known: 2*3*5*4 = 120
    n = node("MatMul", [tensor(None, 3, 4), tensor(4, 5)], [tensor(2, 3, 5)])
    assert cost(n).macs == 120
    # [2, 3, ?] @ [4, 5]: k from B instead: 120
    n = node("MatMul", [tensor(2, 3, None), tensor(4, 5)], [tensor(2, 3, 5)])
    assert cost(n).macs == 120
    # [2, 3, ?] @ [4]: k from the 1-D B: 2*3*4 = 24
    n = node("MatMul", [tensor(2, 3, None), tensor(4)], [tensor(2, 3)])
    assert cost(n).macs == 24


def test_gemm_with_bias_counts_only_the_product() -> None:
    # A [3, 4] @ B^T ([5, 4] transB) + C [5] -> [3, 5]: 3*5*4 = 60 MACs; C add not counted
    n = node("Gemm", [tensor(3, 4), tensor(5, 4), tensor(5)], [tensor(3, 5)], transB=1)
    assert_cost(n, 60, 120)


def test_gemm_trans_a() -> None:
    # A^T ([4, 3] transA) @ B [4, 5] -> [3, 5]: k = A[0] = 4: 3*5*4 = 60 MACs
    n = node("Gemm", [tensor(4, 3), tensor(4, 5)], [tensor(3, 5)], transA=1, alpha=2.0)
    assert_cost(n, 60, 120)


def test_quantized_matmuls() -> None:
    # [2, 8] @ [8, 3] -> [2, 3]: 2*3*8 = 48 MACs, however the operands are stored
    a, b, scalar = tensor(2, 8), tensor(8, 3), tensor()
    assert cost(node("MatMulInteger", [a, b], [tensor(2, 3)])).macs == 48
    qlinear = [a, scalar, scalar, b, scalar, scalar, scalar, scalar]
    assert cost(node("QLinearMatMul", qlinear, [tensor(2, 3)])).macs == 48
    packed = tensor(3, 1, 4)  # MatMulNBits: B as n rows of blocks
    assert cost(node("MatMulNBits", [a, packed], [tensor(2, 3)], MS, K=8, N=3)).macs == 48


def test_fused_matmul_trans_a() -> None:
    # A [2, 8, 3] read as [2, 3, 8] (transA) @ [8, 4] -> [2, 3, 4]: 2*3*4*8 = 192 MACs
    n = node("FusedMatMul", [tensor(2, 8, 3), tensor(8, 4)], [tensor(2, 3, 4)], MS, transA=1)
    assert cost(n).macs == 192


def test_conv() -> None:
    # [1, 3, 32, 32] * W[16, 3, 3, 3] -> [1, 16, 30, 30]: 1*16*(30*30)*3*(3*3) = 388800 MACs
    n = node("Conv", [tensor(1, 3, 32, 32), tensor(16, 3, 3, 3)], [tensor(1, 16, 30, 30)])
    assert_cost(n, 388_800, 777_600)


def test_conv_bias_not_counted() -> None:
    # as FlopCounterMode: FLOPs = 2*MACs exactly, the 16*900 bias adds are not counted
    inputs = [tensor(1, 3, 32, 32), tensor(16, 3, 3, 3), tensor(16)]
    assert_cost(node("Conv", inputs, [tensor(1, 16, 30, 30)]), 388_800, 777_600)


def test_grouped_conv() -> None:
    # groups=2: [2, 8, 10, 10] * W[16, 4, 3, 3] -> [2, 16, 8, 8]: 2*16*64*(8/2)*9 = 73728 MACs
    n = node("Conv", [tensor(2, 8, 10, 10), tensor(16, 4, 3, 3)], [tensor(2, 16, 8, 8)], group=2)
    assert_cost(n, 73_728, 147_456)


def test_depthwise_conv() -> None:
    # groups=32: [1, 32, 14, 14] * W[32, 1, 3, 3] (pad 1) -> [1, 32, 14, 14]: 32*196*1*9 = 56448
    n = node(
        "Conv", [tensor(1, 32, 14, 14), tensor(32, 1, 3, 3)], [tensor(1, 32, 14, 14)], group=32
    )
    assert_cost(n, 56_448, 112_896)


def test_conv_symbolic_batch_and_1d() -> None:
    # Conv1d [batch, 4, 10] * W[6, 4, 3] -> [batch, 6, 8]: batch*6*8*4*3 = 576*batch MACs
    n = node("Conv", [tensor("batch", 4, 10), tensor(6, 4, 3)], [tensor("batch", 6, 8)])
    assert cost(n).macs == BATCH * 576


def test_conv_transpose() -> None:
    # [1, 8, 5, 5] * W[8, 4, 3, 3] -> [1, 4, 7, 7]: every input element feeds 4*9 outputs:
    # 1*8*25*4*9 = 7200 MACs
    n = node("ConvTranspose", [tensor(1, 8, 5, 5), tensor(8, 4, 3, 3)], [tensor(1, 4, 7, 7)])
    assert_cost(n, 7_200, 14_400)


def test_grouped_conv_transpose() -> None:
    # groups=2: W[8, 2, 3, 3] -> c_out = 4: 1*8*25*(4/2)*9 = 3600 MACs
    n = node(
        "ConvTranspose",
        [tensor(1, 8, 5, 5), tensor(8, 2, 3, 3)],
        [tensor(1, 4, 7, 7)],
        group=2,
    )
    assert cost(n).macs == 3_600


def test_qlinear_conv_reads_weight_at_input_3() -> None:
    # [1, 3, 8, 8] * W[4, 3, 3, 3] -> [1, 4, 6, 6]: 4*36*3*9 = 3888 MACs
    s = tensor()
    inputs = [tensor(1, 3, 8, 8), s, s, tensor(4, 3, 3, 3), s, s, s, s]
    assert cost(node("QLinearConv", inputs, [tensor(1, 4, 6, 6)])).macs == 3_888


@pytest.mark.parametrize(
    ("equation", "shapes", "out", "macs", "adds"),
    [
        # attention scores: b*h*q*k*d = 2*4*8*10*16 = 10240
        ("bhqd,bhkd->bhqk", [(2, 4, 8, 16), (2, 4, 10, 16)], (2, 4, 8, 10), 10_240, 0),
        # batched matmul with ellipsis: 3*2*5*4 = 120
        ("...ij,...jk->...ik", [(3, 2, 4), (3, 4, 5)], (3, 2, 5), 120, 0),
        # implicit output 'ik': 2*3*4 = 24
        ("ij,jk", [(2, 3), (3, 4)], (2, 4), 24, 0),
        # left to right: (ij,jk -> ik) 2*3*4 = 24, then (ik,kl -> il) 2*4*5 = 40: 64
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], (2, 5), 64, 0),
        # i only in A and not wanted: summed first (2*3 = 6 adds), then j,k: 3*4 = 12
        ("ij,jk->k", [(2, 3), (3, 4)], (4,), 12, 6),
        # one operand: a row sum is 3*4 = 12 adds, a transpose is free
        ("ij->i", [(3, 4)], (3,), 0, 12),
        ("ij->ji", [(3, 4)], (4, 3), 0, 0),
        # broadcast 1 gives way: b = 5: 5*2*3*4 = 120
        ("bij,bjk->bik", [(1, 2, 3), (5, 3, 4)], (5, 2, 4), 120, 0),
    ],
)
def test_einsum(
    equation: str,
    shapes: list[tuple[int, ...]],
    out: tuple[int, ...],
    macs: int,
    adds: int,
) -> None:
    n = node("Einsum", [tensor(*s) for s in shapes], [tensor(*out)], equation=equation)
    assert_cost(n, macs, 2 * macs + adds)


def test_einsum_symbolic() -> None:
    # 'bij,jk->bik' [batch, 3, 4] x [4, 5]: batch*3*4*5 = 60*batch
    n = node(
        "Einsum", [tensor("batch", 3, 4), tensor(4, 5)], [tensor("batch", 3, 5)], equation="bij,jk"
    )
    assert cost(n).macs == BATCH * 60


# ----- attention --------------------------------------------------------------------------------
def test_onnx_attention_4d() -> None:
    # Q [2, 4, 8, 16], K [2, 4, 10, 16], V [2, 4, 10, 32] -> [2, 4, 8, 32]
    # QK^T: 2*4*8*10*16 = 10240; PV: 2*4*8*10*32 = 20480: 30720 MACs
    # 2*4*8 = 64 score rows of 10: 640 scores * (softmax 5 + scale 1) = 3840 more FLOPs
    q, k, v = tensor(2, 4, 8, 16), tensor(2, 4, 10, 16), tensor(2, 4, 10, 32)
    assert_cost(node("Attention", [q, k, v], [tensor(2, 4, 8, 32)]), 30_720, 61_440 + 3_840)


def test_onnx_attention_3d_with_past() -> None:
    # Q [1, 6, 64] (4 heads of 16), K [1, 6, 64], past_key [1, 4, 10, 16]: l = 6 + 10 = 16
    # MACs = 16 * (numel Q 384 + numel out 384) = 12288; scores 6*4*16 = 384 * 6 = 2304
    q = tensor(1, 6, 64)
    past = tensor(1, 4, 10, 16)
    n = node("Attention", [q, q, q, None, past, past], [tensor(1, 6, 64)], q_num_heads=4)
    assert_cost(n, 12_288, 24_576 + 2_304)


def test_multi_head_attention() -> None:
    # query [2, 8, 64], key/value [2, 10, 64], 4 heads: 10 * (1024 + 1024) = 20480 MACs
    # scores 2*8*4*10 = 640 * 6 = 3840
    q, kv = tensor(2, 8, 64), tensor(2, 10, 64)
    n = node("MultiHeadAttention", [q, kv, kv], [tensor(2, 8, 64)], MS, num_heads=4)
    assert_cost(n, 20_480, 40_960 + 3_840)


def test_microsoft_attention_adds_the_projection() -> None:
    # input [2, 8, 32] @ weights [32, 96]: 512*96 = 49152 MACs of projection
    # attention over l = 8: 8 * (2*8*32 + 2*8*32) = 8192 MACs; 57344 in all
    # scores 2*8*4*8 = 512 * 6 = 3072
    n = node(
        "Attention",
        [tensor(2, 8, 32), tensor(32, 96), tensor(96)],
        [tensor(2, 8, 32)],
        MS,
        num_heads=4,
    )
    assert_cost(n, 57_344, 114_688 + 3_072)


def test_group_query_attention() -> None:
    # query [1, 4, 64] (8 heads of 8), key [1, 4, 16] (2 kv heads), past [1, 2, 6, 8]: l = 10
    # 10 * (256 + 256) = 5120 MACs; scores 4*8*10 = 320 * 6 = 1920
    q, k, past = tensor(1, 4, 64), tensor(1, 4, 16), tensor(1, 2, 6, 8)
    n = node(
        "GroupQueryAttention",
        [q, k, k, past, past],
        [tensor(1, 4, 64)],
        MS,
        num_heads=8,
        kv_num_heads=2,
    )
    assert_cost(n, 5_120, 10_240 + 1_920)


# ----- elementwise ------------------------------------------------------------------------------
def test_binary_op_counts_broadcast_output() -> None:
    # [2, 3] + [3] -> [2, 3]: 6 adds, no MACs
    assert_cost(node("Add", [tensor(2, 3), tensor(3)], [tensor(2, 3)]), 0, 6)


@pytest.mark.parametrize(
    ("op_type", "per_element"),
    [("Relu", 1), ("Sigmoid", 4), ("Tanh", 1), ("Erf", 1), ("HardSwish", 5), ("Clip", 2)],
)
def test_unary_ops_use_the_table(op_type: str, per_element: int) -> None:
    # [2, 3, 4]: 24 elements * the table's constant
    assert_cost(node(op_type, [tensor(2, 3, 4)], [tensor(2, 3, 4)]), 0, 24 * per_element)


def test_elementwise_symbolic_batch() -> None:
    # Sigmoid [batch, 10]: 10*batch elements * 4 = 40*batch
    assert cost(node("Sigmoid", [tensor("batch", 10)], [tensor("batch", 10)])).flops == BATCH * 40


def test_variadic_sum_and_mean() -> None:
    # Sum(a, b, c) over [4]: (3 - 1) adds * 4 = 8; Mean adds a divide: 4 * 3 = 12
    abc = [tensor(4), tensor(4), tensor(4)]
    assert cost(node("Sum", abc, [tensor(4)])).flops == 8
    assert cost(node("Max", abc, [tensor(4)])).flops == 8
    assert cost(node("Mean", abc, [tensor(4)])).flops == 12
    assert cost(node("Mean", [tensor(4)], [tensor(4)])).flops == 0  # a copy


def test_gelu_approximations() -> None:
    # [10]: erf form 5 per element = 50; tanh form 9 per element = 90; FastGelu + bias: 100
    x, y = tensor(10), tensor(10)
    assert cost(node("Gelu", [x], [y])).flops == 50
    assert cost(node("Gelu", [x], [y], approximate="tanh")).flops == 90
    assert cost(node("Gelu", [x], [y], MS)).flops == 50
    assert cost(node("FastGelu", [x, tensor(10)], [y], MS)).flops == 100
    assert cost(node("BiasGelu", [x, tensor(10)], [y], MS)).flops == 60


@pytest.mark.parametrize("op_type", ["Cast", "CastLike", "Identity", "Dropout"])
def test_free_elementwise_ops_are_registered_and_zero(op_type: str) -> None:
    assert cost(node(op_type, [tensor(8, 8)], [tensor(8, 8)])) == OpCost.zero()


def test_quantization_ops() -> None:
    # [4, 4]: QuantizeLinear 5, DequantizeLinear 2, DynamicQuantizeLinear 7 per element
    x, y, s = tensor(4, 4), tensor(4, 4), tensor()
    assert cost(node("QuantizeLinear", [x, s, s], [y])).flops == 80
    assert cost(node("DequantizeLinear", [x, s, s], [y])).flops == 32
    assert cost(node("DynamicQuantizeLinear", [x], [y, s, s])).flops == 112


def test_flops_table_is_sane() -> None:
    assert all(isinstance(v, int) and v >= 0 for v in FLOPS_PER_ELEMENT.values())
    assert FLOPS_PER_ELEMENT["Dropout"] == 0


# ----- normalization ----------------------------------------------------------------------------
def test_layer_normalization() -> None:
    # [2, 3, 4] = 24 elements: statistics 4 + apply 1 + gamma 1 + beta 1 = 7: 168
    x, y, w = tensor(2, 3, 4), tensor(2, 3, 4), tensor(4)
    assert_cost(node("LayerNormalization", [x, w, w], [y]), 0, 168)
    # without the optional bias: 6 per element: 144
    assert cost(node("LayerNormalization", [x, w], [y])).flops == 144


def test_batch_normalization() -> None:
    # [1, 3, 2, 2] = 12 elements: inference folds to a multiply-add, 2 each: 24
    x, y, c = tensor(1, 3, 2, 2), tensor(1, 3, 2, 2), tensor(3)
    assert cost(node("BatchNormalization", [x, c, c, c, c], [y])).flops == 24
    # training mode computes batch statistics: 2 + 4 = 6 each: 72
    assert cost(node("BatchNormalization", [x, c, c, c, c], [y], training_mode=1)).flops == 72


def test_rms_normalizations() -> None:
    # [2, 4] = 8 elements: square 1 + sum 1 + apply 1 + gamma 1 = 4: 32
    x, y, w = tensor(2, 4), tensor(2, 4), tensor(4)
    assert cost(node("RMSNormalization", [x, w], [y])).flops == 32
    assert cost(node("SimplifiedLayerNormalization", [x, w], [y])).flops == 32
    assert cost(node("SimplifiedLayerNormalization", [x, w], [y], MS)).flops == 32
    # Skip: + skip add 1, + bias add 1 (input 4): 6 each: 48
    skip = [x, tensor(2, 4), w, None, w]
    assert cost(node("SkipSimplifiedLayerNormalization", skip, [y], MS)).flops == 48


def test_skip_layer_normalization() -> None:
    # [2, 4] = 8: skip add 1 + bias add 1 + normalize 5 + gamma 1 + beta 1 = 9: 72
    x, w = tensor(2, 4), tensor(4)
    n = node("SkipLayerNormalization", [x, tensor(2, 4), w, w, w], [tensor(2, 4)], MS)
    assert cost(n).flops == 72
    # no beta, no bias: 1 + 5 + 1 = 7: 56
    n = node("SkipLayerNormalization", [x, tensor(2, 4), w], [tensor(2, 4)], MS)
    assert cost(n).flops == 56


def test_instance_and_group_normalization() -> None:
    # [2, 4, 3, 3] = 72 elements * (5 + scale 1 + bias 1) = 504
    x, y, c = tensor(2, 4, 3, 3), tensor(2, 4, 3, 3), tensor(4)
    assert cost(node("InstanceNormalization", [x, c, c], [y])).flops == 504
    assert cost(node("GroupNormalization", [x, c, c], [y], num_groups=2)).flops == 504


def test_softmax_family() -> None:
    # [2, 5] = 10 elements * (max, subtract, exp, sum, divide = 5) = 50
    x, y = tensor(2, 5), tensor(2, 5)
    assert_cost(node("Softmax", [x], [y]), 0, 50)
    assert cost(node("LogSoftmax", [x], [y])).flops == 50
    assert cost(node("BiasSoftmax", [x, tensor(2, 5)], [y], MS)).flops == 60


def test_lrn_and_lp_normalization() -> None:
    # LRN size 5 on [1, 4, 2, 2] = 16: (5 window adds + 5) * 16 = 160
    x, y = tensor(1, 4, 2, 2), tensor(1, 4, 2, 2)
    assert cost(node("LRN", [x], [y], size=5)).flops == 160
    # LpNormalization: |x|^p, sum, divide = 3 * 16 = 48
    assert cost(node("LpNormalization", [x], [y])).flops == 48


# ----- reduction --------------------------------------------------------------------------------
def test_reductions_count_input_elements() -> None:
    # [2, 3, 4] -> [2, 1, 1]: 24 input elements; ReduceMean 1 each, ReduceL2 2 each
    x, y = tensor(2, 3, 4), tensor(2, 1, 1)
    assert_cost(node("ReduceMean", [x], [y]), 0, 24)
    assert cost(node("ReduceL2", [x], [y])).flops == 48
    assert cost(node("ArgMax", [x], [y])).flops == 24


def test_global_pools_symbolic_batch() -> None:
    # [batch, 8, 7, 7] -> [batch, 8, 1, 1]: 392*batch adds
    n = node("GlobalAveragePool", [tensor("batch", 8, 7, 7)], [tensor("batch", 8, 1, 1)])
    assert cost(n).flops == BATCH * 392


def test_top_k() -> None:
    # [3, 100] -> k = 5 on the last axis: ceil(log2 5) = 3 compares per input element: 900
    n = node("TopK", [tensor(3, 100), tensor(1)], [tensor(3, 5), tensor(3, 5)])
    assert cost(n).flops == 900


def test_top_k_with_symbolic_k_is_unknown() -> None:
    n = node("TopK", [tensor(3, 100), tensor(1)], [tensor(3, "k"), tensor(3, "k")])
    with pytest.raises(ShapeUnknownError, match="TopK"):
        cost(n)


# ----- pooling ----------------------------------------------------------------------------------
def test_pools_count_window_elements() -> None:
    # [1, 4, 8, 8] -> 2x2 stride 2 -> [1, 4, 4, 4]: 64 windows * 4 = 256
    x, y = tensor(1, 4, 8, 8), tensor(1, 4, 4, 4)
    assert_cost(node("MaxPool", [x], [y], kernel_shape=(2, 2), strides=(2, 2)), 0, 256)
    assert cost(node("AveragePool", [x], [y], kernel_shape=(2, 2))).flops == 256
    assert cost(node("LpPool", [x], [y], kernel_shape=(2, 2))).flops == 512


@pytest.mark.parametrize(
    ("mode", "per_element"),
    [("nearest", 0), ("linear", 9), ("cubic", 35)],  # 2-D: 3 lerps * 3; 5 filters * 7
)
def test_resize(mode: str, per_element: int) -> None:
    # [1, 3, 4, 4] -> [1, 3, 8, 8]: 2 resized dims, 192 output elements
    n = node("Resize", [tensor(1, 3, 4, 4)], [tensor(1, 3, 8, 8)], mode=mode)
    assert cost(n).flops == 192 * per_element


def test_grid_sample() -> None:
    # X [1, 3, 4, 4], grid [1, 6, 6, 2] -> [1, 3, 6, 6]: 108 bilinear samples * 9 = 972
    n = node("GridSample", [tensor(1, 3, 4, 4), tensor(1, 6, 6, 2)], [tensor(1, 3, 6, 6)])
    assert cost(n).flops == 972


# ----- movement ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "op_type", ["Reshape", "Transpose", "Concat", "Gather", "Slice", "Expand", "Shape", "Range"]
)
def test_movement_ops_are_registered_and_free(op_type: str) -> None:
    assert cost(node(op_type, [tensor(2, 3)], [tensor(3, 2)])) == OpCost.zero()


# ----- unknown shapes ---------------------------------------------------------------------------
def test_unknown_rank_raises_naming_the_node() -> None:
    # k can come from either operand: neither has a rank here
    n = node("MatMul", [tensor(rank_known=False), tensor(rank_known=False)], [tensor(3, 5)])
    with pytest.raises(ShapeUnknownError, match="MatMul /test/MatMul"):
        cost(n)


def test_unknown_output_dim_raises() -> None:
    # Conv's output spatial size unknown: no silent zero
    n = node("Conv", [tensor(1, 3, 8, 8), tensor(4, 3, 3, 3)], [tensor(1, 4, None, None)])
    with pytest.raises(ShapeUnknownError):
        cost(n)


def test_unknown_elementwise_output_raises() -> None:
    with pytest.raises(ShapeUnknownError):
        cost(node("Relu", [tensor(2, None)], [tensor(2, None)]))


def test_missing_required_input_raises() -> None:
    with pytest.raises(ShapeUnknownError, match="missing input"):
        cost(node("Conv", [tensor(1, 3, 8, 8), None], [tensor(1, 4, 6, 6)]))


# ----- the torch front door's pooling FLOPs (graphmem/frontends/torch/costs.py) ---------------
@pytest.mark.parametrize(("pool", "expected_flops"), [
    # MaxPool2d(3, 2) on 1x4x9x9: out 1x4x4x4 = 64 windows x 9 compares = 576 (ONNX MaxPool's)
    ("max", 576),
    # AvgPool2d(3, 2): the same 64 windows x 9 adds = 576
    ("avg", 576),
    # AdaptiveAvgPool2d(1): one add per input element, 4 * 9 * 9 = 324 (GlobalAveragePool's)
    ("adaptive", 324),
    # MaxPool2d(kernel (2, 3), stride 1) on 1x4x9x9: out 1x4x8x7 = 224 windows x 6 = 1344
    ("max_rect", 1344),
])
@pytest.mark.torch
def test_torch_pooling_flops(pool: str, expected_flops: int) -> None:
    from torch import nn

    from graphmem import analyze_torch

    layer = {"max": nn.MaxPool2d(3, 2), "avg": nn.AvgPool2d(3, 2),
             "adaptive": nn.AdaptiveAvgPool2d(1), "max_rect": nn.MaxPool2d((2, 3), 1)}[pool]
    costs = analyze_torch(layer, ["1x4x9x9"], plan=False).costs
    assert costs.unsupported_ops == {}
    assert costs.total_flops.evaluate({}) == expected_flops
