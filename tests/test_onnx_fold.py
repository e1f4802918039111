"""Constant shape arithmetic folded for shape inference (graphmem/frontends/onnx/fold.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphmem.core.symbolic import SymInt
from graphmem.frontends.onnx.fold import fold_constants, restore_nodes
from graphmem.frontends.onnx.importer import import_onnx


def _const(name: str, values: list[int]) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=f"c_{name}",
                            value=numpy_helper.from_array(np.array(values, np.int64)))


def mod_reshape_model() -> onnx.ModelProto:
    """x[batch, 6, 4] -> Reshape to Concat(Shape(x)[0:Mod(5, 4)], [Mod(26, 4) * 12]).

    As TorchScript exports nn.MultiheadAttention: a slice end comes from Mod(Constant,
    Constant), which onnxruntime's symbolic rules do not evaluate, so without folding the
    slice's length (and the Reshape's output) stays unknown. Mod(5, 4) = 1: the slice is
    [batch]; Mod(26, 4) = 2, 2 * 12 = 24: y is [batch, 24].
    """
    nodes = [
        _const("five", [5]), _const("four", [4]), _const("twenty_six", [26]),
        _const("twelve", [12]), _const("zero", [0]),
        helper.make_node("Mod", ["five", "four"], ["one"], name="mod"),
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Slice", ["shape", "zero", "one"], ["lead"], name="slice"),
        helper.make_node("Mod", ["twenty_six", "four"], ["two"], name="mod_2"),
        helper.make_node("Mul", ["two", "twelve"], ["width"], name="width"),
        helper.make_node("Concat", ["lead", "width"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(
        nodes, "fold",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_constant_chains_fold_and_the_model_keeps_its_nodes(tmp_path: Path) -> None:
    model = mod_reshape_model()
    folded = fold_constants(model)
    # the Mods and Mul(two, 12) have constant inputs only; Shape(x) and what reads it do not
    assert set(folded) == {"one", "two", "width"}
    assert [n.op_type for n in model.graph.node if n.output[0] in folded] == ["Constant"] * 3
    restore_nodes(model, folded)
    assert [n.op_type for n in model.graph.node] == [
        n.op_type for n in mod_reshape_model().graph.node]


def test_shapes_behind_constant_arithmetic_are_known(tmp_path: Path) -> None:
    path = tmp_path / "fold.onnx"
    onnx.save(mod_reshape_model(), path)
    imported = import_onnx(path)
    assert imported.graph.values["y"].shape == (SymInt.symbol("batch"), SymInt.const(24))
    assert "mod" in {n.name for n in imported.graph.nodes}  # the model's own node, not a Constant


def test_large_or_non_constant_inputs_are_never_folded() -> None:
    big = numpy_helper.from_array(np.ones(1000, np.int64), "big")
    graph = helper.make_graph(
        [helper.make_node("Add", ["big", "big"], ["sum"], name="add")], "g", [],
        [helper.make_tensor_value_info("sum", TensorProto.INT64, [1000])], initializer=[big])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert fold_constants(model) == {}


def _range_model(limit: int) -> onnx.ModelProto:
    scalars = [helper.make_node("Constant", [], [n], value=numpy_helper.from_array(
        np.array(v, np.int64))) for n, v in (("s", 0), ("l", limit), ("d", 1))]
    graph = helper.make_graph(
        [*scalars, helper.make_node("Range", ["s", "l", "d"], ["r"], name="range")], "g", [],
        [helper.make_tensor_value_info("r", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_range_is_folded_only_when_short() -> None:
    # Range(0, 8, 1) has 8 values: folded; Range(0, 2**40, 1) would be 8 TiB of int64: its
    # length is checked from the operands before numpy allocates anything
    assert set(fold_constants(_range_model(8))) == {"r"}
    assert fold_constants(_range_model(2**40)) == {}
