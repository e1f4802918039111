"""Node costs are computed once per signature (passes/costs.py `_signature`) and are the
same as each node's own: every sample, dims bound and free, and nodes that look alike but
differ where a cost reads them."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from graphmem import analyze_onnx
from graphmem.passes.costs import NodeCost, _node_cost, _Shared, _signature, compute_costs

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.mark.parametrize("name", ["gpt2.onnx", "tiny_llama.onnx", "resnet50.onnx",
                                  "tiny_gpt.dynamo.onnx", "mobilenet_v2.onnx"])
@pytest.mark.parametrize("batch", [None, 3])
def test_shared_costs_are_each_nodes_own(name: str, batch: int | None) -> None:
    analysis = analyze_onnx(SAMPLES / name, batch=batch, plan=False)
    graph, binding = analysis.graph, analysis.dims
    shared = compute_costs(graph, binding).nodes
    own = tuple(_node_cost(node, binding.bound) for node in graph.nodes)
    assert shared == own
    # the sharing is real: fewer signatures than nodes
    numbers = _Shared()
    signatures = {key for node in graph.nodes if (key := _signature(node, numbers)) is not None}
    assert len(signatures) < len(graph.nodes)
    # equal shapes in separate tuples get one number: the sharing does not hang on identity
    # (each shape also as a copy: the importer shares the tuples of equal initializer shapes)
    shapes = [v.shape for v in graph.values.values()]
    shapes += [tuple(list(s)) for s in shapes if s]
    assert len(numbers.shape_numbers) == len({numbers.shape(s) for s in shapes}) \
        == len(set(shapes)) < len({id(s) for s in shapes})


def test_alike_nodes_that_differ_where_the_cost_reads(tmp_path: Path) -> None:
    # Mul(x, x) reads x once (4 x 8 floats = 128 bytes); Mul(x, y) reads two inputs of that
    # shape (128 + 128), Mul(x, w) x and the weight w (128 + 128, 32 parameters); MatMul of
    # [4, 8] x [8, 8] = 4 * 8 * 8 = 256 MACs, of [4, 8] x [8, 2] 64: the same op and input
    # shape, different costs
    nodes = [helper.make_node("Mul", ["x", "x"], ["square"], name="square"),
             helper.make_node("Mul", ["x", "y"], ["both"], name="both"),
             helper.make_node("Mul", ["x", "w"], ["scaled"], name="scaled"),
             helper.make_node("MatMul", ["x", "m8"], ["wide"], name="wide"),
             helper.make_node("MatMul", ["x", "m2"], ["narrow"], name="narrow")]
    weights = [helper.make_tensor("w", TensorProto.FLOAT, [4, 8], [1.0] * 32),
               helper.make_tensor("m8", TensorProto.FLOAT, [8, 8], [1.0] * 64),
               helper.make_tensor("m2", TensorProto.FLOAT, [8, 2], [1.0] * 16)]
    graph = helper.make_graph(
        nodes, "alike", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 8])
                         for n in ("x", "y")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
         for n in ("square", "both", "scaled", "wide", "narrow")], weights)
    path = tmp_path / "alike.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    costs = {c.name: c for c in analyze_onnx(path, plan=False).costs.nodes}
    assert int(costs["square"].bytes_read) == 128 and int(costs["both"].bytes_read) == 256
    assert int(costs["scaled"].bytes_read) == 256
    assert costs["scaled"].param_count == 32 and costs["square"].param_count == 0
    assert int(costs["wide"].macs) == 256 and int(costs["narrow"].macs) == 64


def test_a_shared_cost_renamed_is_a_whole_node_cost() -> None:
    # the per-node copies of a shared cost are made by copying its fields as one dict
    # (costs.py `_renamed`): they must be NodeCosts like any other, field for field
    analysis = analyze_onnx(SAMPLES / "tiny_llama.onnx", batch=2, plan=False)
    graph, dims = analysis.graph, analysis.dims.bound
    for node, cost in zip(graph.nodes, compute_costs(graph, analysis.dims).nodes, strict=True):
        own = _node_cost(node, dims)
        assert type(cost) is NodeCost and vars(cost).keys() == {f.name for f in fields(NodeCost)}
        assert cost == own and hash(cost) == hash(own) and repr(cost) == repr(own)
        with pytest.raises(FrozenInstanceError):
            cost.name = "renamed"  # type: ignore[misc]
