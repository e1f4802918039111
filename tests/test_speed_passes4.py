"""The analysing stage's shortcuts of 2026-11-29 (passes4) against the computations they
replace: the roofline timed once per cost signature (roofline.py `estimate_roofline` reading
costs.py's `CostReport.groups`), the nodes' working sets found once for the liveness's lower
bound and the plans' model (memory_model.py `MemorySweep.working_sets`), the model's sizes
read off the liveness's sweep (`build_memory_model`), the live tensors' ranking by two stable
sorts (liveness.py `_describe_live`), the model order's
topological check (schedule.py `_starting_order`), and the graph's free dims found once for
the re-analysis choice (planning.py `reanalyzer`), and the greedy pass's live bytes per step
handed to the window search (schedule.py `greedy_search`, exact_schedule.py
`refine_around_peak`), the greedy passes' counts by `map` (schedule.py `greedy_start`) and
the moved nodes ranked by two stable sorts (`moved_nodes`), objects stored field by field,
the parameters' roles in one walk (params.py `count_params`) and the size table's names
paired with their sizes in C (dims.py `SizeTable.bound`)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.core.ir import Role
from graphmem.core.symbolic import SymInt, sum_sizes
from graphmem.devices.gpus import find_gpu
from graphmem.passes.costs import CostStatus, _Shared, _signature, compute_costs
from graphmem.passes.dims import SizeTable, data_sized_dims, invented_dims
from graphmem.passes.exact_schedule import refine_around_peak
from graphmem.passes.liveness import analyze_liveness
from graphmem.passes.memory_model import (
    build_memory_model,
    is_topological,
    live_profile,
)
from graphmem.passes.params import count_params, stored_bytes
from graphmem.passes.roofline import estimate_roofline, node_rate_dtype
from graphmem.passes.schedule import (
    GREEDY_KEYS,
    _longest_increasing,
    _starting_order,
    greedy_search,
    greedy_start,
    moved_nodes,
)
from graphmem.pipeline.planning import reanalyzer
from tests.builders import sizes_of
from tests.helpers.graphs import copies_and_random_dag, random_dag, symbolic_random_dag

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
ONNX_SAMPLES = ["gpt2.onnx", "tiny_llama.onnx", "resnet50.onnx", "tiny_gpt.dynamo.onnx",
                "mobilenet_v2.onnx"]


@pytest.mark.parametrize("name", ONNX_SAMPLES)
@pytest.mark.parametrize("gpu_name", ["a100-80gb", "t4"])
def test_roofline_by_signature_is_the_roofline_by_cost_objects(name: str,
                                                               gpu_name: str) -> None:
    analysis = analyze_onnx(SAMPLES / name, batch=2, plan=False)
    graph, gpu = analysis.graph, find_gpu(gpu_name)
    dims = {**{name: 7 for name in graph.free_dims()}, **analysis.dims.bound}
    costs = compute_costs(graph, analysis.dims)
    assert len(costs.groups) == len(costs.nodes)
    plain = estimate_roofline(graph, dataclasses.replace(costs, groups=()), gpu, dims)
    assert estimate_roofline(graph, costs, gpu, dims) == plain
    # the groups are what the roofline takes them for: one signature, the same cost objects,
    # status and FLOP rate, and the sharing is real
    firsts: dict[int, int] = {}
    for index, (node, cost, group) in enumerate(zip(graph.nodes, costs.nodes, costs.groups,
                                                    strict=True)):
        if group < 0:
            assert _signature(node, _Shared()) is None or cost.status is not CostStatus.OK
            continue
        first = firsts.setdefault(group, index)
        model, other = graph.nodes[first], costs.nodes[first]
        assert _signature(node, _Shared()) is not None
        assert (cost.flops, cost.bytes_read, cost.bytes_written) == (
            other.flops, other.bytes_read, other.bytes_written)
        assert cost.flops is other.flops and cost.bytes_read is other.bytes_read
        assert cost.status is other.status is CostStatus.OK
        assert node_rate_dtype(node) == node_rate_dtype(model)
    assert len(firsts) < sum(1 for group in costs.groups if group >= 0)


def test_costs_made_another_way_are_timed_by_their_objects() -> None:
    # a CostReport without groups (made by hand, or replaced) is timed as before: node by node
    graph = random_dag(3, node_count=60)
    costs = compute_costs(graph)
    gpu = find_gpu("a100-80gb")
    assert estimate_roofline(graph, dataclasses.replace(costs, groups=(0,)), gpu, {}) == \
        estimate_roofline(graph, dataclasses.replace(costs, groups=()), gpu, {})


@pytest.mark.parametrize("seed", range(12))
def test_working_sets_shared_with_the_model_are_its_own(seed: int) -> None:
    graph = random_dag(seed, node_count=80) if seed % 2 else symbolic_random_dag(seed)
    sizes = sizes_of(graph)
    if seed % 3 == 0:  # some sizes unknown: 0 in the model, the sweep's zero object
        rng = random.Random(seed)
        sizes = {name: None if rng.random() < 0.2 else size for name, size in sizes.items()}
    dims = {name: 5 for name in graph.free_dims()}
    liveness = analyze_liveness(graph, sizes)
    sweep = liveness.sweep
    assert sweep is not None and sweep.sizes is sizes
    shared = build_memory_model(graph, sizes, dims, sweep)
    alone = build_memory_model(graph, sizes, dims)
    # every field: the sizes read off the sweep, the lower bound from its working sets
    assert shared == alone
    assert all(type(n) is int for n in shared.buffer_bytes)
    assert type(shared.lower_bound_bytes) is int and type(shared.resident_bytes) is int
    # another mapping of the same sizes: read by name, the same model
    assert build_memory_model(graph, dict(sizes), dims, sweep) == alone
    # the liveness's bound: residents + the first largest working set, as the plain sums
    buffers = sweep.buffers
    assert buffers is not None
    plain = [liveness.resident_bytes + sum_sizes(sweep.buffer_sizes[b] for b in touched)
             for touched in buffers.touches]  # node i in the model order
    if sweep.working_sets is None:  # sizes in free dims: the polynomial search, as before
        assert not all(total.is_constant for total in plain)
        return
    assert [liveness.resident_bytes + SymInt.const(n) for n in sweep.working_sets] == plain
    totals = [int(plain[node]) for node in sweep.events.order]
    step = totals.index(max(totals))
    assert (liveness.lower_bound_bytes, liveness.lower_bound_step) == (
        plain[sweep.events.order[step]], step)


@pytest.mark.parametrize("seed", range(10))
def test_the_model_orders_check_is_is_topological(seed: int) -> None:
    graph = random_dag(seed, node_count=50)
    model = build_memory_model(graph, sizes_of(graph), {})
    rng = random.Random(seed)
    for trial in range(20):
        predecessors = [list(before) for before in model.predecessors]
        for _ in range(trial % 4):  # an edge backwards (or forwards, or none): some stay DAGs
            node, other = rng.randrange(model.node_count), rng.randrange(model.node_count)
            if node != other:
                predecessors[node].append(other)
        changed = dataclasses.replace(model, predecessors=tuple(map(tuple, predecessors)))
        topological = is_topological(changed, range(changed.node_count))
        if topological:
            assert _starting_order(changed) == (tuple(range(changed.node_count)), "model order")
        else:
            try:
                order, method = _starting_order(changed)
            except ValueError:  # a cycle: no order at all
                continue
            assert method == "topological sort" and is_topological(changed, order)


@pytest.mark.parametrize("name", [*ONNX_SAMPLES, "tiny_cnn.nofold.onnx"])
def test_reanalyzer_with_the_free_dims_given_is_the_same_choice(name: str) -> None:
    analysis = analyze_onnx(SAMPLES / name, plan=False)
    graph = analysis.graph
    free = graph.free_dims()
    rerun = object()
    assert invented_dims(graph, free, data_sized_dims(graph)) == invented_dims(graph)
    for probed in (frozenset(), free, frozenset({"batch"}), frozenset({"nowhere"}),
                   frozenset(sorted(free)[:1])):
        assert reanalyzer(analysis, probed, rerun, free) is reanalyzer(  # type: ignore[arg-type]
            analysis, probed, rerun)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(40))
def test_a_greedy_pass_sweeps_its_own_order(seed: int) -> None:
    rng = random.Random(seed)
    graph = (random_dag(seed, node_count=rng.randint(1, 80)) if seed % 3
             else copies_and_random_dag(seed))  # graph outputs: pinned, never freed
    model = build_memory_model(graph, sizes_of(graph), {})
    for key in GREEDY_KEYS:
        profile: tuple[list[int], list[int]] = ([], [])
        found = greedy_search(model, key, profile=profile)
        assert found is not None
        during, after = live_profile(model, found[0])
        assert profile == (during, after)
        # the window search from that order, with and without the pass's sweep
        assert refine_around_peak(model, found[0], profile=profile) == refine_around_peak(
            model, found[0])


@pytest.mark.parametrize("seed", range(20))
def test_moved_nodes_are_ranked_as_by_distance_then_step(seed: int) -> None:
    rng = random.Random(seed)
    order = list(range(rng.randint(0, 300)))
    for _ in range(rng.randint(0, 40)):  # moves near and far: many equal distances
        node = order.pop(rng.randrange(len(order))) if order else None
        if node is not None:
            order.insert(rng.randrange(len(order) + 1), node)
    kept = _longest_increasing(order)
    plain = sorted(((node, step) for step, node in enumerate(order) if node not in kept),
                   key=lambda item: (-abs(item[1] - item[0]), item[1]))
    assert moved_nodes(order) == (plain, len(plain))


@pytest.mark.parametrize("seed", range(10))
def test_greedy_start_counts_are_the_plain_loops(seed: int) -> None:
    graph = random_dag(seed, node_count=60) if seed % 2 else copies_and_random_dag(seed)
    model = build_memory_model(graph, sizes_of(graph), {})
    start = greedy_start(model)
    assert start.waiting == [len(preds) for preds in model.predecessors]
    assert start.pending == [len(users) for users in model.users]
    assert start.pending_sum == [sum(users) for users in model.users]


def _as_made_by_init(obj: object) -> object:
    """`obj` made again by its dataclass's own __init__, field by field."""
    cls = type(obj)
    return cls(**{f.name: getattr(obj, f.name) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "dims"), [("tiny_llama.onnx", {"seq": 16}),
                                           ("resnet50.onnx", {})])
def test_objects_stored_field_by_field_are_the_dataclasses_own(name: str,
                                                                dims: dict[str, int]) -> None:
    # Placements, live tensors, node times and renamed node costs are made by storing their
    # fields in their dicts: the same fields in the same order, equal, hashed, printed and
    # frozen as the objects their __init__ makes
    analysis = analyze_onnx(SAMPLES / name, batch=2, dims=dims, gpu="a100-80gb")
    assert analysis.arena is not None and analysis.roofline is not None
    made = [*analysis.arena.placements[:50], *analysis.liveness.live_at_peak[:50],
            *analysis.roofline.nodes[:50], *analysis.costs.nodes[:50]]
    assert {type(obj).__name__ for obj in made} == {"Placement", "LiveTensor", "NodeTime",
                                                      "NodeCost"}
    for obj in made:
        own = _as_made_by_init(obj)
        assert list(vars(obj).items()) == list(vars(own).items())
        assert obj == own and hash(obj) == hash(own) and repr(obj) == repr(own)
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.name = "other"  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ONNX_SAMPLES)
def test_params_and_bound_sizes_are_the_plain_walks(name: str) -> None:
    # count_params's one walk for the three roles, and the size table's names paired with
    # their slots by zip: against the walks per role and the comprehension they replace
    analysis = analyze_onnx(SAMPLES / name, batch=2, plan=False)
    graph = analysis.graph
    report = count_params(graph)
    # (the samples hold no quantized weights: no value is skipped)
    parameters = list(graph.values_with_role(Role.PARAMETER))
    buffers = list(graph.values_with_role(Role.BUFFER))
    constants = list(graph.values_with_role(Role.CONSTANT))
    assert report.count == sum(int(v.numel or 0) for v in parameters)
    assert report.bytes == sum(map(stored_bytes, parameters))
    assert report.buffer_bytes == sum(map(stored_bytes, buffers))
    assert report.constant_bytes == sum(map(stored_bytes, constants))
    table = SizeTable(graph)
    for dims in ({}, {name: 3 for name in graph.free_dims()}):
        bound = table.bound(dims)
        slots = [size.bind(dims) for size in table.sizes] + [None]
        assert list(bound.items()) == [(name, slots[i]) for name, i in
                                       zip(table.names, table.index, strict=True)]
