"""validation.py: each tensor has one definition. The nodes' outputs are checked as one list
and one set, and walked node by node only to name what is written twice: the message is the
one the node-by-node check gave (the first name written twice, in the nodes' order)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.errors import GraphmemError
from graphmem.frontends.onnx.validation import validate_graph

_X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
_Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])


def _model(nodes: list[onnx.NodeProto],
           initializers: tuple[onnx.TensorProto, ...] = ()) -> onnx.ModelProto:
    return helper.make_model(helper.make_graph(nodes, "g", [_X], [_Y], list(initializers)))


def _refusal(model: onnx.ModelProto) -> str:
    with pytest.raises(GraphmemError) as error:
        validate_graph(model)
    return str(error.value)


def test_a_node_output_written_twice_names_both_nodes() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="first"),
             helper.make_node("Relu", ["h"], ["y"], name="second"),
             helper.make_node("Neg", ["x"], ["h"], name="third")]
    assert _refusal(_model(nodes)).startswith(
        "tensor 'h' is written by Neg node 'third' but is already written by Relu node 'first'")


def test_a_node_output_that_is_an_input_or_an_initializer_is_refused() -> None:
    assert "tensor 'x' is written by Relu node 'r' but is already a graph input" in _refusal(
        _model([helper.make_node("Relu", ["x"], ["x"], name="r"),
                helper.make_node("Relu", ["x"], ["y"])]))
    w = numpy_helper.from_array(np.zeros(2, np.float32), "w")
    assert "tensor 'w' is written by Relu node 'r' but is already an initializer" in _refusal(
        _model([helper.make_node("Relu", ["x"], ["w"], name="r"),
                helper.make_node("Add", ["x", "w"], ["y"])], (w,)))


def test_the_first_name_written_twice_in_the_nodes_order_is_named() -> None:
    # two names written twice: the node-by-node walk meets 'b' (node 3) before 'a' (node 4)
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="n1"),
             helper.make_node("Relu", ["x"], ["b"], name="n2"),
             helper.make_node("Relu", ["x"], ["b"], name="n3"),
             helper.make_node("Relu", ["x"], ["a"], name="n4"),
             helper.make_node("Add", ["a", "b"], ["y"])]
    assert "tensor 'b' is written by Relu node 'n3'" in _refusal(_model(nodes))


def test_optional_outputs_left_out_are_no_second_definition() -> None:
    # Dropout's mask left out ('') by two nodes: no name, nothing defined twice
    nodes = [helper.make_node("Dropout", ["x"], ["h", ""]),
             helper.make_node("Dropout", ["h"], ["y", ""])]
    validate_graph(_model(nodes))
