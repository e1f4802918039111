"""The planner's shapes read a Shape of numeric dims as numbers (ort_plan_shapes.py); the walk
over every node's readers is made only where such a Shape exists."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.frontends.onnx import ort_plan_shapes as plan


def _reshape_by_shape(z_dims: list[int | str]) -> onnx.ModelProto:
    # y = Reshape(x, Shape(z)): x holds 6 floats, z's dims are the target
    nodes = [helper.make_node("Shape", ["z"], ["target"]),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, z_dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_shape_of_numbers_is_read_as_its_value() -> None:
    # z is [2, 3]: the Shape's value is (2, 3), so the Reshape's output is (2, 3), which onnx's
    # inference without data propagation alone leaves unknown
    assert plan._inferred_shapes(_reshape_by_shape([2, 3]), frozenset(), False)["y"] != (2, 3)
    assert plan.ort_plan_shapes(_reshape_by_shape([2, 3]))["y"] == (2, 3)


def test_no_readers_walk_without_a_shape_of_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    # z is [n, 3]: the Shape's value is not numbers, no round runs and no readers are needed
    def walked(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
        raise AssertionError("readers walked")

    monkeypatch.setattr(plan, "_readers", walked)
    shapes = plan.ort_plan_shapes(_reshape_by_shape(["n", 3]))
    assert shapes["z"] == ("n", 3) and shapes["y"] != (2, 3)
    with pytest.raises(AssertionError, match="readers walked"):
        plan.ort_plan_shapes(_reshape_by_shape([2, 3]))
