"""The arena's best fit read off several unions' starts and ends sorted apart
(passes/arena.py `_gap_fit`) is the best fit over their runs sorted as (offset, end) pairs
(`_best_fit`, the loop the reference plan spells out): random unions that overlap, touch,
repeat one another and hold many runs (the vectorized path), at three alignments; and the
plan with the model order's sweep shared equals the plan of that order given explicitly."""

from __future__ import annotations

import random

import pytest

from graphmem.passes.arena import _VECTORIZE_FROM, _best_fit, _gap_fit, plan_arena
from graphmem.passes.memory_model import build_memory_model, find_buffers, lifetimes, step_events
from tests.builders import sizes_of
from tests.helpers.graphs import random_dag


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
        kept = [list(union) for union in unions]
        assert _gap_fit(unions, size, alignment) == _best_fit(pairs, size, alignment)
        assert unions == kept  # the index's own lists are read, not changed


@pytest.mark.parametrize("seed", range(10))
def test_the_shared_model_order_sweep_plans_as_the_order_given(seed: int) -> None:
    graph = random_dag(seed, node_count=120)
    sizes = sizes_of(graph)
    buffers = find_buffers(graph)
    events = step_events(buffers, range(len(graph.nodes)))
    shared = build_memory_model(graph, sizes, {}, buffers, events)
    assert shared.swept_events is events
    alone = build_memory_model(graph, sizes, {})
    assert alone.swept_events is None and alone == shared
    order = list(range(alone.node_count))
    assert plan_arena(shared) == plan_arena(alone) == plan_arena(alone, order)
    # events of another order are not kept as the model order's
    reversed_events = step_events(buffers, order[::-1])
    assert build_memory_model(graph, sizes, {}, buffers, reversed_events).swept_events is None


@pytest.mark.parametrize("seed", range(10))
def test_lifetimes_in_any_order_are_the_steps_walked(seed: int) -> None:
    graph = random_dag(seed, node_count=80)
    model = build_memory_model(graph, sizes_of(graph), {})
    rng = random.Random(seed)
    order = list(range(model.node_count))
    rng.shuffle(order)  # not topological: lifetimes are read off any order's events
    events = step_events(model, order)
    step_of = {node: step for step, node in enumerate(order)}
    expected = [(step_of[model.producer[b]], max(step_of[model.producer[b]], last))
                for b, last in enumerate(events.last_step)]
    assert lifetimes(model, order, events) == expected
