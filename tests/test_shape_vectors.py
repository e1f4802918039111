"""A Reshape's target computed from shapes (graphmem/frontends/onnx/shape_vectors.py): read as
onnxruntime's rules read it, so onnx's pass types the Reshape with the rules' own shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.frontends.onnx import shape_vectors
from graphmem.frontends.onnx.importer import OnnxImport, import_onnx
from graphmem.frontends.onnx.shape_vectors import ShapeVectors


def _ints(name: str, values: list[int] | int) -> TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _repeat_model(style: str, repeats: int = 2, layers: int = 2) -> onnx.ModelProto:
    """`layers` times: keys [batch, 2, seq, 8] repeated to 2 * `repeats` heads (Unsqueeze at
    axis 2, Tile), reshaped by a target read from the tiled tensor's shape, as the
    TorchScript exporter writes it (`torchscript`: Slice(Shape(t), [0], [1]), [-1],
    Slice(Shape(t), [3], [5])) or one dim at a time (`gather`: Unsqueeze(Gather(Shape(t), i))),
    then scores against queries of as many heads."""
    nodes: list[onnx.NodeProto] = []

    def op(op_type: str, inputs: list[str], **attributes: object) -> str:
        output = f"{op_type.lower()}_{len(nodes)}"
        nodes.append(helper.make_node(op_type, inputs, [output], **attributes))
        return output

    heads = 2 * repeats
    q = "q"
    for _ in range(layers):
        tiled = op("Tile", [op("Unsqueeze", ["k", "axis2"]), "repeats"])
        shape = op("Shape", [tiled])
        if style == "torchscript":
            target = op("Concat", [op("Slice", [shape, "zero", "one"]), "minus_one",
                                   op("Slice", [shape, "three", "five"])], axis=0)
        else:
            dims = [op("Unsqueeze", [op("Gather", [shape, index]), "axis0"])
                    for index in ("i0", "i3", "i4")]
            target = op("Concat", [dims[0], "minus_one", dims[1], dims[2]], axis=0)
        keys = op("Reshape", [tiled, target])
        scores = op("MatMul", [q, op("Transpose", [keys], perm=[0, 1, 3, 2])])
        q = op("MatMul", [op("Softmax", [scores]), keys])
    graph = helper.make_graph(
        nodes, "repeat",
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", heads, "seq", 8]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, ["batch", 2, "seq", 8])],
        [helper.make_tensor_value_info(q, TensorProto.FLOAT, None)],
        [_ints("axis2", [2]), _ints("axis0", [0]), _ints("repeats", [1, 1, repeats, 1, 1]),
         _ints("zero", [0]), _ints("one", [1]), _ints("three", [3]), _ints("five", [5]),
         _ints("minus_one", [-1]), _ints("i0", 0), _ints("i3", 3), _ints("i4", 4)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _shapes(imported: OnnxImport) -> dict[str, str]:
    return {name: repr(value.shape) for name, value in imported.graph.values.items()}


@pytest.mark.parametrize("style", ["torchscript", "gather"])
def test_a_target_read_from_shapes_is_typed_with_the_rules_shapes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, style: str) -> None:
    path = tmp_path / "repeat.onnx"
    onnx.save(_repeat_model(style), path)
    typed = import_onnx(path)
    with monkeypatch.context() as patch:  # the same import, the targets left to the engines
        patch.setattr(shape_vectors.ShapeVectors, "target", lambda self, name: None)
        untyped = import_onnx(path)
    assert typed.shape_inference == "onnx shape inference"  # no rules, no sympy
    assert "onnxruntime symbolic" in untyped.shape_inference
    assert _shapes(typed) == _shapes(untyped)
    # [batch, 2, 2, seq, 8] -> [batch, -1, seq, 8]: -1 = batch*2*2*seq*8 / (batch*seq*8) = 4
    reshapes = [n for n in typed.graph.nodes if n.op_type == "Reshape"]
    assert {repr(n.outputs[0].shape) for n in reshapes} == \
        {"(SymInt(batch), SymInt(4), SymInt(seq), SymInt(8))"}


def _vectors(nodes: list[onnx.NodeProto], dims: list[int | str | None],
             initializers: list[TensorProto] = ()) -> ShapeVectors:
    graph = helper.make_graph(nodes, "g", [], [], list(initializers))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    return ShapeVectors(graph, {"x": x})


def test_each_op_carries_the_shape_as_the_rules_read_it() -> None:
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Shape", ["x"], ["tail"], start=-2),
             helper.make_node("Slice", ["s", "minus_three", "big"], ["last3"]),
             helper.make_node("Gather", ["s", "minus_one"], ["picked"]),
             helper.make_node("Cast", ["s"], ["as_int32"], to=TensorProto.INT32),
             helper.make_node("Cast", ["s"], ["as_float"], to=TensorProto.FLOAT),
             helper.make_node("Squeeze", ["picked"], ["scalar"]),
             helper.make_node("Unsqueeze", ["scalar", "zero"], ["vector"]),
             helper.make_node("Reshape", ["scalar", "minus_one"], ["flat"])]
    vectors = _vectors(nodes, ["b", 3, "s", 8], [
        _ints("minus_three", [-3]), _ints("big", [2**62]), _ints("minus_one", [-1]),
        _ints("zero", [0])])
    assert vectors.target("s") == ["b", 3, "s", 8]
    assert vectors.target("tail") == ["s", 8]  # Shape's start counts from the end
    assert vectors.target("last3") == [3, "s", 8]  # ends past the length are clamped
    assert vectors.target("picked") == [8]
    assert vectors.target("as_int32") == ["b", 3, "s", 8]
    assert vectors.target("as_float") is None  # a float cast is no shape
    assert vectors.target("scalar") is None  # a scalar is no target
    assert vectors.target("vector") == [8]
    assert vectors.target("flat") == [8]


@pytest.mark.parametrize("dims", [["b", None, 8], ["b", "unk__3", 8], ["b", "Min(64, s)", 8]])
def test_a_dim_onnx_could_not_name_ends_the_reading(dims: list[int | str | None]) -> None:
    # unknown, onnx's placeholder, or an expression (seq_dims.py): left to the engines
    vectors = _vectors([helper.make_node("Shape", ["x"], ["s"])], dims)
    assert vectors.target("s") is None


def test_a_slice_with_a_step_or_another_axis_is_not_read() -> None:
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "two", "zero", "two"], ["stepped"]),
             helper.make_node("Slice", ["s", "zero", "two", "one"], ["axis1"])]
    vectors = _vectors(nodes, ["b", 3, "s"], [_ints("zero", [0]), _ints("one", [1]),
                                              _ints("two", [2])])
    assert vectors.target("stepped") is None
    assert vectors.target("axis1") is None
