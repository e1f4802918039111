"""onnxruntime's symbolic rules for every reduction whose axes are an input (opset 18).

onnxruntime's engine reads the axes input of ReduceSum, ReduceMean and ReduceProd only; for
ReduceL1 and the others it runs onnx's one-node inference, which does not see the axes' value,
so the output stayed unshaped and the Div after it ended the whole engine (DBRX's router
normalizes its weights with ReduceL1: every expert's token count was left unnamed).
graphmem gives the other reductions ReduceSum's rule (graphmem/frontends/onnx/ort_rules.py)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.frontends.onnx.infer import _ort_symbolic_inference
from graphmem.frontends.onnx.ort_rules import REDUCTIONS_LIKE_SUM

pytest.importorskip("onnxruntime")


def reduced_then_divided(op: str, keepdims: int, axes_known: bool) -> onnx.ModelProto:
    """x[batch, seq, 4] -> op(x, axes=[-1]) -> Div(x, r): the router normalization's shape."""
    nodes = [helper.make_node(op, ["x", "axes"], ["r"], keepdims=keepdims),
             helper.make_node("Div", ["x", "r"] if keepdims else ["x", "x"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])]
    if axes_known:
        nodes.insert(0, helper.make_node("Constant", [], ["axes"], value=helper.make_tensor(
            "a", TensorProto.INT64, [1], [-1])))
    else:  # the axes a graph input: nothing to read, left to onnx's inference as before
        inputs.append(helper.make_tensor_value_info("axes", TensorProto.INT64, [1]))
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def shape_of(model: onnx.ModelProto, name: str) -> list[str | int] | None:
    for info in [*model.graph.value_info, *model.graph.output]:
        if info.name == name and info.type.tensor_type.HasField("shape"):
            return [d.dim_param or d.dim_value for d in info.type.tensor_type.shape.dim]
    return None


@pytest.mark.parametrize("op", ["ReduceSum", *REDUCTIONS_LIKE_SUM])
@pytest.mark.parametrize("keepdims", [1, 0])
def test_a_reduction_over_a_known_axes_input_is_shaped(op: str, keepdims: int) -> None:
    # [batch, seq, 4] reduced over the last axis: [batch, seq, 1] kept, [batch, seq] dropped
    failed: list[str] = []
    inferred = _ort_symbolic_inference(reduced_then_divided(op, keepdims, True), failed)
    assert failed == []
    assert shape_of(inferred, "r") == (["batch", "seq", 1] if keepdims else ["batch", "seq"])
    assert shape_of(inferred, "y") == ["batch", "seq", 4]


@pytest.mark.parametrize("op", REDUCTIONS_LIKE_SUM)
def test_axes_of_unknown_value_are_left_to_onnx(op: str) -> None:
    # no value to read: the rule does nothing (no assertion of onnxruntime's own on keepdims),
    # the engine ends, and the reduction keeps what onnx's inference gives it
    failed: list[str] = []
    inferred = _ort_symbolic_inference(reduced_then_divided(op, 0, False), failed)
    assert failed == []
    assert shape_of(inferred, "y") == ["batch", "seq", 4]


def one_hot_then_flattened(depth_shape: list[int], axis: int, flatten_axis: int
                           ) -> onnx.ModelProto:
    """i[n, 2] -> OneHot(i, Constant 5, axis) -> Flatten(flatten_axis): a router's choices
    marked over its experts (an exporter's depth is a Constant), then flattened."""
    nodes = [
        helper.make_node("Constant", [], ["depth"], value=helper.make_tensor(
            "d", TensorProto.INT64, depth_shape, [5])),
        helper.make_node("Constant", [], ["values"], value=helper.make_tensor(
            "v", TensorProto.FLOAT, [2], [0.0, 1.0])),
        helper.make_node("OneHot", ["i", "depth", "values"], ["hot"], axis=axis),
        helper.make_node("Flatten", ["hot"], ["flat"], axis=flatten_axis)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("i", TensorProto.INT64, ["n", 2])],
        [helper.make_tensor_value_info("flat", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("depth_shape", [[], [1]])
@pytest.mark.parametrize(("axis", "hot", "flatten_axis", "flat"), [
    # OneHot inserts the depth at its axis: -1 (the last of rank 3) -> [n, 2, 5]; 0 -> [5, n, 2]
    # Flatten(axis) is [prod(dims before), prod(dims from axis)]: [n, 2, 5] at 2 -> [2n, 5],
    # at 0 -> [1, 10n], at 3 (the rank) -> [10n, 1]; [5, n, 2] at 1 -> [5, 2n]
    (-1, ["n", 2, 5], 2, ["2*n", 5]),
    (-1, ["n", 2, 5], 0, [1, "10*n"]),
    (-1, ["n", 2, 5], 3, ["10*n", 1]),
    (0, [5, "n", 2], 1, [5, "2*n"]),
    (0, [5, "n", 2], -2, [5, "2*n"]),
])
def test_one_hot_depth_and_flatten_stay_symbolic(depth_shape: list[int], axis: int,
                                                 hot: list[str | int], flatten_axis: int,
                                                 flat: list[str | int]) -> None:
    # onnxruntime's engine named a new dim for a Constant depth (read as an array) and left
    # Flatten to onnx's rule, which multiplies numbers only: a mixture of experts' expert
    # gathers went unshaped and every probe of the batch re-inferred the model
    failed: list[str] = []
    inferred = _ort_symbolic_inference(one_hot_then_flattened(depth_shape, axis, flatten_axis),
                                       failed)
    assert failed == []
    assert shape_of(inferred, "hot") == hot
    assert shape_of(inferred, "flat") == flat
