"""Small ONNX models built with onnx.helper for importer and CLI tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp_model(opset: int = 17, hidden: int = 64) -> onnx.ModelProto:
    """x[batch, 32] -> MatMul(32 x hidden) -> Add -> Relu -> MatMul(hidden x 10) -> y[batch, 10]."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((32, hidden)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(np.zeros(hidden, np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((hidden, 10)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu1"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2"),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
        initializer=[w1, b1, w2],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def save_with_external_data(model: onnx.ModelProto, path: Path) -> Path:
    """Save with every initializer in `<name>.data`; returns the data file's path."""
    location = path.name + ".data"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    return path.parent / location


def if_model() -> onnx.ModelProto:
    """y = If(cond) then (x + c) else (x * c): the bodies read outer `x` and `c`."""
    then_graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["t"], name="then_add")], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["batch", 8])])
    else_graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "c"], ["e"], name="else_mul")], "else", [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["batch", 8])])
    c = numpy_helper.from_array(np.ones((1, 8), np.float32), "c")
    nodes = [
        helper.make_node("Relu", ["x_in"], ["x"], name="pre"),
        helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_graph,
                         else_branch=else_graph),
    ]
    graph = helper.make_graph(
        nodes, "branchy",
        [helper.make_tensor_value_info("x_in", TensorProto.FLOAT, ["batch", 8]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        initializer=[c],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def custom_op_model() -> onnx.ModelProto:
    """Relu -> MyCustomOp (custom.domain) -> Relu: an op no rule knows."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r1"),
        helper.make_node("MyCustomOp", ["a"], ["b"], name="custom", domain="custom.domain"),
        helper.make_node("Relu", ["b"], ["y"], name="r2"),
    ]
    graph = helper.make_graph(
        nodes, "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("custom.domain", 1)])
