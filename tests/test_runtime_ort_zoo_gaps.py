"""The onnxruntime CPU behaviours the zoo's exports found (docs/zoo.md, "ONNX exports"), each
on a graph small enough to work out by hand, checked against onnxruntime's own measurement
(`mem_in_use_peak`, one thread, tests/helpers/ort.py `measure_all`):
- a Shape read directly as a Reshape's target is a known shape to onnxruntime's planner, a
  target made with a constant is not (wav2vec2 and HuBERT's group norm at ORT_DISABLE_ALL);
- ConvTranspose prepacks its filter into the arena and takes a column buffer (the U-Net).
FusedConv's scratch (RegNet's grouped Conv at ORT_ENABLE_ALL) is a pattern of
tests/test_runtime_ort_optimized.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.core.ir import DType, Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.frontends.onnx.ort_plan_shapes import ort_plan_shapes
from graphmem.runtime_models.data_bounds import data_bounds
from tests.helpers.ort import measure_all

F32 = TensorProto.FLOAT


def _ints(values: object, name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


# the Reshape's target: straight from a Shape, or a Shape's first dim next to a constant
TARGETS = {
    "shape": ([helper.make_node("Shape", ["z"], ["target"])], []),
    "shape_and_constant": ([helper.make_node("Shape", ["a"], ["s"]),
                            helper.make_node("Gather", ["s", "i0"], ["n0"]),
                            helper.make_node("Unsqueeze", ["n0", "ax"], ["n"]),
                            helper.make_node("Concat", ["n", "cols"], ["target"], axis=0)],
                           [_ints(0, "i0"), _ints([0], "ax"), _ints([256], "cols")]),
}


def _reshaped_chain(tmp_path: Path, target: str) -> Path:
    # x [64, 64, 4] fp32 (64 KiB, the caller's); a = x * x; b = Reshape(a, [64, 256]) (a's
    # buffer); c = -b (C); d = c^T [256, 64] (D; c's last read); e = -d (E); f = e^T [64, 256];
    # y = -f (the output, 64 KiB). When the planner knows b's shape, c's and f's are equal
    # [64, 256]: f takes C, so C is held through d and e instead of being freed after d.
    nodes, constants = TARGETS[target]
    nodes = [helper.make_node("Mul", ["x", "x"], ["a"]), *nodes,
             helper.make_node("Reshape", ["a", "target"], ["b"]),
             helper.make_node("Neg", ["b"], ["c"]),
             helper.make_node("Transpose", ["c"], ["d"], perm=[1, 0]),
             helper.make_node("Neg", ["d"], ["e"]),
             helper.make_node("Transpose", ["e"], ["f"], perm=[1, 0]),
             helper.make_node("Neg", ["f"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", F32, [64, 64, 4]),
              helper.make_tensor_value_info("z", F32, [64, 256])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(
        "y", F32, [64, 256])], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / f"{target}.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.ort
@pytest.mark.slow
@pytest.mark.parametrize(("target", "known", "peak"), [
    # known: at e, A is free (b's last read was c), C is held for f, D and E live:
    # 3 x 65,536 B, plus one 256-byte chunk, the Shape's output (2 int64s, rounded)
    ("shape", True, 3 * 65536 + 256),
    # unknown: C is freed after d; at most two 64 KiB buffers live at once (D, E; E, F;
    # F, Y), plus the small chunks of the Shape, Gather, Unsqueeze and Concat outputs
    ("shape_and_constant", False, None),
])
def test_a_shape_read_as_a_reshape_target_is_known_to_the_planner(
        tmp_path: Path, target: str, known: bool, peak: int | None) -> None:
    path = _reshaped_chain(tmp_path, target)
    assert (ort_plan_shapes(path)["b"] == (64, 256)) is known
    predicted, measured = measure_all(path, None, "disabled")
    assert predicted == measured, (target, predicted, measured)
    if peak is not None:
        assert measured == peak, measured
    else:  # two 64 KiB buffers and the small outputs: well under three
        assert 2 * 65536 < measured < 2 * 65536 + 4096, measured


@pytest.mark.ort
@pytest.mark.slow
def test_conv_transpose_prepacks_its_filter_and_takes_a_column_buffer(tmp_path: Path) -> None:
    # x [2, 16, 8, 8] -> ConvTranspose(W [16, 16, 2, 2], stride 2) -> y [2, 16, 16, 16].
    # Before the run: the filter transposed per group, K = 16 rows by N = 16 * 2 * 2 = 64
    # columns: 16 * 64 * 4 = 4,096 B (the file's W, 4,096 B, is used in place, uncounted).
    # During it: y (2 * 16 * 16 * 16 * 4 = 32,768 B), then the column buffer, N = 64 rows by
    # the input's 8 * 8 pixels: 64 * 64 * 4 = 16,384 B. Peak: 4,096 + 32,768 + 16,384.
    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((16, 16, 2, 2)).astype(np.float32), "w")
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32,
                                                                         [2, 16, 8, 8])],
                              [helper.make_tensor_value_info("y", F32, [2, 16, 16, 16])],
                              [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "up.onnx"
    onnx.save(model, path)
    predicted, measured = measure_all(path, None, "disabled")
    assert predicted == measured == 4096 + 32768 + 16384, (predicted, measured)


def _routed(tmp_path: Path, threshold: float) -> Path:
    # x [1024] fp32 and a table [1024, 64] fp32 (the caller's); m = x > threshold [1024] bool;
    # i = NonZero(m) [1, n] int64, n known only at run time, at most 1,024 (m's elements);
    # g = Gather(table, Squeeze(i)) [n, 64]; y = ReduceSum(-g): an expert's routed tokens
    nodes = [helper.make_node("Greater", ["x", "t"], ["m"]),
             helper.make_node("NonZero", ["m"], ["i"]),
             helper.make_node("Squeeze", ["i", "ax"], ["s"]),
             helper.make_node("Gather", ["table", "s"], ["g"], axis=0),
             helper.make_node("Neg", ["g"], ["h"]),
             helper.make_node("ReduceSum", ["h"], ["y"], keepdims=0)]
    inputs = [helper.make_tensor_value_info("x", F32, [1024]),
              helper.make_tensor_value_info("table", F32, [1024, 64])]
    constants = [numpy_helper.from_array(np.array(threshold, np.float32), "t"),
                 _ints([0], "ax")]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(
        "y", F32, [])], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "routed.onnx"
    onnx.save(model, path)
    return path


def test_a_nonzero_output_is_bounded_by_its_inputs_elements() -> None:
    # NonZero of a [2, 32] mask -> [2, n]: n at most 2 * 32 = 64
    mask = Value("m", DType.BOOL, (SymInt.const(2), SymInt.const(32)), Role.ACTIVATION)
    node = Node("nz", "NonZero", [mask], [])
    node.add_output(Value("i", DType.INT64, (SymInt.const(2), SymInt.symbol("n")),
                          Role.ACTIVATION))
    graph = Graph("g", [], {}, [mask], [])
    graph.add_node(node)
    bounds = data_bounds(graph, {})
    assert bounds.bound == {"n": 64}
    assert "upper bound" in bounds.note() and "n=64" in bounds.note()
    assert data_bounds(graph, {"n": 5}).bound == {}  # a dim the user bound stays theirs


@pytest.mark.ort
@pytest.mark.slow
@pytest.mark.parametrize(("threshold", "exact"), [(-1e30, True), (0.0, False)])
def test_nonzero_sized_tensors_are_planned_at_their_bound(
        tmp_path: Path, threshold: float, exact: bool) -> None:
    # every element nonzero (threshold -1e30): n = 1,024, g and h [1024, 64] fp32, 256 KiB
    # each: the bound is what runs. About half nonzero (randn > 0): n near 512, onnxruntime
    # takes less and graphmem's plan (at n = 1,024) is an upper bound
    path = _routed(tmp_path, threshold)
    predicted, measured = measure_all(path, None, "disabled")
    assert predicted >= measured, (predicted, measured)
    assert (predicted == measured) is exact, (predicted, measured)
