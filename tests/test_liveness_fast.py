"""The liveness's paths for graphs without views or held tensors (every ONNX graph) and for
bound sizes give what the general ones give: a node keeps alive what it touches
(buffers.py `_plain_touches` against `_uses`), and the largest working set is found as
numbers (liveness.py `_lower_bound`) as the polynomial sums find it."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest

from graphmem.core.ir import Graph
from graphmem.core.symbolic import SymInt, sum_sizes
from graphmem.passes import liveness
from graphmem.passes.buffers import _plain_touches, _uses
from graphmem.passes.liveness import _choose_peak, _lower_bound
from graphmem.passes.memory_model import (
    Buffers,
    MemorySweep,
    find_buffers,
    sweep_buffers,
)
from tests.builders import sizes_of
from tests.helpers.graphs import random_dag, symbolic_random_dag


@pytest.mark.parametrize("seed", range(40))
def test_plain_touches_are_the_uses_and_touches(seed: int) -> None:
    graph = random_dag(seed, node_count=25)
    buffers = find_buffers(graph)
    buffer_of = {value: index for index, value in enumerate(buffers.storages)}
    nodes = tuple(graph.nodes)
    uses, touches = _uses(nodes, buffer_of, None)
    plain = _plain_touches(nodes, buffer_of, buffers.producer)
    assert plain is not None and plain[0] == touches == uses
    assert (buffers.uses, buffers.touches) == (uses, touches)


@pytest.mark.parametrize("seed", range(20))
def test_views_and_held_tensors_take_the_general_path(seed: int) -> None:
    rng = random.Random(seed)
    graph = random_dag(seed, node_count=25)
    made = [v for node in graph.nodes for v in node.outputs]
    value = rng.choice(made[:-1])
    later = graph.nodes[rng.randrange(graph.nodes.index(value.producer), len(graph.nodes))]
    if seed % 2:
        value.held_until = later  # eager PyTorch keeps it while a variable refers to it
    else:
        value.alias_of = rng.choice([v for v in made if v is not value])
    buffers = find_buffers(graph)
    buffer_of = {v: index for index, v in enumerate(buffers.storages)}
    nodes = tuple(graph.nodes)
    assert _plain_touches(nodes, buffer_of, buffers.producer) is None
    assert (buffers.uses, buffers.touches) == _uses(nodes, buffer_of, None)


def _general_lower_bound(graph_sizes: Mapping[str, SymInt | None], graph: Graph
                         ) -> tuple[SymInt, int, Buffers, MemorySweep, SymInt]:
    """The working sets summed as polynomials, as `_lower_bound` sums them with free dims."""
    buffers = find_buffers(graph)
    sweep = sweep_buffers(buffers, graph_sizes)
    resident = sum_sizes(sweep.resident_sizes)
    sets = [resident + sum_sizes(sweep.buffer_sizes[b] for b in buffers.touches[node])
            for node in sweep.events.order]
    step, _ = _choose_peak(sets)
    return sets[step], step, buffers, sweep, resident


@pytest.mark.parametrize("seed", range(40))
def test_bound_lower_bound_equals_the_polynomial_one(seed: int) -> None:
    graph = random_dag(seed, node_count=30)
    sizes = sizes_of(graph)
    expected, step, buffers, sweep, resident = _general_lower_bound(sizes, graph)
    assert _lower_bound(buffers, sweep, resident) == (expected, step)


@pytest.mark.parametrize("seed", range(10))
def test_free_dims_keep_the_polynomial_lower_bound(seed: int) -> None:
    graph = symbolic_random_dag(seed)
    sizes = sizes_of(graph)
    expected, step, buffers, sweep, resident = _general_lower_bound(sizes, graph)
    assert not expected.is_constant or all(s.is_constant for s in sweep.buffer_sizes)
    assert _lower_bound(buffers, sweep, resident) == (expected, step)


def test_liveness_names_the_live_tensors_largest_first() -> None:
    graph = random_dag(3, node_count=20)
    result = liveness.analyze_liveness(graph, sizes_of(graph))
    sizes = [int(t.nbytes) for t in result.live_at_peak]
    assert sizes == sorted(sizes, reverse=True)
    assert {t.name for t in result.live_at_peak} >= {"in", "p"}  # residents are live


@pytest.mark.parametrize("seed", range(40))
def test_role_numbers_are_the_role_timeline_in_integers(seed: int) -> None:
    graph = random_dag(seed, node_count=30)
    result = liveness.analyze_liveness(graph, sizes_of(graph))
    timeline, numbers = result.role_timeline, result.role_numbers
    assert numbers is not None and numbers.roles == timeline.roles
    assert numbers.bytes_per_step == tuple(tuple(int(size) for size in step)
                                           for step in timeline.bytes_per_step)
    assert len(numbers.roles) >= 3  # inputs, parameters, activations (and the output)


def test_free_dims_have_no_role_numbers() -> None:
    graph = symbolic_random_dag(0)
    assert liveness.analyze_liveness(graph, sizes_of(graph)).role_numbers is None
