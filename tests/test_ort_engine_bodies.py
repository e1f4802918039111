"""onnxruntime's symbolic engine infers a control-flow body with only the outer values the body
reads (ort_engine.outer_values_read_only): every inferred type, in the main graph and in each
body, is what the engine's own rule (which hands a body every value known so far) gives."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

from graphmem.frontends.onnx import infer
from graphmem.frontends.onnx.ort_engine import outer_values_read_only
from tests import hostile_models as hostile


def _types(graph: onnx.GraphProto, where: str = "main") -> dict[str, str]:
    """Every typed value of `graph` and of the bodies inside it, by body and name."""
    found = {f"{where}/{info.name}": str(info.type)
             for info in [*graph.input, *graph.value_info, *graph.output]}
    for index, node in enumerate(graph.node):
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                found |= _types(attribute.g, f"{where}/{index}.{attribute.name}")
    return found


def _nested_if_passing_outer_values() -> onnx.ModelProto:
    """An If whose then-arm holds another If whose arms output an outer value unchanged
    (the engine's body with an output that is an outer value) and whose else-arm reshapes."""
    leaf = helper.make_graph([], "leaf", [], [hostile.info("x", None)])
    inner = helper.make_node("If", ["cond"], ["i"], then_branch=leaf, else_branch=leaf)
    then_arm = helper.make_graph([inner, helper.make_node("Relu", ["i"], ["a"])], "then", [],
                                 [hostile.info("a", None)])
    flat = helper.make_node("Flatten", ["x"], ["b"], axis=0)
    else_arm = helper.make_graph([flat], "else", [], [hostile.info("b", None)])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then_arm, else_branch=else_arm)
    unused = [hostile.info(f"u{i}", ("batch", i + 1)) for i in range(3)]
    return hostile.model([node], [hostile.info("x"), hostile._cond(), *unused],
                         [hostile.info("y", None)])


MODELS = {
    "if-chain": lambda: hostile.wide_if(30),
    "nested-if": _nested_if_passing_outer_values,
    "loop-scan": lambda: hostile.loop_growing_scan(4),
    "loop-carried": lambda: hostile.loop_trips(3),
    "if-beside-cos": lambda: hostile.constant_of_shape_with_if(100),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_bodies_see_only_what_they_read_with_the_same_types(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = MODELS[name]()
    engine_class = infer._symbolic_shape_infer_module().SymbolicShapeInference
    reads_only = _types(infer._ort_symbolic_inference(model, []).graph)
    handed = []
    monkeypatch.setattr(engine_class, "_onnx_infer_subgraph",
                        _counting(engine_class._onnx_infer_subgraph.__wrapped__, handed))
    everything = _types(infer._ort_symbolic_inference(model, []).graph)
    assert reads_only == everything
    assert handed  # the model has bodies: the rule ran on them


def _counting(rule, calls: list[int]):  # type: ignore[no-untyped-def]
    def counted(engine, node, subgraph, *args, **options):  # type: ignore[no-untyped-def]
        calls.append(len(engine.known_vi_))
        return rule(engine, node, subgraph, *args, **options)

    return counted


def test_a_body_is_handed_the_outer_values_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    engine_class = infer._symbolic_shape_infer_module().SymbolicShapeInference
    seen: list[set[str]] = []
    rule = engine_class._onnx_infer_subgraph.__wrapped__

    def spy(engine, node, subgraph, *args, **options):  # type: ignore[no-untyped-def]
        seen.append(set(engine.known_vi_))
        return rule(engine, node, subgraph, *args, **options)

    monkeypatch.setattr(engine_class, "_onnx_infer_subgraph", spy)
    outer_values_read_only(engine_class)  # on top of the spy (monkeypatch restores the class)
    infer._ort_symbolic_inference(hostile.wide_if(50), [])
    # If i's arms read t{i-1} (x for the first): one outer value each, of the 50 known
    assert len(seen) == 2 * 50
    assert seen[0] == {"x"} and {"t48"} in seen and max(map(len, seen)) == 1
