"""value_types.typed_by_onnx: whether onnx's inference left onnxruntime's rules nothing to
add (then their module need not load). Each case is a graph onnx's inference would give back,
written by hand so the verdict is read from the types alone."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from graphmem.frontends.onnx.value_types import typed_by_onnx


def _graph(outputs: list[onnx.ValueInfoProto], value_info: list[onnx.ValueInfoProto],
           nodes: list[onnx.NodeProto]) -> onnx.GraphProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    return helper.make_graph(nodes, "g", [x], outputs, value_info=value_info)


def _info(name: str, dims: list[int | str | None]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


_RELUS = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Relu", ["h"], ["y"]),
          helper.make_node("Relu", ["h"], ["z"])]


def test_every_node_output_known_and_outputs_in_the_inputs_dims_is_typed() -> None:
    # h typed by a value info, y and z only as graph outputs (a name the outputs type is known
    # without a value info of its own), every dim a number or the input's `batch`
    graph = _graph([_info("y", ["batch", 4]), _info("z", ["batch", 4])],
                   [_info("h", ["batch", 4])], _RELUS)
    assert typed_by_onnx(graph, graph.input)


def test_an_output_dim_no_input_declares_is_left_to_the_rules() -> None:
    # z's type is y's but for a dim onnx could not infer (`unk__0`): the rules would name
    # it, so onnx's types are not the last word
    graph = _graph([_info("y", ["batch", 4]), _info("z", ["batch", "unk__0"])],
                   [_info("h", ["batch", 4])], _RELUS)
    assert not typed_by_onnx(graph, graph.input)
    named = _graph([_info("y", ["batch", 4]), _info("z", ["batch", "seq"])],
                   [_info("h", ["batch", 4])], _RELUS)
    assert not typed_by_onnx(named, named.input)  # `seq`: known, but no input declares it


def test_a_node_output_without_a_known_type_is_left_to_the_rules() -> None:
    untyped = _graph([_info("y", ["batch", 4]), _info("z", ["batch", 4])], [], _RELUS)
    assert not typed_by_onnx(untyped, untyped.input)  # h: no value info at all
    unknown = _graph([_info("y", ["batch", 4]), _info("z", ["batch", 4])],
                     [_info("h", ["batch", None])], _RELUS)
    assert not typed_by_onnx(unknown, unknown.input)  # h: a dim nobody named


def test_many_outputs_of_one_type_are_each_counted_known() -> None:
    # 1,000 outputs of one type: judged once by their bytes, every name still counted
    nodes = [helper.make_node("Relu", ["x"], [f"y{i}"]) for i in range(1000)]
    outputs = [_info(f"y{i}", ["batch", 4]) for i in range(1000)]
    assert not typed_by_onnx(_graph(outputs, [], nodes), [])  # `batch`: no input declared
    graph = _graph(outputs, [], nodes)
    assert typed_by_onnx(graph, graph.input)
    graph.node.append(helper.make_node("Relu", ["x"], ["dangling"]))  # made, typed nowhere
    assert not typed_by_onnx(graph, graph.input)
