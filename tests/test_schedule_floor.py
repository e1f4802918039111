"""The last step's floor under every order's peak (graphmem/passes/schedule.py
`last_step_floor`): below the best peak of any order, and the searches it skips would not
have found a lower peak (the answer is the same with and without it)."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from graphmem.core.ir import Graph, Role
from graphmem.passes import schedule
from graphmem.passes.memory_model import MemoryModel, build_memory_model, order_peak
from graphmem.passes.schedule import best_order, dependency_graph, last_step_floor
from tests.builders import GraphBuilder, sizes_of


def _model(graph: Graph) -> MemoryModel:
    return build_memory_model(graph, sizes_of(graph), {})


def _with_outputs(seed: int, node_count: int) -> Graph:
    """A random DAG whose graph outputs are several of its tensors, not only the last."""
    rng = random.Random(seed)
    b = GraphBuilder(f"outputs{seed}")
    b.tensor("in", rng.randint(1, 50), Role.INPUT)
    available = ["in"]
    for index in range(node_count):
        inputs = rng.sample(available, k=min(len(available), rng.randint(1, 2)))
        outputs = {f"t{index}_{k}": rng.randint(1, 200) for k in range(rng.randint(1, 2))}
        b.node(f"n{index}", inputs, outputs)
        available.extend(outputs)
    made = available[1:]
    return b.build(rng.sample(made, k=rng.randint(1, len(made))))


def test_fanned_out_outputs_end_at_the_floor() -> None:
    # in (5) -> three Relus making graph outputs of 10, 20 and 30: whatever runs last, all
    # three outputs are live then, on top of the input: (5 + 10 + 20 + 30) float32 elements
    # = 65 * 4 = 260 bytes
    b = GraphBuilder()
    b.tensor("in", 5, Role.INPUT)
    for name, size in (("a", 10), ("b", 20), ("c", 30)):
        b.node(f"make_{name}", ["in"], {name: size})
    model = _model(b.build(["a", "b", "c"]))
    assert last_step_floor(model) == 260 == order_peak(model, range(3))[0]


@pytest.mark.parametrize("seed", range(60))
def test_floor_is_below_the_best_order(seed: int) -> None:
    model = _model(_with_outputs(seed, random.Random(seed).randint(2, 7)))
    orders = nx.all_topological_sorts(dependency_graph(model))
    assert last_step_floor(model) <= min(order_peak(model, order)[0] for order in orders)


def test_skipped_searches_would_not_have_found_lower(monkeypatch: pytest.MonkeyPatch) -> None:
    floored = 0
    for seed in range(60):
        model = _model(_with_outputs(seed, 30 + seed))  # above the exact search's size
        pruned = best_order(model)
        floored += pruned.peak_bytes <= last_step_floor(model)
        with monkeypatch.context() as patch:
            patch.setattr(schedule, "last_step_floor", lambda model: -1)
            assert best_order(model) == pruned
    assert floored >= 5  # the floor did skip searches on some of these graphs
