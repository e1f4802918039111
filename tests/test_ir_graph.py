"""The IR keeps its own use-def links, and Graph.check() names every broken invariant."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from graphmem.core.ir import DType, Graph, GraphCheckError, Node, Role, Value
from graphmem.core.symbolic import SymInt
from tests.builders import GraphBuilder


def _value(name: str, role: Role = Role.ACTIVATION) -> Value:
    return Value(name, DType.FLOAT32, (SymInt.const(4),), role)


def small_graph() -> Graph:
    """x -> A -> a; (a, a, w) -> B -> b; b is the output."""
    b = GraphBuilder("small")
    b.tensor("x", 4, Role.INPUT)
    b.tensor("w", 4, Role.PARAMETER)
    b.node("A", ["x"], {"a": 4})
    b.node("B", ["a", "a", "w"], {"b": 4}, op_type="Mul")
    return b.build(["b"])


def test_add_node_links_both_ends_once_per_reader() -> None:
    graph = small_graph()
    a, b = graph.values["a"], graph.values["b"]
    node_a, node_b = graph.nodes
    assert a.producer is node_a and b.producer is node_b
    assert a.consumers == [node_b]  # B reads `a` twice: one consumer entry
    assert graph.values["x"].consumers == [node_a] and graph.values["x"].producer is None


def test_add_node_refuses_a_value_another_node_makes() -> None:
    graph = small_graph()
    with pytest.raises(GraphCheckError, match="a is already made by Relu A"):
        graph.add_node(Node("C", "Relu", [graph.values["x"]], [graph.values["a"]]))


def test_add_node_at_an_index() -> None:
    graph = small_graph()
    made = _value("early")
    graph.values["early"] = made
    graph.add_node(Node("first", "Fill", [], [made]), index=0)
    assert graph.nodes[0].name == "first" and made.producer is graph.nodes[0]
    graph.check()


def test_replace_input_keeps_both_ends() -> None:
    graph = small_graph()
    node_b = graph.nodes[1]
    a, x = graph.values["a"], graph.values["x"]
    node_b.replace_input(0, x)  # B still reads `a` as input 1
    assert node_b in a.consumers and node_b in x.consumers
    graph.check()
    node_b.replace_input(1, x)  # now B reads `a` no more, and `x` once as a consumer
    assert node_b not in a.consumers and x.consumers.count(node_b) == 1
    graph.check()
    node_b.replace_input(1, None)  # an optional input left out
    assert x.consumers.count(node_b) == 1 and node_b.inputs[1] is None
    graph.check()


def test_set_inputs_relinks_every_input() -> None:
    graph = small_graph()
    node_b = graph.nodes[1]
    node_b.set_inputs([graph.values["x"], None])
    assert graph.values["a"].consumers == [] and graph.values["w"].consumers == []
    assert graph.values["x"].consumers == [graph.nodes[0], node_b]
    graph.check()


def test_remove_node_unlinks_it() -> None:
    graph = small_graph()
    node_b = graph.nodes[1]
    graph.outputs = [graph.values["a"]]
    graph.remove_node(node_b)
    del graph.values["b"]
    assert graph.values["a"].consumers == [] and graph.values["w"].consumers == []
    graph.check()


def test_remove_node_refuses_a_node_whose_outputs_are_read() -> None:
    graph = small_graph()
    with pytest.raises(GraphCheckError, match="cannot remove Relu A: a is read by Mul B"):
        graph.remove_node(graph.nodes[0])
    graph.check()  # refused before any change


def test_add_output_links_the_producer() -> None:
    graph = small_graph()
    extra = _value("mean")
    graph.values["mean"] = extra
    graph.nodes[0].add_output(extra)
    assert extra.producer is graph.nodes[0] and graph.nodes[0].outputs[-1] is extra
    graph.check()
    with pytest.raises(GraphCheckError, match="mean is already made by Relu A"):
        graph.nodes[1].add_output(extra)


def _duplicate_consumer(graph: Graph) -> None:
    graph.values["a"].consumers.append(graph.nodes[1])


def _missing_consumer(graph: Graph) -> None:
    graph.values["w"].consumers.clear()


def _extra_consumer(graph: Graph) -> None:
    graph.values["w"].consumers.append(graph.nodes[0])


def _wrong_producer(graph: Graph) -> None:
    graph.values["b"].producer = graph.nodes[0]


def _stale_producer(graph: Graph) -> None:
    graph.values["w"].producer = graph.nodes[0]


def _made_twice(graph: Graph) -> None:
    graph.nodes[1].outputs.append(graph.values["a"])


def _out_of_order(graph: Graph) -> None:
    graph.nodes.reverse()


def _unregistered_value(graph: Graph) -> None:
    graph.nodes[0].inputs.append(_value("ghost"))


def _renamed_value(graph: Graph) -> None:
    graph.values["a"].name = "renamed"


def _duplicate_name(graph: Graph) -> None:
    graph.nodes[1].name = "A"


def _node_twice(graph: Graph) -> None:
    graph.nodes.append(graph.nodes[0])


def _input_with_producer(graph: Graph) -> None:
    graph.inputs.append(graph.values["a"])


def _held_by_a_stranger(graph: Graph) -> None:
    graph.values["a"].held_until = Node("elsewhere", "Relu", [], [])


def _foreign_origin(graph: Graph) -> None:
    graph.nodes[1].origin = Node("forward elsewhere", "Relu", [], [])


def _alias_cycle(graph: Graph) -> None:
    a, b = graph.values["a"], graph.values["b"]
    a.alias_of, b.alias_of = b, a


BROKEN: list[tuple[Callable[[Graph], None], str]] = [
    (_duplicate_consumer, "a lists a consumer twice"),
    (_missing_consumer, "Mul B reads w but is not among its consumers"),
    (_extra_consumer, "w lists Relu A as a consumer, which does not read it"),
    (_wrong_producer, "b is made by Mul B but its producer is Relu A"),
    (_stale_producer, "w's producer Relu A does not make it in this graph"),
    (_made_twice, "a is made twice, by Relu A and Mul B"),
    (_out_of_order, "Mul B reads a before Relu A makes it"),
    (_unregistered_value, "ghost is not the graph's value of that name"),
    (_renamed_value, "graph.values['a'] is a value named renamed"),
    (_duplicate_name, "two nodes are named A"),
    (_node_twice, "Relu A is in the graph twice"),
    (_input_with_producer, "graph input a is made by Relu A"),
    (_held_by_a_stranger, "a is held until Relu elsewhere, which is not a node of the graph"),
    (_foreign_origin, "Mul B's origin Relu forward elsewhere is not a node of the graph"),
    (_alias_cycle, "alias chain is a cycle"),
]


@pytest.mark.parametrize(("corrupt", "message"), BROKEN, ids=[c.__name__ for c, _ in BROKEN])
def test_check_names_each_broken_invariant(corrupt: Callable[[Graph], None],
                                           message: str) -> None:
    graph = small_graph()
    graph.check()
    corrupt(graph)
    with pytest.raises(GraphCheckError, match=re.escape(message)):
        graph.check()


def test_a_values_element_count_follows_its_shape_when_replaced() -> None:
    # numel and nbytes are remembered per shape object: a new shape gives new counts
    value = Value("x", DType.FLOAT16, (SymInt.symbol("batch"), SymInt.const(3)), Role.INPUT)
    first = value.numel
    assert value.numel is first and str(first) == "3*batch"
    assert value.nbytes is not None and value.nbytes.bind({"batch": 2}) == 12  # 2*3 * 2 B
    value.shape = (SymInt.const(4), SymInt.const(5))
    assert value.numel == 20 and value.nbytes == 40  # 4*5 elements * 2 B
    value.shape = (SymInt.const(4), None)
    assert value.numel is None and value.nbytes is None
