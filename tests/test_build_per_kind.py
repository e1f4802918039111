"""build.py's IR made per kind, checked against the one-by-one way it was made before:
initializers' dtype, dims and role made once per distinct (element type, dims), nodes linked
by Graph.append_new instead of add_node, a node's module path read with its name read once.
Random graphs and the samples."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.core.ir import DType, Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.frontends.onnx import build
from graphmem.frontends.onnx.build import build_graph
from graphmem.frontends.onnx.importer import import_onnx
from graphmem.frontends.onnx.module_paths import module_path_of
from graphmem.frontends.onnx.read import NAME_SCOPES

SAMPLES = sorted((Path(__file__).resolve().parent.parent / "samples").glob("*.onnx"))


def _random_nodes(seed: int) -> tuple[list[Value], list[tuple[str, list[int | None]]]]:
    """Values and nodes reading earlier ones (repeats and missing optional inputs too)."""
    rng = random.Random(seed)
    count = rng.randint(1, 30)
    sources = rng.randint(1, 5)
    nodes = []
    for index in range(count):
        known = sources + index
        inputs: list[int | None] = [rng.randrange(known) for _ in range(rng.randint(0, 5))]
        if inputs and rng.random() < 0.3:
            inputs.insert(rng.randrange(len(inputs)), None)
        if inputs and rng.random() < 0.3:
            inputs.append(inputs[0])
        nodes.append((f"n{index}", inputs))
    return [Value(f"s{i}", DType.FLOAT32, (), Role.INPUT) for i in range(sources)], nodes


def _linked(seed: int, new: bool) -> Graph:
    sources, specs = _random_nodes(seed)
    graph = Graph("g", [], {v.name: v for v in sources}, list(sources), [])
    made = list(sources)
    for name, inputs in specs:
        output = Value(name + ".out", DType.FLOAT32, (), Role.ACTIVATION)
        graph.values[output.name] = output
        node = Node(name, "Op", [None if i is None else made[i] for i in inputs], [output])
        if new:
            graph.append_new(node)
        else:
            graph.add_node(node)
        made.append(output)
    return graph


def _links(graph: Graph) -> list[tuple[str, str | None, list[str]]]:
    return [(v.name, v.producer.name if v.producer else None, [n.name for n in v.consumers])
            for v in graph.values.values()]


@pytest.mark.parametrize("seed", range(200))
def test_append_new_links_as_add_node(seed: int) -> None:
    old, new = _linked(seed, new=False), _linked(seed, new=True)
    new.check()
    assert _links(new) == _links(old)
    assert [n.name for n in new.nodes] == [n.name for n in old.nodes]


def _old_initializer(tensor: TensorProto) -> tuple[DType, tuple[SymInt, ...], Role]:
    """The initializer's value as build.py made it one by one before."""
    dtype = build._DTYPES.get(tensor.data_type, DType.UNKNOWN)
    shape = tuple(SymInt.const(int(d)) for d in tensor.dims)
    numel = 1
    for d in tensor.dims:
        numel *= int(d)
    role = Role.PARAMETER if dtype.is_float and numel > 1 else Role.CONSTANT
    return dtype, shape, role


@pytest.mark.parametrize("seed", range(50))
def test_initializers_per_kind_as_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    types = [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.BOOL,
             TensorProto.STRING, TensorProto.DOUBLE, 0, 999]
    dims = [(), (1,), (2,), (0, 3), (4, 1), (2, 3), (1, 1, 1)]
    tensors = [TensorProto(name=f"t{i}", data_type=rng.choice(types), dims=rng.choice(dims))
               for i in range(rng.randint(1, 60))]
    graph = helper.make_graph([], "g", [], [], tensors)
    values: dict[str, Value] = {}
    build._add_initializers(graph, values)
    assert list(values) == [t.name for t in tensors]
    shapes: dict[tuple[int, tuple[int, ...]], object] = {}
    for tensor in tensors:
        value = values[tensor.name]
        assert (value.dtype, value.shape, value.role) == _old_initializer(tensor)
        # values of one kind share their shape tuple
        assert shapes.setdefault((tensor.data_type, tuple(tensor.dims)),
                                 value.shape) is value.shape


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_samples_link_every_reader_in_order(sample: Path) -> None:
    # what add_node gave, node by node: each value lists its readers once, in node order
    graph = import_onnx(sample).graph
    graph.check()
    readers: dict[str, list[str]] = {}
    for node in graph.nodes:
        for value in dict.fromkeys(node.present_inputs):
            readers.setdefault(value.name, []).append(node.name)
    assert {v.name: [n.name for n in v.consumers] for v in graph.values.values()
            if v.consumers} == readers


def _named_nodes(seed: int) -> list[onnx.NodeProto]:
    rng = random.Random(seed)
    scopes = ["", "layer1", "layer1.0", "conv1", "downsample", "downsample.0", "_op"]
    nodes = []
    previous = "x"
    for index in range(rng.randint(1, 20)):
        parts = [rng.choice(scopes) for _ in range(rng.randint(0, 4))]
        name = rng.choice(["", f"n{index}", "/" + "/".join([*parts, "Relu"]),
                           "/".join(parts)])
        node = helper.make_node("Relu", [previous], [f"v{index}"], name=name)
        if rng.random() < 0.4:
            entry = node.metadata_props.add()
            entry.key = rng.choice([NAME_SCOPES, "other"])
            entry.value = repr(["", *parts, "_relu"])
        if rng.random() < 0.2:
            entry = node.metadata_props.add()
            entry.key, entry.value = NAME_SCOPES, repr(["", "tail", "relu"])
        nodes.append(node)
        previous = f"v{index}"
    return nodes


@pytest.mark.parametrize("seed", range(100))
def test_module_paths_as_module_path_of(seed: int) -> None:
    nodes = _named_nodes(seed)
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, [2])])
    built = build_graph(helper.make_model(graph), "g", {})
    assert [n.module_path for n in built.nodes] == [module_path_of(p) for p in nodes]


def _old_attributes(proto: onnx.NodeProto) -> dict[str, object]:
    """build.py's attributes as read before: onnx.helper.get_attribute_value of each."""
    result: dict[str, object] = {}
    for attribute in proto.attribute:
        if attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS,
                              onnx.AttributeProto.TENSOR, onnx.AttributeProto.SPARSE_TENSOR):
            continue
        value = helper.get_attribute_value(attribute)
        result[attribute.name] = tuple(value) if isinstance(value, list) else value
    return result


@pytest.mark.parametrize("seed", range(100))
def test_attributes_read_as_get_attribute_value(seed: int) -> None:
    rng = random.Random(seed)
    makers = [lambda: rng.randint(-2**40, 2**40), lambda: rng.uniform(-1e30, 1e30),
              lambda: rng.choice(["", "same", "ünï"]),
              lambda: [rng.randint(-5, 5)] * rng.randint(1, 4),
              lambda: [rng.random()] * rng.randint(1, 3), lambda: ["a", "bc"][:rng.randint(1, 2)],
              lambda: helper.make_tensor("t", TensorProto.FLOAT, [1], [1.0]),
              lambda: onnx.TypeProto(), lambda: [onnx.TypeProto()],
              lambda: [helper.make_tensor("t", TensorProto.INT64, [1], [2])],
              lambda: helper.make_graph([], "b", [], [])]
    kwargs: dict[str, Any] = {f"a{i}": rng.choice(makers)() for i in range(rng.randint(1, 6))}
    node = helper.make_node("Custom", ["x"], ["y"], domain="d", **kwargs)
    if rng.random() < 0.2:
        empty = node.attribute.add()
        empty.name, empty.type = "undefined", onnx.AttributeProto.UNDEFINED
    attributes, has_graph = build._attributes(node)
    expected = _old_attributes(node)
    assert attributes == expected
    assert [type(v) for v in attributes.values()] == [type(v) for v in expected.values()]
    assert has_graph == any(a.type == onnx.AttributeProto.GRAPH for a in node.attribute)


def test_a_reference_attribute_is_refused_as_onnx_refuses_it() -> None:
    node = helper.make_node("Relu", ["x"], ["y"])
    axis = node.attribute.add()
    axis.name, axis.type, axis.ref_attr_name = "axis", onnx.AttributeProto.INT, "outer"
    with pytest.raises(ValueError, match="reference attribute"):
        build._attributes(node)


@pytest.mark.parametrize("seed", range(30))
def test_constant_values_per_kind_as_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    nodes = []
    for i in range(rng.randint(1, 40)):
        dims = rng.choice([(), (1,), (3,), (2, 2), (0,)])
        data_type = rng.choice([TensorProto.INT64, TensorProto.FLOAT, TensorProto.BOOL, 999])
        tensor = TensorProto(name=f"c{i}", data_type=data_type, dims=dims)
        kind = rng.random()
        if kind < 0.7:
            nodes.append(helper.make_node("Constant", [], [f"c{i}"], value=tensor))
        elif kind < 0.85:
            nodes.append(helper.make_node("Constant", [], [f"c{i}"], value_ints=[1, 2, 3]))
        else:
            nodes.append(helper.make_node("Constant", [], [f"c{i}"], value_int=4))
    graph = helper.make_graph(nodes, "g", [], [])
    values: dict[str, Value] = {}
    build._add_constant_nodes(graph, values)
    for node in nodes:
        value = values[node.output[0]]
        attribute = node.attribute[0]
        expected: tuple[DType, tuple[SymInt | None, ...]]
        if attribute.type == onnx.AttributeProto.TENSOR:
            expected = (build._DTYPES.get(attribute.t.data_type, DType.UNKNOWN),
                        tuple(SymInt.const(int(d)) for d in attribute.t.dims))
        else:
            expected = build._constant_type(node, {})[:2]
        assert (value.dtype, value.shape, value.role) == (*expected, Role.CONSTANT)
