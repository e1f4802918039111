"""Positions and rotary slices typed by graphmem for onnx's second pass (seq_dims.py): every
value's shape is what onnxruntime's rules give without the typing, on hand-built graphs and the
samples, and the rules run on fewer nodes; the cases the rules name otherwise are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.frontends.onnx import infer
from graphmem.frontends.onnx.importer import OnnxImport, import_onnx
from graphmem.frontends.onnx.read import alias_dim_params
from graphmem.frontends.onnx.seq_dims import SeqDims

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
TABLE_ROWS = 16


def _ints(name: str, values: list[int], scalar: bool = False) -> onnx.NodeProto:
    array = np.array(values[0] if scalar else values, dtype=np.int64)
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))


def _rotary_model(start: int = 0, step: int = 1, negate_end: bool = False,
                  end_op: str = "Unsqueeze", cast_output: bool = True) -> onnx.ModelProto:
    """`cos[start:seq:step][positions]` with positions `Range(0, seq, 1)` and seq read from
    the ids' shape (a decoder's rotary embedding); with `cast_output`, the slice cast to a
    graph output."""
    table = numpy_helper.from_array(np.zeros((TABLE_ROWS, 4), np.float32), "table")
    nodes = [  # the table a Constant node, as exporters write a rotary cache
        helper.make_node("Constant", [], ["table"], value=table),
        helper.make_node("Shape", ["ids"], ["shape"]),
        _ints("one_index", [1], scalar=True), _ints("zero_axis", [0]),
        helper.make_node("Gather", ["shape", "one_index"], ["seq"]),
        _end(end_op), _ints("one_vector", [1]), _ints("two_vector", [2]),
        _ints("starts", [start]), _ints("axes", [0]), _ints("steps", [step]),
        _ints("zero", [0], scalar=True), _ints("one", [1], scalar=True),
    ]
    if negate_end:
        nodes.append(helper.make_node("Neg", ["end"], ["end_used"]))
    else:
        nodes.append(helper.make_node("Cast", ["end"], ["end_used"], to=TensorProto.INT64))
    nodes += [
        helper.make_node("Slice", ["table", "starts", "end_used", "axes", "steps"], ["cos"]),
        helper.make_node("Cast", ["cos"], ["cos_out"], to=TensorProto.FLOAT),
        helper.make_node("Range", ["zero", "seq", "one"], ["positions"]),
        helper.make_node("Unsqueeze", ["positions", "zero_axis"], ["position_ids"]),
        helper.make_node("Gather", ["cos", "position_ids"], ["picked"]),
        helper.make_node("Mul", ["picked", "hidden"], ["rotated"]),
    ]
    graph = helper.make_graph(
        nodes, "rotary",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", 4])],
        [helper.make_tensor_value_info("rotated", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("cos_out", TensorProto.FLOAT, None)])
    if not cast_output:
        graph.output.pop()
        graph.node.remove(next(n for n in graph.node if n.output[0] == "cos_out"))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _end(op: str) -> onnx.NodeProto:
    """The slice's end: seq as a one-element vector, written as exporters write it (Unsqueeze
    of the gathered dim) or as a graph written by hand may (a Slice of the shape vector, or
    Shape with start and end)."""
    if op == "Unsqueeze":
        return helper.make_node(op, ["seq", "zero_axis"], ["end"])
    if op == "Slice":
        return helper.make_node(op, ["shape", "one_vector", "two_vector"], ["end"])
    if op == "Shape":
        return helper.make_node(op, ["ids"], ["end"], start=1, end=2)
    return helper.make_node(op, ["seq"], ["end"])


def _shapes(imported: OnnxImport) -> dict[str, str]:
    return {name: repr(v.shape) for name, v in imported.graph.values.items()}


def _import_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[OnnxImport, OnnxImport]:
    """The import as it is, and with graphmem's typing of positions and slices turned off."""
    typed = import_onnx(path)
    with monkeypatch.context() as patch:
        patch.setattr(SeqDims, "slice_dim", lambda self, node, length: None)
        patch.setattr(SeqDims, "range_dim", lambda self, node: None)
        untyped = import_onnx(path)
    return typed, untyped


def _ort_nodes(imported: OnnxImport) -> int:
    engine = imported.shape_inference
    return int(engine.rpartition("(")[2].split()[0].replace(",", "")) if "(" in engine else 0


def _seq_dims_of(model: onnx.ModelProto) -> tuple[SeqDims, dict[str, onnx.NodeProto]]:
    alias_dim_params(model.graph)
    first = infer._onnx_inference(model, [])
    assert first is not None
    return (SeqDims(model.graph, infer._types_of(first.graph)),
            {node.op_type: node for node in model.graph.node})


@pytest.mark.parametrize("end_op", ["Unsqueeze", "Slice", "Shape"])
def test_the_rotary_slice_and_positions_get_the_rules_names(end_op: str) -> None:
    seq, nodes = _seq_dims_of(_rotary_model(end_op=end_op))
    # the rules' Min(n, s) for cos[:seq] (n literal, s the declared dim), s for Range(0, s, 1)
    assert seq.slice_dim(nodes["Slice"], TABLE_ROWS) == f"Min({TABLE_ROWS}, gm__dim1)"
    assert seq.range_dim(nodes["Range"]) == "gm__dim1"
    assert seq.slice_dim(nodes["Slice"], 0) is None  # the rules simplify Min(0, s) to 0


@pytest.mark.parametrize("case", [{"start": 1}, {"step": 2}, {"negate_end": True}])
def test_other_slices_are_left_to_the_rules(case: dict) -> None:
    seq, nodes = _seq_dims_of(_rotary_model(**case))
    assert seq.slice_dim(nodes["Slice"], TABLE_ROWS) is None


@pytest.mark.parametrize("op", ["Identity", "float Cast"])
def test_an_op_whose_rule_renames_the_value_is_not_followed(op: str) -> None:
    model = _rotary_model()  # Identity: the rules type its output, and name it afresh
    for node in model.graph.node:
        if node.output[0] == "end_used":
            renamer = helper.make_node("Identity", ["end"], ["end_used"]) if op == "Identity" \
                else helper.make_node("Cast", ["end"], ["end_used"], to=TensorProto.FLOAT)
            node.CopyFrom(renamer)
    seq, nodes = _seq_dims_of(model)
    assert seq.slice_dim(nodes["Slice"], TABLE_ROWS) is None


@pytest.mark.parametrize("case", [{}, {"cast_output": False}, {"start": 1}, {"step": 2},
                                  {"negate_end": True}, {"end_op": "Squeeze"},
                                  {"end_op": "Slice"}, {"end_op": "Shape"}])
def test_every_shape_is_the_rules_own(case: dict, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rotary.onnx"
    onnx.save(_rotary_model(**case), path)
    typed, untyped = _import_both(path, monkeypatch)
    assert _shapes(typed) == _shapes(untyped)
    if case in ({}, {"cast_output": False}, {"end_op": "Slice"}, {"end_op": "Shape"}):
        # beyond the table: Min(16, seq), not seq
        assert _shapes(typed)["cos"] == f"(SymInt(Min({TABLE_ROWS}, seq)), SymInt(4))"
        assert _shapes(typed)["positions"] == "(SymInt(seq),)"
        assert _ort_nodes(typed) < _ort_nodes(untyped)


def test_the_slice_no_part_node_reads_is_typed_by_onnx_alone() -> None:
    model = _rotary_model(cast_output=False)
    alias_dim_params(model.graph)
    first = infer._onnx_inference(infer._without_value_info(model), [])
    assert first is not None
    part = infer.unknown_part(infer._second_pass(model, first, {}), model.graph.input)
    assert {node.op_type for node in part.graph.node}.isdisjoint({"Slice", "Range"})


def test_a_part_reading_a_min_dim_computes_it() -> None:
    """The Cast (producer of a graph output, so in the part) reads the slice, whose dim onnx
    now names `Min(16, gm__dim1)`: the slice joins the part, the rules computing it as before
    (they would read that name as a new symbol)."""
    model = _rotary_model()
    alias_dim_params(model.graph)
    first = infer._onnx_inference(infer._without_value_info(model), [])
    assert first is not None
    second = infer._second_pass(model, first, {})
    types = infer._types_of(second.graph)
    assert types["cos"].type.tensor_type.shape.dim[0].dim_param == f"Min({TABLE_ROWS}, gm__dim1)"
    part = infer.unknown_part(second, model.graph.input)
    assert "Slice" in {node.op_type for node in part.graph.node}


@pytest.mark.parametrize("name", ["tiny_llama.onnx", "tiny_gpt.onnx", "gpt2.onnx",
                                  "tiny_llama.dynamo.onnx", "gpt2.dynamo.onnx"])
def test_the_samples_shapes_are_the_rules_own(name: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    typed, untyped = _import_both(SAMPLES / name, monkeypatch)
    assert _shapes(typed) == _shapes(untyped)
    assert _ort_nodes(typed) <= _ort_nodes(untyped)
    if name in ("tiny_gpt.onnx", "gpt2.onnx"):  # positions from Range(0, seq, 1)
        assert _ort_nodes(typed) < _ort_nodes(untyped)


def _hand_written_rotary() -> onnx.ModelProto:
    """`hidden * table[:seq]`: a rotary table (an initializer, as a graph written by hand
    holds it) cut to the sequence read as Shape(ids, start=1, end=2), broadcast against the
    sequence directly (no positions gathered from it)."""
    table = numpy_helper.from_array(np.zeros((TABLE_ROWS, 4), np.float32), "table")
    nodes = [helper.make_node("Shape", ["ids"], ["end"], start=1, end=2),
             helper.make_node("Slice", ["table", "starts", "end", "axes"], ["cos"]),
             helper.make_node("Mul", ["hidden", "cos"], ["rotated"]),
             helper.make_node("Relu", ["rotated"], ["y"])]
    graph = helper.make_graph(
        nodes, "hand_written_rotary",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [table, numpy_helper.from_array(np.array([0], np.int64), "starts"),
         numpy_helper.from_array(np.array([0], np.int64), "axes")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_a_slice_broadcast_against_the_sequence_is_followed_by_onnx(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the model runs only where Min(16, seq) == seq: the Mul and what follows are [batch, seq,
    # 4], typed by onnx in its second pass (no engine fallback); the slice is seq long, as
    # onnxruntime's rules merge it at the broadcast (the same import without graphmem's typing)
    path = tmp_path / "rotary.onnx"
    onnx.save(_hand_written_rotary(), path)
    imported = import_onnx(path)
    shapes = _shapes(imported)
    assert shapes["cos"] == "(SymInt(seq), SymInt(4))"
    assert shapes["rotated"] == shapes["y"] == "(SymInt(batch), SymInt(seq), SymInt(4))"
    assert not imported.warnings and _ort_nodes(imported) <= 1
    _, untyped = _import_both(path, monkeypatch)
    assert _shapes(untyped) == shapes
