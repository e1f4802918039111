"""onnxruntime's symbolic rules for every reduction whose axes are an input (opset 18).

onnxruntime's engine reads the axes input of ReduceSum, ReduceMean and ReduceProd only; for
ReduceL1 and the others it runs onnx's one-node inference, which does not see the axes' value,
so the output stayed unshaped and the Div after it ended the whole engine (DBRX's router
normalizes its weights with ReduceL1: every expert's token count was left unnamed).
graphmem gives the other reductions ReduceSum's rule (graphmem/frontends/onnx/infer.py)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.frontends.onnx.infer import _REDUCTIONS_LIKE_SUM, _ort_symbolic_inference

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


@pytest.mark.parametrize("op", ["ReduceSum", *_REDUCTIONS_LIKE_SUM])
@pytest.mark.parametrize("keepdims", [1, 0])
def test_a_reduction_over_a_known_axes_input_is_shaped(op: str, keepdims: int) -> None:
    # [batch, seq, 4] reduced over the last axis: [batch, seq, 1] kept, [batch, seq] dropped
    failed: list[str] = []
    inferred = _ort_symbolic_inference(reduced_then_divided(op, keepdims, True), failed)
    assert failed == []
    assert shape_of(inferred, "r") == (["batch", "seq", 1] if keepdims else ["batch", "seq"])
    assert shape_of(inferred, "y") == ["batch", "seq", 4]


@pytest.mark.parametrize("op", _REDUCTIONS_LIKE_SUM)
def test_axes_of_unknown_value_are_left_to_onnx(op: str) -> None:
    # no value to read: the rule does nothing (no assertion of onnxruntime's own on keepdims),
    # the engine ends, and the reduction keeps what onnx's inference gives it
    failed: list[str] = []
    inferred = _ort_symbolic_inference(reduced_then_divided(op, 0, False), failed)
    assert failed == []
    assert shape_of(inferred, "y") == ["batch", "seq", 4]
