"""A node's cost signature (passes/costs.py `_signature`, one flat tuple of numbers and ids)
groups nodes exactly as the signature by its definition does: the op, the attributes, and
per input its shape, dtype, role, view-ness and the first input that is the same tensor,
per output its shape, dtype and view-ness. Checked on random nodes over shared and separate
shape tuples, repeated and missing inputs, views, and on the samples."""

from __future__ import annotations

import random
from collections.abc import Hashable
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.core.ir import DType, Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.passes.costs import _Shared, _signature

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def reference_signature(node: Node) -> Hashable | None:
    """The signature as its docstring defines it, with shapes compared by value."""
    if _signature(node, _Shared()) is None:
        return None  # the gate (domains, backward, bodies) is not what is checked here
    first: dict[int, int] = {}
    inputs = tuple(None if v is None else (v.shape, v.dtype, v.role, v.alias_of is None,
                                           first.setdefault(id(v), index))
                   for index, v in enumerate(node.inputs))
    outputs = tuple((v.shape, v.dtype, v.alias_of is None) for v in node.outputs)
    return node.op_type, tuple(node.attributes.items()), inputs, outputs


def assert_same_grouping(nodes: list[Node]) -> None:
    shared = _Shared()
    fast = [_signature(node, shared) for node in nodes]
    slow = [reference_signature(node) for node in nodes]
    assert [key is None for key in fast] == [key is None for key in slow]
    # one fast key per reference key and one reference key per fast key: the same groups
    pairs = {(a, b) for a, b in zip(fast, slow, strict=True) if a is not None}
    assert len({a for a, _ in pairs}) == len({b for _, b in pairs}) == len(pairs)


def random_nodes(seed: int, count: int = 300) -> list[Node]:
    rng = random.Random(seed)
    batch = SymInt.symbol("batch")
    dims = [SymInt.const(4), SymInt.const(8), batch, None]
    shapes: list[tuple[SymInt | None, ...] | None] = [None]
    for _ in range(6):
        shapes.append(tuple(rng.choice(dims) for _ in range(rng.randint(0, 3))))
    values: list[Value] = []
    for index in range(40):
        shape = rng.choice(shapes)
        if shape is not None and rng.random() < 0.5:
            shape = tuple(list(shape))  # an equal shape in another tuple
        value = Value(f"v{index}", rng.choice([DType.FLOAT32, DType.FLOAT16, DType.INT64]),
                      shape, rng.choice([Role.ACTIVATION, Role.PARAMETER, Role.INPUT]))
        if values and rng.random() < 0.15:
            value.alias_of = rng.choice(values)
        values.append(value)
    attributes = [{}, {"axis": 1}, {"axis": 2}, {"perm": (1, 0)}]
    nodes = []
    for index in range(count):
        inputs: list[Value | None] = [None if rng.random() < 0.1 else rng.choice(values[:12])
                                      for _ in range(rng.randint(0, 3))]
        outputs = rng.sample(values[12:], rng.randint(1, 2))
        nodes.append(Node(f"n{index}", rng.choice(["Add", "Mul", "MatMul"]), inputs,
                          outputs, dict(rng.choice(attributes))))
    return nodes


@pytest.mark.parametrize("seed", range(20))
def test_random_nodes_group_as_the_definition(seed: int) -> None:
    assert_same_grouping(random_nodes(seed))


def test_repeated_and_missing_inputs_are_told_apart() -> None:
    x = Value("x", DType.FLOAT32, (SymInt.const(4),), Role.ACTIVATION)
    y = Value("y", DType.FLOAT32, x.shape, Role.ACTIVATION)
    out = Value("out", DType.FLOAT32, x.shape, Role.ACTIVATION)
    nodes = [Node("xx", "Add", [x, x], [out]), Node("xy", "Add", [x, y], [out]),
             Node("yx", "Add", [y, x], [out]), Node("x_", "Add", [x, None], [out]),
             Node("_x", "Add", [None, x], [out]), Node("x", "Add", [x], [out])]
    keys = [_signature(node, _Shared()) for node in nodes]
    # xy and yx read the same kinds of tensor; every other pair differs
    assert keys[1] == keys[2]
    assert len({keys[i] for i in (0, 1, 3, 4, 5)}) == 5
    assert_same_grouping(nodes)


@pytest.mark.parametrize("name", ["gpt2.onnx", "tiny_llama.onnx", "resnet50.onnx",
                                  "tiny_gpt.dynamo.onnx"])
def test_samples_group_as_the_definition(name: str) -> None:
    graph: Graph = analyze_onnx(SAMPLES / name, batch=2, plan=False).graph
    assert_same_grouping(list(graph.nodes))
