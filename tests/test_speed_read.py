"""The reading stage's per-node work (graphmem/frontends/onnx/): what onnx's inference passes
are given, and what each distinct type or dim costs; every answer as before."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.frontends.onnx import infer
from graphmem.frontends.onnx.importer import import_onnx

_SCOPES = "pkg.torch.onnx.name_scopes"


def _dynamo_style(path: Path) -> Path:
    """Two Relus as the dynamo exporter writes them: each with its stack trace, fx node and
    class hierarchy beside its name scopes, and a doc string."""
    nodes = []
    for index, (source, module) in enumerate((("x", "block.0"), ("h", "block.1"))):
        node = helper.make_node("Relu", [source], ["h" if index == 0 else "y"],
                                name=f"node_relu_{index}", doc_string="traced here")
        helper.set_metadata_props(node, {
            "pkg.torch.onnx.stack_trace": 'File "model.py", line 12, in forward\n' * 20,
            "pkg.torch.onnx.fx_node": "%relu : call_function[target=aten.relu]",
            _SCOPES: f"['', '{module}', 'relu_{index}']",
            "namespace": f": Model/{module}: Relu/relu",
        })
        nodes.append(node)
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_inference_is_given_the_nodes_without_what_it_never_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[onnx.ModelProto] = []
    run = infer._onnx_inference

    def spy(model: onnx.ModelProto | bytes, warnings: list[str]) -> onnx.ModelProto | None:
        # the first pass is given the model's bytes (infer.py _bytes_without_value_info)
        given.append(onnx.ModelProto.FromString(model) if isinstance(model, bytes) else model)
        return run(model, warnings)

    monkeypatch.setattr(infer, "_onnx_inference", spy)
    imported = import_onnx(_dynamo_style(tmp_path / "m.onnx"))
    assert given
    for model in given:  # only the name scopes, which module paths are read from
        assert all([p.key for p in node.metadata_props] == [_SCOPES] and not node.doc_string
                   for node in model.graph.node)
    assert [n.module_path for n in imported.graph.nodes] == ["block.0", "block.1"]
    # dropped once, as the file is read: onnxruntime's planner shapes and sessions read the
    # model as read, and plan without them
    assert imported.source is not None
    assert [p.key for p in imported.source.graph.node[0].metadata_props] == [_SCOPES]
    assert not imported.source.graph.node[0].doc_string
