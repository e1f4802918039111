"""The passes' shortcuts of 2026-11-29 (passes3) against the plain computations they
replace: the live tensors at the peak described once per shape and size (liveness.py
`_describe_live`), the roofline's totals and top nodes iterated in C (roofline.py
`summarize`), the topological check by the inverse permutation (memory_model.py
`is_topological`), a model's sizes evaluated once per size object (`build_memory_model`),
the size table's positions hashed once per size object (dims.py `SizeTable`), the FLOP rate's
dtype looked up by identity (roofline.py `node_rate_dtype`), the nodes' predecessors found
in the walk that finds what each node touches (buffers.py `_plain_touches`), the greedy
passes' first ready nodes made into a heap at once (schedule.py `greedy_search`)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.core.evaluate import evaluate
from graphmem.core.ir import Graph, Role
from graphmem.core.symbolic import SymInt
from graphmem.devices.gpus import find_gpu
from graphmem.passes.dims import SizeTable
from graphmem.passes.liveness import LiveTensor, _Live, _live_at, analyze_liveness
from graphmem.passes.memory_model import (
    PROBE_DIM_VALUE,
    MemoryModel,
    build_memory_model,
    find_buffers,
    is_topological,
    plan_dims,
    sweep_buffers,
)
from graphmem.passes.order_edges import node_predecessors
from graphmem.passes.roofline import _RATE_DTYPE, TOP_NODES, NodeTime, node_rate_dtype, summarize
from graphmem.passes.schedule import GREEDY_KEYS, GreedyKey, greedy_order
from tests.builders import sizes_of
from tests.helpers.graphs import random_dag, symbolic_random_dag

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def plain_described(live: list[_Live], dims: Mapping[str, int]) -> tuple[LiveTensor, ...]:
    """Each live tensor described on its own, sorted largest first (at the probe), by name."""
    probe = {name: PROBE_DIM_VALUE for t in live for name in t.nbytes.free_symbols()}
    tensors = [LiveTensor(v.name, n, v.role, v.dtype.label, v.shape_text(dims),
                          v.producer.name if v.producer is not None else None,
                          k.name if k is not None else None) for v, n, k in live]
    return tuple(sorted(tensors, key=lambda t: (-(int(t.nbytes) if t.nbytes.is_constant
                                                   else t.nbytes.evaluate(probe)), t.name)))


@pytest.mark.parametrize("name", ["gpt2.onnx", "tiny_llama.onnx", "resnet50.onnx"])
@pytest.mark.parametrize("batch", [None, 2])
def test_live_tensors_are_described_as_one_by_one(name: str, batch: int | None) -> None:
    analysis = analyze_onnx(SAMPLES / name, batch=batch, plan=False)
    liveness = analysis.liveness
    assert liveness.sweep is not None
    live = _live_at(liveness.sweep, liveness.peak_step)
    expected = plain_described(live, analysis.dims.bound)
    assert liveness.live_at_peak == expected
    assert [type(t) for t in liveness.live_at_peak] == [LiveTensor] * len(expected)
    assert hash(liveness.live_at_peak) == hash(expected)


@pytest.mark.parametrize("seed", range(6))
def test_symbolic_live_tensors_are_described_as_one_by_one(seed: int) -> None:
    graph = symbolic_random_dag(seed)
    liveness = analyze_liveness(graph, sizes_of(graph))
    assert liveness.sweep is not None
    live = _live_at(liveness.sweep, liveness.peak_step)
    assert liveness.live_at_peak == plain_described(live, {})


def plain_summary_fields(times: Sequence[NodeTime]) -> tuple[object, ...]:
    return (sum((t.est_time_s for t in times), 0.0),
            sum((t.est_time_s for t in times if t.bound == "compute"), 0.0),
            sum((t.est_time_s for t in times if t.bound == "memory"), 0.0),
            tuple(sorted(times, key=lambda t: -t.est_time_s)[:TOP_NODES]),
            sum(1 for t in times if not t.flops_known))


@pytest.mark.parametrize("seed", range(30))
def test_summary_is_the_plain_loops(seed: int) -> None:
    rng = random.Random(seed)
    seconds = [rng.random() * 1e-3 for _ in range(5)] + [0.0]  # few values: many ties
    times = [NodeTime(f"n{i}", rng.choice(seconds), rng.choice(["compute", "memory"]), None,
                      rng.randint(0, 99), rng.randint(0, 99), "float32", rng.random() < 0.8)
             for i in range(rng.randint(0, 60))]
    result = summarize(find_gpu("a100-80gb"), times, 4)
    assert (result.est_latency_s, result.compute_bound_time_s, result.memory_bound_time_s,
            result.top, result.nodes_without_flops) == plain_summary_fields(times)


@pytest.mark.parametrize("seed", range(10))
def test_topological_check_is_the_positions_check(seed: int) -> None:
    graph = random_dag(seed, node_count=40)
    model = build_memory_model(graph, sizes_of(graph), {})
    rng = random.Random(seed)
    orders = [list(range(model.node_count))]
    for _ in range(30):
        order = list(range(model.node_count))
        for _ in range(rng.randint(1, 3)):  # a few swaps: sometimes still topological
            i, j = rng.randrange(len(order)), rng.randrange(len(order))
            order[i], order[j] = order[j], order[i]
        orders.append(order)
    orders += [orders[1][:-1], [*orders[1], 0]]  # not permutations
    for order in orders:
        position = {node: step for step, node in enumerate(order)}
        expected = sorted(order) == list(range(model.node_count)) and all(
            position[p] < position[n] for n, preds in enumerate(model.predecessors)
            for p in preds)
        assert is_topological(model, order) == expected


@pytest.mark.parametrize("seed", range(6))
def test_model_sizes_are_each_values_size_at_the_dims(seed: int) -> None:
    graph = symbolic_random_dag(seed)
    sizes = sizes_of(graph)
    dims = {"batch": 3 + seed, "seq": 5}
    model = build_memory_model(graph, sizes, dims)
    buffers = find_buffers(graph)
    assert model.buffer_bytes == tuple(evaluate(sizes[v.name], dims) for v in buffers.storages)
    assert model.resident_bytes == sum(evaluate(sizes[v.name], dims)
                                       for v in buffers.residents)


def plain_table(graph: Graph) -> tuple[tuple[int, ...], tuple[SymInt, ...]]:
    """Each value's size hashed in graph order: (its position, -1 unknown; the distinct sizes)."""
    position: dict[SymInt, int] = {}
    index = [-1 if v.nbytes is None else position.setdefault(v.nbytes, len(position))
             for v in graph.values.values()]
    return tuple(index), tuple(position)


@pytest.mark.parametrize("name", ["gpt2.onnx", "tiny_llama.onnx", "tiny_gpt.dynamo.onnx"])
def test_size_table_positions_are_the_plain_walk(name: str) -> None:
    graph = analyze_onnx(SAMPLES / name, plan=False).graph
    table = SizeTable(graph)
    assert (table.index, table.sizes) == plain_table(graph)


@pytest.mark.parametrize("seed", range(6))
def test_size_table_of_equal_sizes_in_separate_objects(seed: int) -> None:
    graph = symbolic_random_dag(seed)
    rng = random.Random(seed)
    values = list(graph.values.values())
    for value in values:  # equal sizes in new objects, unknown shapes now and then
        if rng.random() < 0.2:
            value.shape = None
        elif value.shape is not None and rng.random() < 0.5:
            value.shape = tuple(SymInt.const(int(d)) if d is not None and d.is_constant
                                else d for d in value.shape)
    table = SizeTable(graph)
    assert (table.index, table.sizes) == plain_table(graph)
    assert -1 in table.index


@pytest.mark.parametrize("name", ["gpt2.onnx", "resnet50.onnx"])
def test_rate_dtype_by_identity_is_by_value(name: str) -> None:
    graph = analyze_onnx(SAMPLES / name, plan=False).graph
    for node in graph.nodes:
        found = next((_RATE_DTYPE[v.dtype] for v in (*node.outputs, *node.present_inputs)
                      if v.dtype in _RATE_DTYPE), "float32")
        assert node_rate_dtype(node) == found


def assert_walked_predecessors(graph: Graph) -> None:
    buffers = find_buffers(graph)
    index = {node: i for i, node in enumerate(graph.nodes)}
    assert buffers.predecessors == node_predecessors(graph.nodes, index)
    model = build_memory_model(graph, sizes_of(graph), plan_dims(graph, {}),
                               sweep_buffers(buffers, sizes_of(graph)))
    assert model.predecessors == node_predecessors(graph.nodes, index)


@pytest.mark.parametrize("name", ["gpt2.onnx", "tiny_llama.onnx", "resnet50.onnx",
                                  "tiny_gpt.dynamo.onnx"])
def test_predecessors_found_with_the_touches_are_the_producers(name: str) -> None:
    assert_walked_predecessors(analyze_onnx(SAMPLES / name, plan=False).graph)


@pytest.mark.parametrize("seed", range(10))
def test_predecessors_of_random_graphs_with_constants(seed: int) -> None:
    graph = random_dag(seed, node_count=60)
    rng = random.Random(seed)
    for node in graph.nodes:  # some nodes make residents (a Constant node's output)
        if rng.random() < 0.2:
            for value in node.outputs:
                if value.role is Role.ACTIVATION:
                    value.role = Role.CONSTANT
    assert_walked_predecessors(graph)


def test_no_walked_predecessors_where_views_add_order_edges() -> None:
    graph = random_dag(3, node_count=20)
    made = [v for node in graph.nodes for v in node.outputs]
    made[5].alias_of = made[2]  # a view: node_predecessors adds its order edges
    assert find_buffers(graph).predecessors is None
    index = {node: i for i, node in enumerate(graph.nodes)}
    model = build_memory_model(graph, sizes_of(graph), {})
    assert model.predecessors == node_predecessors(graph.nodes, index)


def plain_greedy(model: MemoryModel, key: GreedyKey) -> tuple[int, ...]:
    """Each step runs the ready node whose key, at the bytes it would free now, is least."""
    sizes, pinned, users = model.buffer_bytes, model.pinned, model.users
    done: list[int] = []
    ready_at: dict[int, int] = {n: 0 for n, preds in enumerate(model.predecessors) if not preds}
    while ready_at:
        def entry(node: int) -> tuple[int, ...]:
            pending = [b for b in range(len(sizes)) if not pinned[b]
                       and [u for u in users[b] if u not in done] == [node]]
            alloc = model.alloc_bytes[node]
            return (*key(alloc - sum(sizes[b] for b in pending), alloc, node, ready_at[node]),
                    node)
        node = min(ready_at, key=entry)
        del ready_at[node]
        done.append(node)
        for after, preds in enumerate(model.predecessors):
            if after not in done and after not in ready_at and all(p in done for p in preds):
                ready_at[after] = len(done)
    return tuple(done)


@pytest.mark.parametrize("seed", range(12))
def test_greedy_passes_are_the_plain_choice_each_step(seed: int) -> None:
    graph = random_dag(seed, node_count=35)
    model = build_memory_model(graph, sizes_of(graph), {})
    for key in GREEDY_KEYS:
        assert greedy_order(model, key) == plain_greedy(model, key)
