"""The onnx pass's fully-known verdicts judged once (read2, docs/speed.md): `fully_known_names`
inlined, its value-info verdicts shared by typed_by_onnx and unknown_part, and unknown_part's
walk over the nodes skipped when every name made is known, each equal to the computation it
replaces on random graphs (names given twice, unnamed outputs, Constants, onnx's `unk__N`)."""

from __future__ import annotations

import random

import onnx

from graphmem.frontends.onnx.unknown_part import _unknown_producers, unknown_part
from graphmem.frontends.onnx.value_types import fully_known, fully_known_names, typed_by_onnx
from tests.helpers.onnx_random import random_typed_model


def _old_pending(graph: onnx.GraphProto, known: set[str]) -> list[int]:
    # unknown_part's walk before read2: every node but a Constant with an output not known
    outputs = [node.output for node in graph.node]
    return [index for index, node in enumerate(graph.node) if node.op_type != "Constant"
            and not all(name in known for name in outputs[index] if name)]


def test_fully_known_names_is_the_per_info_verdicts() -> None:
    rng = random.Random(7)
    for _ in range(300):
        infos = list(random_typed_model(rng).graph.value_info)
        assert fully_known_names(infos) == {i.name for i in infos if fully_known(i)}


def test_unknown_producers_equal_to_the_walk_over_every_node() -> None:
    rng = random.Random(11)
    for _ in range(300):
        graph = random_typed_model(rng).graph
        types = {v.name: v for v in (*graph.value_info, *graph.output)}
        known = fully_known_names(types.values())
        nodes = list(graph.node)
        outputs = [node.output for node in nodes]
        producer = {name: index for index, names in enumerate(outputs) for name in names}
        assert _unknown_producers(nodes, outputs, producer, producer.keys() - known) == \
            _old_pending(graph, known)


def test_shared_verdicts_give_the_same_part_and_answer() -> None:
    rng = random.Random(3)
    for _ in range(300):
        model = random_typed_model(rng)
        graph = model.graph
        known_infos = fully_known_names(graph.value_info)
        assert typed_by_onnx(graph, graph.input, None, known_infos) == \
            typed_by_onnx(graph, graph.input)
        shared = unknown_part(model, graph.input, known_infos)
        assert shared.SerializeToString() == \
            unknown_part(model, graph.input).SerializeToString()
