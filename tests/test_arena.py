"""Arena plans: the placement invariants on random graphs, and a plan worked by hand."""

import random

import pytest

from graphmem.core.ir import Role
from graphmem.passes.arena import ArenaPlan, _best_fit, _best_fit_vectorized, plan_arena
from graphmem.passes.memory_model import build_memory_model, order_peak
from graphmem.passes.schedule import greedy_order
from tests.builders import GraphBuilder, sizes_of
from tests.helpers.graphs import random_dag


def assert_valid(plan: ArenaPlan) -> None:
    placed = [p for p in plan.placements if p.nbytes > 0]
    for i, a in enumerate(placed):
        assert a.offset % plan.alignment == 0
        assert a.offset + a.nbytes <= plan.arena_bytes
        for b in placed[i + 1:]:
            if a.first_step <= b.last_step and b.first_step <= a.last_step:  # live together
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset, (a, b)
    assert plan.arena_bytes >= plan.live_activation_peak_bytes
    assert plan.no_reuse_bytes == sum(p.nbytes for p in plan.placements)


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("alignment", [1, 64])
def test_no_two_live_buffers_overlap(seed: int, alignment: int) -> None:
    graph = random_dag(seed, node_count=60)
    model = build_memory_model(graph, sizes_of(graph), {})
    for order in (list(range(model.node_count)), list(greedy_order(model))):
        plan = plan_arena(model, order, alignment)
        assert_valid(plan)
        # the live activation peak is the liveness peak less the residents
        assert plan.live_activation_peak_bytes == order_peak(model, order)[0] - model.resident_bytes


def test_long_lived_buffers_use_the_vectorized_search_and_stay_valid() -> None:
    # every tensor is read by the last node: all live together, so each placement meets
    # more placed buffers than the plain loop handles
    b = GraphBuilder("fan_in")
    b.tensor("x", 1, Role.INPUT)
    rng = random.Random(1)
    names = []
    for index in range(120):
        b.node(f"n{index}", ["x"], {f"t{index}": rng.randint(1, 500)})
        names.append(f"t{index}")
    b.node("sum", names, {"y": 1})
    graph = b.build(["y"])
    plan = plan_arena(build_memory_model(graph, sizes_of(graph), {}))
    assert_valid(plan)
    # at the last step everything is live at once: no gaps possible, arena = live peak
    assert plan.arena_bytes == plan.live_activation_peak_bytes == plan.no_reuse_bytes


@pytest.mark.parametrize("seed", range(50))
def test_vectorized_best_fit_matches_the_loop(seed: int) -> None:
    rng = random.Random(seed)
    placed = []
    for _ in range(rng.randint(1, 80)):
        offset = rng.randint(0, 5000)
        placed.append((offset, offset + rng.randint(1, 400)))
    placed.sort()
    size, alignment = rng.randint(1, 300), rng.choice([1, 8, 64])
    offsets = [p[0] for p in placed]
    ends = [p[1] for p in placed]
    import numpy as np

    expected = _best_fit(placed, size, alignment)
    assert _best_fit_vectorized(np.array(offsets), np.array(ends), size, alignment) == expected


def test_best_fit_by_hand() -> None:
    # A (400 B) and C (400 B) never live together; B (200 B) overlaps both.
    b = GraphBuilder("hand")
    b.tensor("x", 1, Role.INPUT)
    b.node("A", ["x"], {"a": 100})  # step 0: a
    b.node("B", ["a"], {"b": 50})  # step 1: a, b
    b.node("C", ["b"], {"c": 100})  # step 2: b, c
    b.node("D", ["c"], {"d": 1})  # step 3: c, d
    graph = b.build(["d"])
    plan = plan_arena(build_memory_model(graph, sizes_of(graph), {}))
    offsets = {p.name: p.offset for p in plan.placements}
    # largest first: a at 0; c (same size, later) meets only b (not placed yet) -> 0;
    # b meets a and c, both at [0, 400) -> 400; d meets c -> 400
    assert offsets == {"a": 0, "c": 0, "b": 400, "d": 400}
    assert plan.arena_bytes == 600 == plan.live_activation_peak_bytes
    assert plan.no_reuse_bytes == 400 + 200 + 400 + 4
    assert plan.fragmentation == 0.0


def test_fragmentation_when_best_fit_leaves_a_hole() -> None:
    b = GraphBuilder("hole")
    b.tensor("x", 1, Role.INPUT)
    b.node("N1", ["x"], {"b0": 200, "b2": 200, "b3": 200})  # step 0; b0 is never read
    b.node("N2", ["b3"], {"m": 1})  # step 1
    b.node("N3", ["b2", "m"], {"b1": 300})  # step 2
    graph = b.build(["b1"])
    plan = plan_arena(build_memory_model(graph, sizes_of(graph), {}))
    assert_valid(plan)
    # lifetimes: b0 [0,0], b2 [0,2], b3 [0,1], m [1,2], b1 [2,2]; largest first:
    # b1 1200 B -> 0; b0 800 B meets nothing placed -> 0; b2 800 B meets b1 and b0 -> 1200;
    # b3 800 B meets b0 [0,800) and b2 [1200,2000): the 400 B hole is too small -> 2000;
    # m 4 B meets b1, b2, b3 -> 2800. Arena 2804.
    assert {p.name: p.offset for p in plan.placements} == {
        "b0": 0, "b1": 0, "b2": 1200, "b3": 2000, "m": 2800}
    # live: step 0 b0 + b2 + b3 = 2400; step 1 b2 + b3 + m = 1604; step 2 b2 + m + b1 = 2004
    assert plan.arena_bytes == 2804 and plan.live_activation_peak_bytes == 2400
    assert plan.fragmentation == pytest.approx(404 / 2804)
