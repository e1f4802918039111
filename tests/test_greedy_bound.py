"""A greedy pass that knows its peak as it runs, and stops once it cannot beat the best.

`greedy_search` tracks each step's live bytes (allocations in, last uses out) and returns
None as soon as a step reaches `below`. Checked against the plain computation: the same
order as the unbounded pass, its peak as `order_peak` sweeps it, and None exactly when that
peak is not below the bound; `best_order` as the plain loop over every key chooses it.
"""

import random

import pytest

from graphmem.core.ir import Graph
from graphmem.passes.memory_model import MemoryModel, build_memory_model, order_peak
from graphmem.passes.schedule import (
    GREEDY_KEYS,
    OrderSearch,
    best_order,
    greedy_order,
    greedy_search,
    greedy_start,
    last_step_floor,
)
from tests.builders import sizes_of
from tests.helpers.graphs import copies_and_random_dag, random_dag


def model_of(graph: Graph) -> MemoryModel:
    return build_memory_model(graph, sizes_of(graph), {})


def random_models(seed: int) -> list[MemoryModel]:
    """A random DAG, and one with weight copies (graph outputs: pinned, never freed)."""
    rng = random.Random(seed)
    return [model_of(random_dag(seed, node_count=rng.randint(1, 60))),
            model_of(copies_and_random_dag(seed))]


@pytest.mark.parametrize("seed", range(80))
def test_the_running_peak_is_order_peaks_and_the_bound_only_stops_a_losing_pass(
        seed: int) -> None:
    rng = random.Random(seed)
    for model in random_models(seed):
        start = greedy_start(model)
        for key in GREEDY_KEYS:
            order, peak = greedy_search(model, key) or ((), -2)
            assert order == greedy_order(model, key)
            assert peak == order_peak(model, order)[0]
            # bounds at, just above, just below the peak, and anywhere
            for below in (peak, peak + 1, peak - 1, rng.randint(0, 2 * peak + 1)):
                found = greedy_search(model, key, below=below)
                assert found == ((order, peak) if peak < below else None)
                # one start shared by the passes, as best_order shares it: never changed
                assert greedy_search(model, key, below=below, start=start) == found
                assert start == greedy_start(model)


def plain_best_order(model: MemoryModel) -> OrderSearch:
    """best_order's greedy stage the plain way: every key's whole order, swept afterwards."""
    start = tuple(range(model.node_count))
    best = OrderSearch(start, order_peak(model, start)[0], "model order", False)
    if best.peak_bytes <= model.lower_bound_bytes or best.peak_bytes <= last_step_floor(model):
        return best
    for key in GREEDY_KEYS:
        order = greedy_order(model, key)
        peak = order_peak(model, order)[0]
        if peak < best.peak_bytes:
            best = OrderSearch(order, peak, "greedy", False)
    return best


@pytest.mark.parametrize("seed", range(80))
def test_best_order_keeps_the_plain_greedy_choice(seed: int) -> None:
    for model in random_models(seed):
        # no exact or windowed stage: only the greedy keys decide
        found = best_order(model, exact_max_nodes=0, max_states=0)
        plain = plain_best_order(model)
        if found.method != "windowed exact":
            assert (found.order, found.peak_bytes, found.method) == (
                plain.order, plain.peak_bytes, plain.method)
        else:  # the window search starts from the greedy choice and only lowers its peak
            assert found.peak_bytes < plain.peak_bytes
