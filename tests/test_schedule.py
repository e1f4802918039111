"""Schedules: hand-worked best orders, exact search against brute force, greedy invariants."""

import random
import time

import networkx as nx
import pytest

from graphmem.core.ir import Graph, Role
from graphmem.core.symbolic import SymInt
from graphmem.passes.liveness import analyze_liveness
from graphmem.passes.memory_model import (
    MemoryModel,
    build_memory_model,
    is_topological,
    order_peak,
)
from graphmem.passes.schedule import (
    GREEDY_KEYS,
    best_order,
    dependency_graph,
    exact_order,
    find_schedule,
    greedy_order,
    moved_nodes,
    refine_around_peak,
)
from tests.builders import GraphBuilder, sizes_of
from tests.helpers.graphs import random_dag, symbolic_random_dag


def model_of(graph: Graph) -> MemoryModel:
    return build_memory_model(graph, sizes_of(graph), {})


def two_branches() -> Graph:
    """x -> A1 (400 B) -> A2 (4 B); x -> B1 (400 B) -> B2 (4 B); J(A2, B2) -> y (4 B).

    The model order interleaves the branches: A1 B1 A2 B2 J.
    """
    b = GraphBuilder("branches")
    b.tensor("x", 1, Role.INPUT)  # 4 B
    b.node("A1", ["x"], {"a1": 100})  # 400 B
    b.node("B1", ["x"], {"b1": 100})  # 400 B
    b.node("A2", ["a1"], {"a2": 1})  # 4 B
    b.node("B2", ["b1"], {"b2": 1})  # 4 B
    b.node("J", ["a2", "b2"], {"y": 1})  # 4 B
    return b.build(["y"])


def test_running_one_branch_to_completion_halves_the_peak() -> None:
    graph = two_branches()
    model = model_of(graph)
    # model order A1 B1 A2 B2 J:
    #   A1: 4 + a1 400 = 404; B1: 4 + a1 400 + b1 400 = 804 <- peak;
    #   A2: 4 + 400 + 400 + a2 4 = 808 <- peak (a1 is A2's input, freed after it)
    assert order_peak(model, range(5)) == (808, 2)
    # best A1 A2 B1 B2 J: A1 404; A2 404 + 4 = 408; B1: 4 + a2 4 + b1 400 = 408;
    #   B2: 408 + 4 = 412 <- peak; J: 4 + 4 + 4 + 4 = 16
    search = best_order(model)
    assert search.peak_bytes == 412 and search.proven_optimal
    names = [model.node_names[i] for i in search.order]
    assert names in (["A1", "A2", "B1", "B2", "J"], ["B1", "B2", "A1", "A2", "J"])
    # the greedy alone finds it too: after A1, A2 frees 400 and allocates 4 (key -396)
    assert order_peak(model, greedy_order(model))[0] == 412


def test_schedule_result_reports_both_peaks_and_what_moved() -> None:
    graph = two_branches()
    sizes = sizes_of(graph)
    liveness = analyze_liveness(graph, sizes)
    result = find_schedule(graph, sizes, liveness, {})
    assert int(result.model_order_peak_bytes) == 808
    assert int(result.best_order_peak_bytes) == 412
    # the greedy finds it; the exact search then proves no order does better
    assert result.method == "greedy" and result.proof == "exact search"
    # lower bound: residents 4 + the largest node working set, A2's a1 + a2 = 404 -> 408
    assert int(result.lower_bound_bytes) == 408
    # one node moves: A1 B1 A2 B2 J -> A1 A2 B1 B2 J keeps A1 A2 B2 J (or A1 B1 B2 J) in order
    assert result.moved_count == 1
    assert result.moved[0].name in ("A2", "B1")
    # the peak of the reported order, recomputed by liveness, is the reported peak
    order = [next(n for n in graph.nodes if n.name == name) for name in result.order]
    assert int(analyze_liveness(graph, sizes, order=order).peak_bytes) == 412


def test_an_order_meeting_the_lower_bound_is_proven_without_search() -> None:
    b = GraphBuilder("chain")
    b.tensor("x", 1, Role.INPUT)
    b.node("A", ["x"], {"a": 10})
    b.node("B", ["a"], {"b": 10})
    graph = b.build(["b"])
    search = best_order(model_of(graph))
    # step B holds a and b: 4 + 40 + 40 = 84, and that is B's own working set
    assert search.peak_bytes == 84 and search.proof == "lower bound"
    assert search.method == "model order"


def inception_block() -> Graph:
    """x (160) feeds four branches whose outputs are concatenated (sizes in floats):
    b1: conv 32; b2: conv 96 -> conv 64; b3: conv 16 -> conv 32; b4: pool 160 -> conv 32.
    """
    b = GraphBuilder("inception")
    b.tensor("w", 1, Role.PARAMETER)
    b.node("stem", ["w"], {"x": 160})
    b.node("b1", ["x"], {"o1": 32})
    b.node("b2a", ["x"], {"t2": 96})
    b.node("b2b", ["t2"], {"o2": 64})
    b.node("b3a", ["x"], {"t3": 16})
    b.node("b3b", ["t3"], {"o3": 32})
    b.node("pool", ["x"], {"t4": 160})
    b.node("b4", ["t4"], {"o4": 32})
    b.node("concat", ["o1", "o2", "o3", "o4"], {"y": 160})
    return b.build(["y"])


def test_inception_runs_the_pool_branch_first() -> None:
    model = model_of(inception_block())
    # model order: at pool, x 160 + o1 32 + o2 64 + o3 32 + t4 160 = 448 floats, + w 1
    assert order_peak(model, range(model.node_count))[0] == 4 * 449
    # pool first: pool x + t4 = 320; b4 352; b2a x + o4 + t2 = 288; b2b 352 (with t2, o2);
    # b3a 304... ; concat o1..o4 + y = 320: the peak is 352 floats (+ w)
    search = best_order(model)
    assert search.peak_bytes == 4 * 353 and search.proof == "exact search"
    assert model.node_names[search.order[1]] == "pool"


def test_windowed_search_fixes_a_block_inside_a_large_graph() -> None:
    # 30 inception blocks in a chain: too large for the exact search, and no greedy key sees
    # that the pool branch must run first. The windows around the peak do.
    b = GraphBuilder("inception_chain")
    b.tensor("x0", 160, Role.INPUT)
    for k in range(30):
        x = f"x{k}"
        b.node(f"b1_{k}", [x], {f"o1_{k}": 32})
        b.node(f"b2a_{k}", [x], {f"t2_{k}": 96})
        b.node(f"b2b_{k}", [f"t2_{k}"], {f"o2_{k}": 64})
        b.node(f"pool_{k}", [x], {f"t4_{k}": 160})
        b.node(f"b4_{k}", [f"t4_{k}"], {f"o4_{k}": 32})
        b.node(f"cat_{k}", [f"o1_{k}", f"o2_{k}", f"o4_{k}"], {f"x{k + 1}": 160})
    graph = b.build(["x30"])
    model = model_of(graph)
    model_peak = order_peak(model, range(model.node_count))[0]
    for key in GREEDY_KEYS:
        assert order_peak(model, greedy_order(model, key))[0] == model_peak
    search = best_order(model)
    assert search.method == "windowed exact"
    # the input x0 (160 floats) is resident throughout. At pool in the model order:
    # x 160 + o1 32 + o2 64 + t4 160 = 416 floats; pool first: pool x + t4 = 320,
    # b4 x + t4 + o4 = 352, b1 x + o4 + o1 = 224, b2a x + o4 + o1 + t2 = 320,
    # b2b t2 + o2 + o1 + o4 = 224 (x freed after b2a), cat o1 + o2 + o4 + out = 288
    assert model_peak == 4 * (160 + 416) and search.peak_bytes == 4 * (160 + 352)
    assert is_topological(model, search.order)


def all_topological_orders(model: MemoryModel) -> list[tuple[int, ...]]:
    graph = dependency_graph(model)
    return [tuple(order) for order in nx.all_topological_sorts(graph)]


@pytest.mark.parametrize("seed", range(40))
def test_exact_search_agrees_with_brute_force_and_greedy_never_beats_it(seed: int) -> None:
    rng = random.Random(seed)
    graph = random_dag(seed, node_count=rng.randint(3, 8))
    model = model_of(graph)
    orders = all_topological_orders(model)
    brute = min(order_peak(model, order)[0] for order in orders)
    exact = exact_order(model, upper_bound=brute + 1)
    assert exact is not None and exact[0] is not None
    assert exact[1] == brute == order_peak(model, exact[0])[0]
    assert is_topological(model, exact[0])
    for key in GREEDY_KEYS:
        greedy = greedy_order(model, key)
        assert is_topological(model, greedy)
        assert order_peak(model, greedy)[0] >= brute
    search = best_order(model)
    assert search.peak_bytes == brute and search.proven_optimal


@pytest.mark.parametrize("seed", range(10))
def test_peaks_of_any_order_match_liveness(seed: int) -> None:
    graph = random_dag(seed, node_count=12)
    sizes = sizes_of(graph)
    model = model_of(graph)
    rng = random.Random(seed)
    orders = [greedy_order(model, key) for key in GREEDY_KEYS]
    orders += [tuple(nx.lexicographical_topological_sort(
        dependency_graph(model), key=lambda n: rng.random())) for _ in range(5)]
    for order in orders:
        nodes = [graph.nodes[i] for i in order]
        liveness = analyze_liveness(graph, sizes, order=nodes)
        assert order_peak(model, order) == (int(liveness.peak_bytes), liveness.peak_step)


@pytest.mark.parametrize("seed", range(10))
def test_every_order_returned_is_topological_on_larger_graphs(seed: int) -> None:
    graph = random_dag(seed, node_count=80)
    model = model_of(graph)
    assert nx.is_directed_acyclic_graph(dependency_graph(model))
    model_peak = order_peak(model, range(model.node_count))[0]
    search = best_order(model)
    assert is_topological(model, search.order)
    assert search.peak_bytes == order_peak(model, search.order)[0] <= model_peak
    refined, peak = refine_around_peak(model, range(model.node_count))
    assert is_topological(model, refined) and peak == order_peak(model, refined)[0]
    assert peak <= model_peak


def test_in_place_updates_keep_their_place_among_readers() -> None:
    # r1 reads p; u updates p in place (an alias of p); r2 reads the updated p. Moving u
    # before r1, or r2 before u, would change what the readers see.
    b = GraphBuilder("inplace")
    b.tensor("p", 10, Role.PARAMETER)
    b.tensor("g", 10, Role.INPUT)
    b.node("r1", ["p"], {"big1": 1000})
    b.node("u", ["p", "g"], {"p2": 10}, op_type="add_")
    b.values["p2"].alias_of = b.values["p"]
    b.node("r2", ["p2"], {"big2": 1000})
    b.node("j", ["big1", "big2"], {"y": 1})
    graph = b.build(["y"])
    model = model_of(graph)
    position = {name: i for i, name in enumerate(model.node_names)}
    assert position["r1"] in model.predecessors[position["u"]]
    assert position["u"] in model.predecessors[position["r2"]]
    assert all_topological_orders(model) == [(0, 1, 2, 3)]


def test_moved_nodes_are_the_fewest_to_move() -> None:
    # 0 1 2 3 4 -> 0 2 3 1 4: keep 0 2 3 4, move 1 (to step 3)
    moved, count = moved_nodes((0, 2, 3, 1, 4))
    assert count == 1 and moved == [(1, 3)]
    assert moved_nodes((0, 1, 2)) == ([], 0)


def test_free_dims_are_scheduled_at_a_probe_and_the_peak_stays_a_formula() -> None:
    batch = SymInt.symbol("batch")
    b = GraphBuilder("sym")
    b.tensor("x", batch, Role.INPUT)
    b.node("A1", ["x"], {"a1": batch * 100})
    b.node("B1", ["x"], {"b1": batch * 100})
    b.node("A2", ["a1"], {"a2": batch})
    b.node("B2", ["b1"], {"b2": batch})
    b.node("J", ["a2", "b2"], {"y": batch})
    graph = b.build(["y"])
    sizes = sizes_of(graph)
    result = find_schedule(graph, sizes, analyze_liveness(graph, sizes), {})
    assert result.chosen_at_dims == {"batch": 64}
    # 4*batch * (1 + 100 + 1 + 1) = 412*batch, as in the bound example
    assert result.best_order_peak_bytes == batch * 412
    assert result.model_order_peak_bytes == batch * 808


@pytest.mark.slow
def test_greedy_scales_to_tens_of_thousands_of_nodes() -> None:
    rng = random.Random(0)
    b = GraphBuilder("large")
    b.tensor("in", 8, Role.INPUT)
    recent = ["in"]
    for index in range(20_000):
        inputs = rng.sample(recent[-6:], k=min(len(recent[-6:]), rng.randint(1, 2)))
        b.node(f"n{index}", inputs, {f"t{index}": rng.randint(1, 1000)})
        recent.append(f"t{index}")
    graph = b.build([recent[-1]])
    model = model_of(graph)
    start = time.perf_counter()
    search = best_order(model)
    elapsed = time.perf_counter() - start
    assert is_topological(model, search.order)
    assert elapsed < 20  # about 1 s here; generous for slow CI machines


@pytest.mark.parametrize("seed", range(10))
def test_symbolic_peak_of_another_order_matches_liveness(seed: int) -> None:
    from graphmem.passes.memory_model import plan_dims, symbolic_order_peak

    graph = symbolic_random_dag(seed)
    sizes = sizes_of(graph)
    probe = plan_dims(graph, {})
    model = build_memory_model(graph, sizes, probe)
    order = greedy_order(model)
    liveness = analyze_liveness(graph, sizes, order=[graph.nodes[i] for i in order])
    peak, candidates = symbolic_order_peak(model, order, sizes, liveness.resident_bytes, probe)
    assert peak == liveness.peak_bytes
    assert set(candidates) == set(liveness.peak_candidates)
    assert peak.evaluate(probe) == order_peak(model, order)[0]


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.torch
def test_a_traced_training_step_keeps_liveness_conventions(optimizer: str) -> None:
    # A whole training step from torch.fx has views, in-place optimizer updates and tensors
    # held past their last use by Python variables: the integer model must give the
    # liveness's peak for the model order, and every order the search returns must respect
    # the in-place ordering edges.
    from graphmem import analyze_torch
    from tests.torch_models.small import ConvNet

    analysis = analyze_torch(ConvNet(), ["4x3x16x16"], train=True, optimizer=optimizer)
    graph = analysis.graph
    assert any(v.alias_of is not None for v in graph.values.values())
    assert any(v.held_until is not None for v in graph.values.values())
    sizes = sizes_of(graph)
    model = model_of(graph)
    assert order_peak(model, range(model.node_count)) == (
        int(analysis.liveness.peak_bytes), analysis.liveness.peak_step)
    schedule = analysis.schedule
    assert schedule is not None
    position = {name: i for i, name in enumerate(model.node_names)}
    order = [position[name] for name in schedule.order]
    assert is_topological(model, order)
    nodes = [graph.nodes[i] for i in order]
    assert int(analyze_liveness(graph, sizes, order=nodes).peak_bytes) == int(
        schedule.best_order_peak_bytes) <= int(analysis.liveness.peak_bytes)
