"""Quantized ONNX models built with onnx.helper: parameters at their stored type, bytes exact
against the file's initializers, MACs of the float form, no unsupported op
(graphmem/ops/quantized.py, graphmem/ops/linear.py, graphmem/passes/params.py).

Byte counts follow ONNX Operators.md (int4/uint4: two values to a byte, the last one padded) and
onnxruntime's ContribOperators.md (MatMulNBits B [N, ceil(K / block), block * bits / 8], packed
zero points [N, ceil(ceil(K / block) * bits / 8)]; GatherBlockQuantized uint8 data packs 8 / bits
values per byte). Where onnxruntime runs the model, its output shape checks the packing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem import analyze_onnx
from graphmem.cli.main import main
from graphmem.core.ir import DType, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.ops import find_rule
from graphmem.ops.quantized import quantized_operands, stored_weight
from graphmem.passes.params import stored_bytes

MS = "com.microsoft"
K, N = 64, 32  # a 64 -> 32 linear layer: 2048 weights
OPSETS = [helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)]


def initializer_bytes(model: onnx.ModelProto) -> int:
    """Bytes of every initializer as the file stores it: raw_data, else ONNX's packed int4
    (one int32_data entry per byte), else numel x the element size."""
    total = 0
    for tensor in model.graph.initializer:
        numel = int(np.prod(tensor.dims))
        if tensor.raw_data:
            total += len(tensor.raw_data)
        elif tensor.data_type in (TensorProto.INT4, TensorProto.UINT4):
            total += len(tensor.int32_data)
        else:
            total += numel * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return total


def int4_tensor(name: str, dims: list[int], seed: int = 0) -> onnx.TensorProto:
    values = np.random.default_rng(seed).integers(-8, 8, size=int(np.prod(dims)))
    return helper.make_tensor(name, TensorProto.INT4, dims, values.tolist())


def save(graph: onnx.GraphProto, path: Path) -> Path:
    # IR version 10: onnxruntime 1.31 reads up to 13, onnx writes a newer one by default
    onnx.save(helper.make_model(graph, opset_imports=OPSETS, ir_version=10), path)
    return path


def linear_io(out_type: int = TensorProto.FLOAT) -> tuple[list, list]:
    return ([helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K])],
            [helper.make_tensor_value_info("y", out_type, ["batch", N])])


@pytest.fixture
def blocked_int4(tmp_path: Path) -> Path:
    """x @ DequantizeLinear(w int4 [64, 32], scale [4, 32], zp int4 [4, 32], axis 0,
    block_size 16): opset 21's blocked quantization."""
    rng = np.random.default_rng(1)
    scale = numpy_helper.from_array(rng.random((K // 16, N)).astype(np.float32), "scale")
    nodes = [helper.make_node("DequantizeLinear", ["w", "scale", "zp"], ["wf"], axis=0,
                              block_size=16, name="dq"),
             helper.make_node("MatMul", ["x", "wf"], ["y"], name="mm")]
    graph = helper.make_graph(nodes, "blocked_int4", *linear_io(),
                              initializer=[int4_tensor("w", [K, N]), scale,
                                           int4_tensor("zp", [K // 16, N], 2)])
    return save(graph, tmp_path / "blocked_int4.onnx")


def matmul_nbits_graph(bits: int, block: int = 32) -> onnx.GraphProto:
    """MatMulNBits as ContribOperators.md lays it out: B uint8 [N, K / block, block * bits / 8],
    scales [N, K / block], packed zero points [N, ceil(K / block * bits / 8)]."""
    rng = np.random.default_rng(3)
    blocks = K // block
    b = rng.integers(0, 256, (N, blocks, block * bits // 8), dtype=np.uint8)
    zero_points = rng.integers(0, 256, (N, -(-blocks * bits // 8)), dtype=np.uint8)
    initializers = [numpy_helper.from_array(b, "b"),
                    numpy_helper.from_array(rng.random((N, blocks)).astype(np.float32), "s"),
                    numpy_helper.from_array(zero_points, "zp")]
    node = helper.make_node("MatMulNBits", ["x", "b", "s", "zp"], ["y"], domain=MS, K=K, N=N,
                            bits=bits, block_size=block, name="mm_nbits")
    return helper.make_graph([node], f"nbits{bits}", *linear_io(), initializer=initializers)


# ----- parameters at their stored type ----------------------------------------------------------
def test_blocked_int4_weight_is_2048_parameters_in_1024_bytes(blocked_int4: Path) -> None:
    result = analyze_onnx(blocked_int4, batch=4, plan=False)
    params = result.params
    # w: 64 x 32 = 2048 int4 values, two to a byte: 1024 B
    assert params.count == 2048 and params.bytes == 1024
    assert [(g.dtype, g.count, g.bytes) for g in params.quantized] == [("int4", 2048, 1024)]
    # scale 4 x 32 float32 = 512 B, zero point 4 x 32 int4 = 64 B: 576 B of quantization
    assert params.quantization_bytes == 576
    assert params.bytes + params.quantization_bytes == initializer_bytes(onnx.load(blocked_int4))
    # the MACs of x @ W at batch 4: 4 x 32 x 64 = 8192
    assert int(result.costs.total_macs) == 8192
    assert not result.costs.unsupported_ops and not result.costs.shape_unknown_nodes


def test_an_odd_int4_tensor_rounds_up_to_a_whole_byte() -> None:
    # 3 x 5 = 15 int4 values: 7.5 bytes, stored as 8 (ONNX pads the last byte)
    tensor = int4_tensor("t", [3, 5])
    value = Value("t", DType.INT4, (SymInt.const(3), SymInt.const(5)), Role.CONSTANT)
    assert stored_bytes(value) == len(tensor.int32_data) == 8


@pytest.mark.parametrize(("bits", "label", "weight_bytes", "zero_point_bytes"), [
    # K/block = 2 blocks per row; 4 bits: B [32, 2, 16] = 1024 B, zero points [32, 1] = 32 B
    (4, "uint4", 1024, 32),
    # 8 bits: B [32, 2, 32] = 2048 B, zero points [32, 2] = 64 B
    (8, "uint8", 2048, 64),
])
def test_matmul_nbits_counts_n_times_k_parameters(tmp_path: Path, bits: int, label: str,
                                                 weight_bytes: int, zero_point_bytes: int) -> None:
    path = save(matmul_nbits_graph(bits), tmp_path / "nbits.onnx")
    result = analyze_onnx(path, batch=4, plan=False)
    params = result.params
    assert params.count == K * N == 2048
    assert [(g.dtype, g.count, g.bytes) for g in params.quantized] == [(label, 2048, weight_bytes)]
    # scales 32 x 2 float32 = 256 B
    assert params.quantization_bytes == 256 + zero_point_bytes
    assert params.bytes + params.quantization_bytes == initializer_bytes(onnx.load(path))
    assert int(result.costs.total_macs) == 4 * N * K  # 8192, as MatMul(x, W)


@pytest.mark.ort
def test_onnxruntime_runs_the_packed_layouts(tmp_path: Path, blocked_int4: Path) -> None:
    # the byte layouts above are the ones onnxruntime accepts: each model runs, right shape
    for path in (blocked_int4, save(matmul_nbits_graph(4), tmp_path / "nbits4.onnx")):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        assert session.run(None, {"x": np.ones((4, K), np.float32)})[0].shape == (4, N)


def gather_block_quantized_graph() -> onnx.GraphProto:
    """An embedding of 64 rows of 32 values, 4-bit, packed two to a byte in uint8 [64, 16],
    one float16 scale per block of 16 values: scales [64, 2]."""
    rng = np.random.default_rng(4)
    table = numpy_helper.from_array(rng.integers(0, 256, (64, 16), dtype=np.uint8), "table")
    scales = numpy_helper.from_array(rng.random((64, 2)).astype(np.float16), "scales")
    node = helper.make_node("GatherBlockQuantized", ["table", "ids", "scales"], ["emb"],
                            domain=MS, bits=4, block_size=16, gather_axis=0, quantize_axis=1,
                            name="embed")
    return helper.make_graph(
        [node], "gbq", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info("emb", TensorProto.FLOAT16, ["b", "s", 32])],
        initializer=[table, scales])


@pytest.mark.ort
def test_gather_block_quantized_table(tmp_path: Path) -> None:
    path = save(gather_block_quantized_graph(), tmp_path / "gbq.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.run(None, {"ids": np.zeros((2, 3), np.int64)})[0].shape == (2, 3, 32)
    result = analyze_onnx(path, dims={"b": 2, "s": 3}, plan=False)
    # 64 x 16 bytes hold 64 x 32 = 2048 4-bit values; scales 64 x 2 x 2 B = 256 B
    assert [(g.dtype, g.count, g.bytes) for g in result.params.quantized] == [
        ("uint4", 2048, 1024)]
    assert result.params.quantization_bytes == 256
    # 2 x 3 gathered rows of 32 values, each dequantized: (q - zp) * scale, 2 FLOPs
    assert int(result.costs.total_flops) == 2 * 3 * 32 * 2 == 384


# ----- cost rules on hand-built nodes -------------------------------------------------------------
def tensor(*dims: int, dtype: DType = DType.UINT8, role: Role = Role.ACTIVATION) -> Value:
    return Value("t", dtype, tuple(SymInt.const(d) for d in dims), role)


def test_qgemm_has_the_macs_of_its_gemm_even_without_an_output_shape() -> None:
    # A [8, 64] @ B^T with B [32, 64] (transB): 8 x 32 x 64 = 16384 MACs; the output's shape
    # unknown, as onnxruntime's symbolic inference leaves it
    a, b = tensor(8, 64), tensor(32, 64, dtype=DType.INT8)
    out = Value("y", DType.FLOAT32, None, Role.ACTIVATION)
    scalar = tensor()
    node = Node("qgemm", "QGemm", [a, scalar, scalar, b, scalar, scalar], [out], {"transB": 1},
                MS)
    rule = find_rule("QGemm", MS)
    assert rule is not None and int(rule(node).macs) == 16384


@pytest.mark.parametrize(("op_type", "inputs", "flops"), [
    # QLinearAdd: A [4, 10] + B [4, 10]: 40 adds, as Add
    ("QLinearAdd", 8, 40),
    # QLinearSigmoid: 40 x 4 (negate, exp, add, divide), as Sigmoid
    ("QLinearSigmoid", 5, 160),
    # QLinearConcat: a copy, as Concat
    ("QLinearConcat", 8, 0),
])
def test_qlinear_ops_cost_their_float_form(op_type: str, inputs: int, flops: int) -> None:
    node = Node("q", op_type, [tensor(4, 10) for _ in range(inputs)], [tensor(4, 10)], {}, MS)
    rule = find_rule(op_type, MS)
    assert rule is not None and int(rule(node).flops) == flops


def test_qlinear_concat_operands_follow_its_inputs() -> None:
    # Y_scale, Y_zero_point, then (tensor, scale, zero point) twice
    node = Node("c", "QLinearConcat", [tensor(1) for _ in range(8)], [tensor(1)], {}, MS)
    operands = quantized_operands(node)
    assert operands is not None
    assert (operands.data, operands.scales, operands.zero_points) == ((2, 5), (0, 3, 6),
                                                                      (1, 4, 7))


def test_a_packed_weight_read_by_another_op_counts_its_elements() -> None:
    # the MatMulNBits packing applies to its input B only
    packed = tensor(32, 2, 16, role=Role.CONSTANT)
    node = Node("m", "MatMulNBits", [tensor(4, 64), packed], [tensor(4, 32)],
                {"K": 64, "N": 32, "bits": 4}, MS)
    assert stored_weight(node, packed).parameters == 2048
    other = Node("d", "DequantizeLinear", [packed], [tensor(1024)])
    assert stored_weight(other, packed).parameters == 1024


# ----- the report and the command line ----------------------------------------------------------
def test_cli_json_says_what_is_quantized(blocked_int4: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", str(blocked_int4), "--batch", "4", "--no-html", "--json", "-"])
    assert code == 0
    params = json.loads(capsys.readouterr().out)["params"]
    assert params["count"] == 2048 and params["bytes_by_dtype"] == {"int4": 1024}
    assert params["quantized"] == [{"dtype": "int4", "count": 2048, "bytes": 1024}]
    assert params["quantization_bytes"] == 576
