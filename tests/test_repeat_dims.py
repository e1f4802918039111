"""Grouped-query attention written with Unsqueeze -> Tile -> Reshape(-1): onnx's inference
follows it (graphmem/frontends/onnx/repeat_dims.py), with the shapes onnxruntime's rules give."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.frontends.onnx import infer
from graphmem.frontends.onnx.importer import OnnxImport, import_onnx
from graphmem.frontends.onnx.repeat_dims import _divided, expand_tiles


def _ints(name: str, values: list[int]) -> TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def grouped_attention(layers: int = 3, unsqueeze_axis: int = 2) -> onnx.ModelProto:
    """`layers` times: k [batch, 2, seq, 8] repeated to 4 heads (Unsqueeze at axis 2, Tile by
    [1, 1, 2, 1, 1], Reshape [0, 4, -1, 8]), scores against q [batch, 4, seq, 8], the result
    folded back to [batch, seq, 32] and added to the stream."""
    nodes: list[onnx.NodeProto] = []

    def op(op_type: str, inputs: list[str], **attributes: object) -> str:
        output = f"{op_type.lower()}_{len(nodes)}"
        nodes.append(helper.make_node(op_type, inputs, [output], **attributes))
        return output

    x = "x"
    for _ in range(layers):
        q = op("Transpose", [op("Reshape", [x, "heads4"])], perm=[0, 2, 1, 3])
        k = op("Transpose", [op("Reshape", [op("Slice", [x, "zero", "sixteen", "last"]),
                                            "heads2"])], perm=[0, 2, 1, 3])
        tiled = op("Tile", [op("Unsqueeze", [k, "axis"]), "repeats"])
        k = op("Reshape", [tiled, "gqa"])
        scores = op("Softmax", [op("MatMul", [q, op("Transpose", [k], perm=[0, 1, 3, 2])])])
        attended = op("Transpose", [op("MatMul", [scores, k])], perm=[0, 2, 1, 3])
        x = op("Add", [x, op("Reshape", [attended, "merged"])])
    graph = helper.make_graph(
        nodes, "gqa",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 32])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
        [_ints("heads4", [0, 0, 4, 8]), _ints("heads2", [0, 0, 2, 8]),
         _ints("zero", [0]), _ints("sixteen", [16]), _ints("last", [-1]),
         _ints("axis", [unsqueeze_axis]), _ints("repeats", [1, 1, 2, 1, 1]),
         _ints("gqa", [0, 4, -1, 8]), _ints("merged", [0, 0, 32])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _shapes(imported: OnnxImport) -> dict[str, str]:
    return {name: repr(value.shape) for name, value in imported.graph.values.items()}


def _ort_nodes(imported: OnnxImport) -> int:
    engine = imported.shape_inference
    return int(engine.rpartition("(")[2].split()[0].replace(",", "")) if "(" in engine else 0


def test_grouped_attention_by_tile_is_followed_with_the_rules_shapes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "gqa.onnx"
    onnx.save(grouped_attention(), path)
    typed = import_onnx(path)
    with monkeypatch.context() as patch:  # the same import, every Tile left to the engines
        patch.setattr(infer, "expand_tiles", lambda model, index=None: {})
        patch.setattr(infer, "reshape_dims", lambda graph, inferred, index=None, types=None: [])
        untyped = import_onnx(path)
    assert _shapes(typed) == _shapes(untyped)
    assert [n.op_type for n in typed.graph.nodes] == [n.op_type for n in untyped.graph.nodes]
    # the repeated keys: [batch, 2, 1, seq, 8] tiled to [batch, 2, 2, seq, 8], then 4 heads
    reshaped = [n for n in typed.graph.nodes if n.op_type == "Reshape"][2]
    assert repr(reshaped.outputs[0].shape) == \
        "(SymInt(batch), SymInt(4), SymInt(seq), SymInt(8))"
    assert _ort_nodes(typed) < _ort_nodes(untyped)  # every layer followed by onnx, not one


def test_only_a_tile_of_axes_just_added_becomes_an_expand() -> None:
    # [1, 1, 2, 1, 1] repeats axis 2: an Expand only where the Unsqueeze added axis 2
    added, other = grouped_attention(1), grouped_attention(1, unsqueeze_axis=1)
    assert list(expand_tiles(added)) and [n.op_type for n in added.graph.node].count("Tile") == 0
    assert not expand_tiles(other)
    assert [n.op_type for n in other.graph.node].count("Tile") == 1


@pytest.mark.parametrize(("top", "bottom", "quotient"), [
    (["b", 2, 2, "s", 8], ["b", 4, 8], "s"),  # b*2*2*s*8 / (b*4*8) = s
    (["b", 4, 8], [2, "b"], 16),  # b*32 / (2*b) = 16
    (["b", "s", 8], ["b", 4], None),  # 2*s: a product, named the rules' own way
    (["b", 6], [4], None),  # 6*b / 4: not exact
    (["b", 8], ["s"], None),  # s is not in the numerator
])
def test_the_minus_one_divides_out_exactly(top: list[int | str], bottom: list[int | str],
                                           quotient: int | str | None) -> None:
    assert _divided(top, bottom) == quotient


def test_a_repeat_of_a_rotary_output_is_typed_by_onnx_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # benchmarks/helper_llama.py's decoder: k = rotary(k) * cos[:seq] ..., repeated by Tile;
    # the Reshape's input is typed only by the second pass (the rotary slice's dim), so its
    # -1 is divided out for a third: onnx types the whole graph, the engines load not at all
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import helper_llama  # benchmarks/ is not a package: found through sys.path

    path = helper_llama.write(tmp_path / "decoder.onnx", replace(
        helper_llama.WIDTHS, layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128,
        vocab=100, max_positions=64))
    typed = import_onnx(path)
    with monkeypatch.context() as patch:  # the same import, the repeats left to the engines
        patch.setattr(infer, "reshape_dims", lambda graph, inferred, index=None, types=None: [])
        untyped = import_onnx(path)
    assert typed.shape_inference == "onnx shape inference"
    assert _ort_nodes(untyped) > 0
    assert _shapes(typed) == _shapes(untyped)
    # [batch, 2, 2, seq, 16] -> Reshape [0, 4, -1, 16]: -1 = 2*2*seq*16 / (4*16) = seq
    repeats = [n for n in typed.graph.nodes if n.op_type == "Reshape"
               and n.inputs[0].producer is not None and n.inputs[0].producer.op_type == "Tile"]
    assert repeats and {repr(n.outputs[0].shape) for n in repeats} == \
        {"(SymInt(batch), SymInt(4), SymInt(seq), SymInt(16))"}
