"""The arena's best fit read off several unions' starts and ends sorted apart
(passes/arena.py `_gap_fit`) is the best fit over their runs sorted as (offset, end) pairs
(`_best_fit`, the loop the reference plan spells out): random unions that overlap, touch,
repeat one another and hold many runs (the vectorized path), at three alignments; and the
plan and the order search with the liveness's model-order sweep shared (its events and
integer totals) equal them with the model's own sweep."""

from __future__ import annotations

import random

import pytest

from graphmem.passes.arena import _VECTORIZE_FROM, _best_fit, _gap_fit, plan_arena
from graphmem.passes.memory_model import (
    build_memory_model,
    find_buffers,
    lifetimes,
    live_profile,
    step_events,
    sweep_buffers,
)
from graphmem.passes.schedule import best_order
from tests.builders import sizes_of
from tests.helpers.graphs import random_dag, symbolic_random_dag


def random_union(rng: random.Random, runs: int, top: int) -> list[int]:
    """A boundary list: disjoint runs in offset order, touching ones joined."""
    cuts = sorted(rng.sample(range(top), 2 * runs))
    bounds: list[int] = []
    for start, end in zip(cuts[::2], cuts[1::2], strict=True):
        if bounds and bounds[-1] == start:
            bounds[-1] = end
        else:
            bounds += [start, end]
    return bounds


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("alignment", [1, 8, 64])
def test_gap_fit_is_the_pairs_best_fit(seed: int, alignment: int) -> None:
    rng = random.Random(seed)
    for _ in range(100):
        many = rng.random() < 0.1  # past _VECTORIZE_FROM runs: the numpy path
        unions = [random_union(rng, rng.randint(1, 2 * _VECTORIZE_FROM if many else 5), 3000)
                  for _ in range(rng.randint(0, 5))]
        if unions and rng.random() < 0.2:
            unions.append(list(rng.choice(unions)))  # the same runs twice
        size = rng.randint(1, 400)
        flat = [b for union in unions for b in union]
        pairs = sorted(zip(flat[::2], flat[1::2], strict=True))
        kept = list(flat)
        several = len(unions) > 1
        assert _gap_fit(flat, several, size, alignment) == _best_fit(pairs, size, alignment)
        assert flat == kept  # the runs are read, not changed


@pytest.mark.parametrize("seed", range(10))
def test_the_shared_model_order_sweep_plans_as_the_order_given(seed: int) -> None:
    graph = random_dag(seed, node_count=120)
    sizes = sizes_of(graph)
    sweep = sweep_buffers(find_buffers(graph), sizes)
    shared = build_memory_model(graph, sizes, {}, sweep)
    assert shared.swept_events is sweep.events and shared.swept_totals is sweep.totals
    alone = build_memory_model(graph, sizes, {})
    assert alone.swept_events is None and alone.swept_totals is None and alone == shared
    order = list(range(alone.node_count))
    # the liveness's totals are the integer sweep's, step for step
    assert list(shared.model_order_sweep[1]) == live_profile(alone, order)[0]
    assert plan_arena(shared) == plan_arena(alone) == plan_arena(alone, order)
    assert best_order(shared) == best_order(alone)
    # another order's sweep: its buffers serve, its events and totals do not
    other = sweep_buffers(sweep.buffers, sizes, [graph.nodes[i] for i in order[::-1]])
    model = build_memory_model(graph, sizes, {}, other)
    assert model.swept_events is None and model.swept_totals is None and model == alone


@pytest.mark.parametrize("seed", range(6))
def test_totals_of_other_sizes_are_not_shared(seed: int) -> None:
    graph = symbolic_random_dag(seed)
    sizes = sizes_of(graph)
    sweep = sweep_buffers(find_buffers(graph), sizes)
    assert sweep.numbers is None and sweep.totals is None  # polynomials: no numbers
    model = build_memory_model(graph, sizes, {"batch": 3, "seq": 2}, sweep)
    assert model.swept_events is sweep.events and model.swept_totals is None
    bound = {name: size.bind({"batch": 3, "seq": 2}) if size is not None else None
             for name, size in sizes.items()}
    bound_sweep = sweep_buffers(sweep.buffers, bound)
    # the same buffers swept at the model's dims: numbers, shared
    model = build_memory_model(graph, sizes, {"batch": 3, "seq": 2}, bound_sweep)
    assert model.swept_totals is bound_sweep.totals
    assert list(model.model_order_sweep[1]) == live_profile(model, range(model.node_count))[0]
    # swept at other dims: the numbers differ, the model's own sweep is made
    other = {name: size.bind({"batch": 4, "seq": 2}) if size is not None else None
             for name, size in sizes.items()}
    model = build_memory_model(graph, sizes, {"batch": 3, "seq": 2},
                               sweep_buffers(sweep.buffers, other))
    assert model.swept_totals is None


@pytest.mark.parametrize("seed", range(10))
def test_lifetimes_in_any_order_are_the_steps_walked(seed: int) -> None:
    graph = random_dag(seed, node_count=80)
    model = build_memory_model(graph, sizes_of(graph), {})
    rng = random.Random(seed)
    shuffled = list(range(model.node_count))
    rng.shuffle(shuffled)  # not topological: lifetimes are read off any order's events
    # and the model order's, where a buffer starts at its producer (no inverse permutation)
    for order in (shuffled, list(range(model.node_count))):
        events = step_events(model, order)
        step_of = {node: step for step, node in enumerate(order)}
        expected = [(step_of[model.producer[b]], max(step_of[model.producer[b]], last))
                    for b, last in enumerate(events.last_step)]
        assert lifetimes(model, order, events) == expected
