"""A dynamo export before onnxscript's optimizer: Constant nodes written with `value_ints`
reach onnxruntime's rules as the tensors the spec defines (its Constant rule reads `value`
alone, and without the values the rules stopped on the whole model: graphmem/frontends/onnx/
value_types.py `constant_tensor`), and a dim made a vector by `Reshape(d, [-1])` is followed by
onnx's own inference as the Unsqueeze it is (scalar_reshapes.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.frontends.onnx import infer, scalar_reshapes
from graphmem.frontends.onnx.graph_index import GraphIndex
from graphmem.frontends.onnx.importer import import_onnx
from graphmem.frontends.onnx.seq_dims import SeqDims
from graphmem.frontends.onnx.value_types import constant_tensor


def test_list_and_scalar_attributes_are_the_spec_tensors() -> None:
    ints = helper.make_node("Constant", [], ["a"], value_ints=[3, -1])
    one = helper.make_node("Constant", [], ["b"], value_float=0.5)
    tensor = constant_tensor(ints)
    assert tensor is not None and numpy_helper.to_array(tensor).tolist() == [3, -1]
    assert numpy_helper.to_array(tensor).dtype == np.int64
    scalar = constant_tensor(one)
    assert scalar is not None and numpy_helper.to_array(scalar).shape == ()  # a 0-d float
    assert constant_tensor(helper.make_node("Constant", [], ["c"], value_string="x")) \
        is None


def _view_model(path: Path) -> Path:
    # x [batch, seq, 8] viewed as [batch, seq, 2, 4] as the dynamo exporter writes `view`:
    # each dim Squeezed out of Shape, Reshaped to [1] by a value_ints [-1], concatenated with
    # value_ints [2, 4]; onnx propagates no values through Reshape, so the rules compute the
    # target, and they need the Constants' values
    def dim(axis: int) -> list[onnx.NodeProto]:
        return [helper.make_node("Shape", ["x"], [f"s{axis}"], start=axis, end=axis + 1),
                helper.make_node("Squeeze", [f"s{axis}"], [f"d{axis}"]),
                helper.make_node("Reshape", [f"d{axis}", "minus_one"], [f"r{axis}"])]

    nodes = [helper.make_node("Constant", [], ["minus_one"], value_ints=[-1]),
             *dim(0), *dim(1),
             helper.make_node("Constant", [], ["tail"], value_ints=[2, 4]),
             helper.make_node("Concat", ["r0", "r1", "tail"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["viewed"]),
             helper.make_node("Relu", ["viewed"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


VIEWED = "(SymInt(batch), SymInt(seq), SymInt(2), SymInt(4))"


def test_a_reshape_target_built_from_value_ints_is_followed_by_the_rules(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(infer, "unsqueeze_scalar_reshapes", lambda graph, types, index: {})
    imported = import_onnx(_view_model(tmp_path / "m.onnx"))
    assert not imported.warnings, imported.warnings
    assert "onnxruntime" in imported.shape_inference  # the rules ran, and finished
    assert repr(imported.graph.values["y"].shape) == VIEWED


def test_a_dim_reshaped_to_a_vector_is_followed_by_onnx_alone(tmp_path: Path) -> None:
    imported = import_onnx(_view_model(tmp_path / "m.onnx"))
    assert imported.shape_inference == "onnx shape inference"  # no rules, the same shapes
    assert repr(imported.graph.values["y"].shape) == VIEWED
    # the graph keeps its Reshapes, and gains no initializer for the Unsqueeze's axes
    assert [n.op_type for n in imported.graph.nodes].count("Reshape") == 3
    assert [n.op_type for n in imported.graph.nodes].count("Unsqueeze") == 0
    assert scalar_reshapes.AXES not in imported.graph.values


def test_a_rotary_slice_ending_at_a_reshaped_dim_is_the_rules_min() -> None:
    # cos[:seq] as the dynamo exporter writes it: ends = Reshape(Cast(Squeeze(Shape(ids,
    # start=1, end=2))), value_ints [-1]), starts value_ints [0]: Min(4096, seq), as the rules
    nodes = [helper.make_node("Shape", ["ids"], ["s"], start=1, end=2),
             helper.make_node("Squeeze", ["s"], ["d"]),
             helper.make_node("Cast", ["d"], ["c"], to=TensorProto.INT64),
             helper.make_node("Constant", [], ["minus_one"], value_ints=[-1]),
             helper.make_node("Reshape", ["c", "minus_one"], ["end"]),
             helper.make_node("Constant", [], ["zero"], value_ints=[0]),
             helper.make_node("Slice", ["table", "zero", "end", "zero"], ["cut"])]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    graph = helper.make_graph(nodes, "g", [ids], [], [numpy_helper.from_array(
        np.zeros((4096, 8), np.float32), "table")])
    assert SeqDims(graph, {"ids": ids}).slice_dim(graph.node[-1], 4096) == "Min(4096, seq)"
    graph.node[4].input[1] = "zero"  # a Reshape to [0] is no vector of the one value
    assert SeqDims(graph, {"ids": ids}).slice_dim(graph.node[-1], 4096) is None


_ROOT = Path(__file__).resolve().parents[1]
_SAMPLES = sorted((_ROOT / "samples").glob("*.onnx"))
_DYNAMO = _ROOT / "benchmarks/.cache/llama_dynamo_unoptimized_150_torch2.13.0+cpu.onnx"


def _turned_both_ways(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Import `path` with every scalar-reshape turn made through the second pass's GraphIndex
    (the copy's nodes are the model's) and by the walk over the copy's nodes, checked equal;
    the count of Reshapes turned at each call."""
    turned: list[int] = []
    turn = scalar_reshapes.unsqueeze_scalar_reshapes

    def both(graph: onnx.GraphProto, types: dict[str, onnx.ValueInfoProto],
             index: GraphIndex | None = None) -> dict[str, onnx.NodeProto]:
        walked = onnx.GraphProto()
        walked.CopyFrom(graph)
        expected = turn(walked, types)
        found = turn(graph, types, index)
        assert index is not None and found == expected and graph == walked
        turned.append(len(found))
        return found

    monkeypatch.setattr(infer, "unsqueeze_scalar_reshapes", both)
    import_onnx(path)
    return turned


@pytest.mark.parametrize("path", _SAMPLES, ids=[p.name for p in _SAMPLES])
def test_scalar_reshapes_through_the_index_equal_the_walk(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _turned_both_ways(path, monkeypatch)


def test_scalar_reshapes_turned_through_the_index(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert sum(_turned_both_ways(_view_model(tmp_path / "m.onnx"), monkeypatch)) > 0


@pytest.mark.slow
def test_the_dynamo_decoders_scalar_reshapes_through_the_index(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if not _DYNAMO.exists():
        pytest.skip(f"{_DYNAMO.name} not in benchmarks/.cache"
                    " (benchmarks/speed_targets.py exports it there)")
    assert sum(_turned_both_ways(_DYNAMO, monkeypatch)) > 0
