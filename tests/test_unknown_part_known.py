"""The onnx pass's fully-known verdicts judged once (read2, docs/speed.md): `fully_known_names`
inlined, its value-info verdicts shared by typed_by_onnx and unknown_part, and unknown_part's
walk over the nodes skipped when every name made is known, each equal to the computation it
replaces on random graphs (names given twice, unnamed outputs, Constants, onnx's `unk__N`)."""

from __future__ import annotations

import random

import onnx
from onnx import TensorProto, helper

from graphmem.frontends.onnx.unknown_part import _unknown_producers, unknown_part
from graphmem.frontends.onnx.value_types import fully_known, fully_known_names, typed_by_onnx

_DIMS = [2, 3, "seq", "batch", "unk__3", "unk__12", None]


def _info(name: str, rng: random.Random) -> onnx.ValueInfoProto:
    if rng.random() < 0.1:  # rank unknown
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
    dims = [rng.choice(_DIMS) for _ in range(rng.randint(0, 3))]
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _random_model(rng: random.Random) -> onnx.ModelProto:
    names = ["x"]
    nodes = []
    for index in range(rng.randint(1, 12)):
        out = f"v{index}" if rng.random() > 0.05 else ""
        if rng.random() < 0.05 and len(names) > 1:  # a name made twice: the walk's case
            out = rng.choice(names[1:])
        if rng.random() < 0.2:
            nodes.append(helper.make_node("Constant", [], [out or f"c{index}"],
                                          value=helper.make_tensor("t", TensorProto.INT64,
                                                                   [1], [2])))
            names.append(out or f"c{index}")
            continue
        extra = [f"w{index}"] if rng.random() < 0.3 else []
        nodes.append(helper.make_node("Split" if extra else "Relu", [rng.choice(names)],
                                      [out, *extra], **({"num_outputs": 2} if extra else {})))
        names.extend(n for n in (out, *extra) if n)
    made = [n for node in nodes for n in node.output if n]
    infos = [_info(rng.choice(made), rng) for _ in range(rng.randint(0, 2 * len(made)))]
    outputs = [_info(name, rng) for name in rng.sample(made, min(len(made), rng.randint(1, 2)))]
    graph = helper.make_graph(nodes, "g", [_info("x", rng)], outputs, value_info=infos)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _old_pending(graph: onnx.GraphProto, known: set[str]) -> list[int]:
    # unknown_part's walk before read2: every node but a Constant with an output not known
    outputs = [node.output for node in graph.node]
    return [index for index, node in enumerate(graph.node) if node.op_type != "Constant"
            and not all(name in known for name in outputs[index] if name)]


def test_fully_known_names_is_the_per_info_verdicts() -> None:
    rng = random.Random(7)
    for _ in range(300):
        infos = list(_random_model(rng).graph.value_info)
        assert fully_known_names(infos) == {i.name for i in infos if fully_known(i)}


def test_unknown_producers_equal_to_the_walk_over_every_node() -> None:
    rng = random.Random(11)
    for _ in range(300):
        graph = _random_model(rng).graph
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
        model = _random_model(rng)
        graph = model.graph
        known_infos = fully_known_names(graph.value_info)
        assert typed_by_onnx(graph, graph.input, None, known_infos) == \
            typed_by_onnx(graph, graph.input)
        shared = unknown_part(model, graph.input, known_infos)
        assert shared.SerializeToString() == \
            unknown_part(model, graph.input).SerializeToString()
