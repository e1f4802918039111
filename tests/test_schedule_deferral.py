"""The exact search runs nodes that only add pinned memory last, outside the search
(`passes/exact_schedule.py` `deferrable_nodes`): checked against brute force over every order."""


import networkx as nx
import pytest

from graphmem.core.ir import Graph, Role
from graphmem.passes.exact_schedule import deferrable_nodes, exact_order
from graphmem.passes.memory_model import MemoryModel, build_memory_model, is_topological, order_peak
from graphmem.passes.schedule import best_order, dependency_graph
from tests.builders import GraphBuilder, sizes_of
from tests.helpers.graphs import copies_and_random_dag


def model_of(graph: Graph) -> MemoryModel:
    return build_memory_model(graph, sizes_of(graph), {})


def copies_then_chain(copies: int) -> Graph:
    """`copies` copies of a weight (graph outputs, 2 floats each), then x -> A (100) -> B (100),
    as an exporter writes a convolution's weights as Identity nodes before the first layer."""
    b = GraphBuilder("copies")
    b.tensor("x", 1, Role.INPUT)
    b.tensor("w", 2, Role.PARAMETER)
    for k in range(copies):
        b.node(f"copy{k}", ["w"], {f"w{k}": 2})
    b.node("A", ["x"], {"a": 100})
    b.node("B", ["a"], {"y": 100})
    return b.build([*(f"w{k}" for k in range(copies)), "y"])


def test_weight_copies_run_after_the_peak_and_need_no_search() -> None:
    model = model_of(copies_then_chain(14))
    copies = tuple(range(14))
    assert deferrable_nodes(model) == copies  # A frees nothing either but B waits for it
    # residents x 4 + w 8 = 12 B. Model order: 14 copies (8 B each) = 112, then A: 124 + 400,
    # B: 124 + 400 + 400 = 924 <- peak (a frees after B).
    assert order_peak(model, range(16))[0] == 924
    # A, B first: B 12 + 400 + 400 = 812 <- peak; then a frees: 412, and the copies add
    # 8 each: the last holds 412 + 112 = 524
    # The search expands the 3 sets of {A, B} only, not 2^14 x 3 (a budget of 5 suffices).
    found = exact_order(model, upper_bound=924, max_states=5)
    assert found is not None and found[0] is not None
    assert found == ((14, 15, *copies), 812) and order_peak(model, found[0])[0] == 812
    assert best_order(model).peak_bytes == 812


def test_a_copy_that_a_later_node_reads_is_not_deferred() -> None:
    b = GraphBuilder("read")
    b.tensor("x", 1, Role.INPUT)
    b.tensor("w", 2, Role.PARAMETER)
    b.node("copy", ["w"], {"wc": 2})
    b.node("A", ["x", "wc"], {"y": 100})
    model = model_of(b.build(["wc", "y"]))
    # copy's output is a graph output (pinned) but A waits for it; A then frees nothing
    # (x is an input, wc is pinned), nothing waits for it: A alone is deferrable... and with
    # A deferred, copy is too (everything waiting for it is deferred)
    assert deferrable_nodes(model) == (0, 1)


@pytest.mark.parametrize("seed", range(60))
def test_exact_search_with_deferred_nodes_agrees_with_brute_force(seed: int) -> None:
    graph = copies_and_random_dag(seed)
    model = model_of(graph)
    orders = [tuple(o) for o in nx.all_topological_sorts(dependency_graph(model))]
    brute = min(order_peak(model, order)[0] for order in orders)
    found = exact_order(model, upper_bound=brute + 1)
    assert found is not None and found[0] is not None
    assert is_topological(model, found[0])
    assert found[1] == brute == order_peak(model, found[0])[0]
    # nothing beats the optimum: the known order is reported optimal
    assert exact_order(model, upper_bound=brute) == (None, brute)
