"""read_model_bodies says whether a node of the main graph holds a body (validation's walk
counted them), and alias_dim_params skips the nodes' walk where none does: the aliases and
the renamed model are the walk's, on the samples and on models with bodies, functions and
nested graphs."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.frontends.onnx.infer import _splittable
from graphmem.frontends.onnx.read import alias_dim_params, read_model_bodies
from graphmem.frontends.onnx.untrusted import subgraphs

SAMPLES = sorted((Path(__file__).resolve().parent.parent / "samples").glob("*.onnx"))


def _if_model(nested: bool, function: bool) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    inner_out = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["inner_dim", 3])
    body = helper.make_graph([helper.make_node("Relu", ["x"], ["b"])], "body", [], [inner_out])
    if nested:
        cond = helper.make_node("Constant", [], ["c2"], value=helper.make_tensor(
            "c2", TensorProto.BOOL, [], [True]))
        deeper = helper.make_node("If", ["c2"], ["b"], then_branch=body, else_branch=body)
        body = helper.make_graph([cond, deeper], "outer", [], [inner_out])
    nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
                 "c", TensorProto.BOOL, [], [True])),
             helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)]
    functions = []
    if function:
        functions.append(helper.make_function(
            "local", "f", ["i"], ["o"], [helper.make_node("Relu", ["i"], ["o"])],
            [helper.make_opsetid("", 17)]))
        nodes.append(helper.make_node("f", ["y"], ["z"], domain="local"))
        y = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 3])
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


def _any_body(graph: onnx.GraphProto) -> bool:
    return any(subgraphs(node) for node in graph.node)


def _aliased(model: onnx.ModelProto, bodies: bool) -> tuple[dict[str, str], bytes]:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    names = alias_dim_params(copy.graph, bodies)
    return names, copy.SerializeToString()


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_samples_bodies_flag_and_aliases(sample: Path) -> None:
    model, bodies, *_ = read_model_bodies(sample)
    assert bodies == _any_body(model.graph)
    assert _aliased(model, bodies) == _aliased(model, True)


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("function", [False, True])
def test_bodies_are_seen_where_nodes_hold_them(tmp_path: Path, nested: bool,
                                               function: bool) -> None:
    path = tmp_path / "if.onnx"
    onnx.save(_if_model(nested, function), path)
    model, bodies, *_ = read_model_bodies(path)
    assert bodies and _any_body(model.graph)
    assert _splittable(model, bodies) == _splittable(model) is False  # infer.py's split
    names, _ = _aliased(model, bodies)
    assert "inner_dim" in names.values()  # a body's dim: the walk found it


def test_a_graph_without_bodies_aliases_the_same(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])
    relu = helper.make_node("Relu", ["x"], ["y"])
    softmax = helper.make_node("Softmax", ["y"], ["s"], axis=1)  # an attribute, no body
    graph = helper.make_graph([relu, softmax], "g", [x], [y])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), path)
    model, bodies, *_ = read_model_bodies(path)
    assert not bodies
    assert _aliased(model, False) == _aliased(model, True)


def test_an_empty_graphs_attribute_counts_as_a_body(tmp_path: Path) -> None:
    # a graphs attribute holding no graph: no body to walk, but inference's _splittable
    # refuses the split on its kind alone, so the flag it now reads must say True
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    node = helper.make_node("Relu", ["x"], ["y"])
    node.attribute.append(onnx.AttributeProto(name="bodies", type=onnx.AttributeProto.GRAPHS))
    graph = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, ["batch", 3])])
    path = tmp_path / "graphs.onnx"
    onnx.save(helper.make_model(graph), path)
    model, bodies, *_ = read_model_bodies(path)
    assert bodies and not _splittable(model) and not _splittable(model, bodies)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_samples_splittable_from_the_flag(sample: Path) -> None:
    # the flag from validation's walk gives _splittable's answer without its own walk
    model, bodies, *_ = read_model_bodies(sample)
    assert _splittable(model, bodies) == _splittable(model)
