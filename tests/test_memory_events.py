"""The one memory-event sweep (graphmem/passes/memory_model.py) against a brute-force
definition, on random graphs with views, in-place results and tensors held past their last use;
every consumer of the sweep agrees with it; what-ifs change nothing in the graph."""

from __future__ import annotations

import random

import pytest

from graphmem.core.ir import RESIDENT_ROLES, Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.passes.arena import plan_arena
from graphmem.passes.liveness import analyze_liveness
from graphmem.passes.memory_model import (
    build_memory_model,
    find_buffers,
    lifetimes,
    live_profile,
    order_peak,
    step_events,
    symbolic_order_peak,
)
from graphmem.passes.role_timeline import role_timeline
from graphmem.passes.schedule import greedy_order
from graphmem.suggest.inplace import find_inplace
from tests.builders import GraphBuilder, sizes_of


def aliased_dag(seed: int, node_count: int = 25) -> Graph:
    """A random DAG where some outputs are views of an input (sharing its storage), some are
    in-place results, and some tensors are held past their last use (eager's variables)."""
    rng = random.Random(seed)
    batch = SymInt.symbol("batch")
    b = GraphBuilder(f"aliased{seed}")
    b.tensor("in", batch * rng.randint(1, 9), Role.INPUT)
    b.tensor("p", rng.randint(1, 50), Role.PARAMETER)
    available = ["in", "p"]
    for index in range(node_count):
        inputs = rng.sample(available, k=min(len(available), rng.randint(1, 3)))
        sizes = {f"t{index}_{k}": batch * rng.randint(0, 40) + rng.randint(1, 90)
                 for k in range(rng.randint(1, 2))}
        node = b.node(f"n{index}", inputs, sizes)
        base = node.inputs[0]
        if base is not None and base.role is Role.ACTIVATION and rng.random() < 0.3:
            node.outputs[0].alias_of = base  # a view or an in-place result of input 0
        available.extend(sizes)
    graph = b.build([available[-1], available[len(available) // 2]])
    for value in graph.values.values():
        if value.producer is not None and rng.random() < 0.2:
            later = graph.nodes[graph.nodes.index(value.producer):]
            value.held_until = rng.choice(later)
    graph.check()
    return graph


def random_order(graph: Graph, rng: random.Random) -> list[Node]:
    """A random topological order of the data edges (no aliases constrain liveness)."""
    done: set[Node] = set()
    order: list[Node] = []
    while len(order) < len(graph.nodes):
        ready = [n for n in graph.nodes if n not in done and all(
            v.producer is None or v.producer in done for v in n.present_inputs)]
        node = rng.choice(ready)
        done.add(node)
        order.append(node)
    return order


def brute_force_live(graph: Graph, sizes: dict[str, SymInt | None],
                     order: list[Node]) -> list[SymInt]:
    """The liveness conventions, stated directly: a storage is live from its producer's step to
    the last step of any node touching it (through any alias) or holding it; outputs to the end."""
    step = {node: i for i, node in enumerate(order)}
    end = len(order) - 1
    span: dict[Value, list[int]] = {}
    for node in order:
        for value in node.outputs:
            if value.alias_of is None and value.role not in RESIDENT_ROLES:
                span[value] = [step[node], step[node]]
    for node in order:
        for value in (*node.present_inputs, *node.outputs):
            if value.storage in span:
                last = step[value.held_until] if value.held_until is not None else 0
                span[value.storage][1] = max(span[value.storage][1], step[node], last)
    for value in graph.outputs:
        if value.storage in span:
            span[value.storage][1] = end
    residents = sum((sizes[v.name] or SymInt() for v in graph.values.values()
                     if v.role in RESIDENT_ROLES and v.alias_of is None), SymInt())
    return [residents + sum((sizes[v.name] or SymInt() for v, (first, last) in span.items()
                             if first <= t <= last), SymInt()) for t in range(len(order))]


@pytest.mark.parametrize("seed", range(12))
def test_every_sweep_matches_the_brute_force_definition(seed: int) -> None:
    graph = aliased_dag(seed)
    sizes = sizes_of(graph)
    rng = random.Random(seed)
    for order in (graph.nodes, random_order(graph, rng)):
        expected = brute_force_live(graph, sizes, order)
        liveness = analyze_liveness(graph, sizes, order=order)
        assert list(liveness.live_bytes_per_step) == expected
        # the role timeline sweeps the same events, one total per role
        assert liveness.role_timeline.totals() == liveness.live_bytes_per_step
        assert role_timeline(graph, sizes, order) == liveness.role_timeline
        # the integer form at a probe value
        dims = {"batch": 7}
        model = build_memory_model(graph, sizes, dims)
        position = {name: i for i, name in enumerate(model.node_names)}
        indices = [position[n.name] for n in order]
        during, after = live_profile(model, indices)
        assert during == [s.evaluate(dims) for s in expected]
        assert after[:-1] == [d - a for d, a in zip(  # what step t+1 adds comes on top of it
            during[1:], [model.alloc_bytes[n] for n in indices[1:]], strict=True)]
        assert order_peak(model, indices)[0] == max(during)
        peak, _ = symbolic_order_peak(model, indices, sizes, liveness.resident_bytes, dims)
        assert peak.evaluate(dims) == max(during)


@pytest.mark.parametrize("seed", range(8))
def test_last_uses_come_from_one_reverse_walk(seed: int) -> None:
    graph = aliased_dag(seed, node_count=30)
    buffers = find_buffers(graph)
    order = buffers.steps(random_order(graph, random.Random(seed)))
    events = step_events(buffers, order)
    step = {node: i for i, node in enumerate(order)}
    users: dict[int, set[int]] = {}
    for node, kept in enumerate(buffers.uses):
        for buffer in kept:
            users.setdefault(buffer, set()).add(node)
    end = len(order) - 1
    for buffer, last in enumerate(events.last_step):
        expected = end if buffers.pinned[buffer] else max(step[u] for u in users[buffer])
        assert last == expected
    freed = [b for frees in events.frees for b in frees]
    assert sorted(freed) == [b for b, pinned in enumerate(buffers.pinned) if not pinned]
    assert all(b in events.frees[events.last_step[b]] for b in freed)


@pytest.mark.parametrize("seed", range(6))
def test_arena_and_lifetimes_consume_the_same_events(seed: int) -> None:
    graph = aliased_dag(seed)
    sizes = sizes_of(graph)
    model = build_memory_model(graph, sizes, {"batch": 3})
    order = greedy_order(model)
    during, _ = live_profile(model, order)
    spans = lifetimes(model, order)
    by_step = [model.resident_bytes + sum(size for (first, last), size in zip(
        spans, model.buffer_bytes, strict=True) if first <= t <= last) for t in range(len(order))]
    assert by_step == during
    plan = plan_arena(model, order)
    assert plan.live_activation_peak_bytes == max(during) - model.resident_bytes


def old_allocator_events(model: object) -> list[tuple[str, str, int]]:
    """torch_cuda's replay before the shared sweep: remaining-user counts per buffer."""
    remaining = [len(users) for users in model.users]  # type: ignore[attr-defined]
    events = []
    for node in range(model.node_count):  # type: ignore[attr-defined]
        events += [("alloc", model.buffer_names[b], model.buffer_bytes[b])  # type: ignore[attr-defined]
                   for b in model.allocates[node]]  # type: ignore[attr-defined]
        for b in model.uses[node]:  # type: ignore[attr-defined]
            remaining[b] -= 1
            if remaining[b] == 0 and not model.pinned[b]:  # type: ignore[attr-defined]
                events.append(("free", model.buffer_names[b], model.buffer_bytes[b]))  # type: ignore[attr-defined]
    return events


@pytest.mark.parametrize("seed", range(6))
def test_allocator_replay_frees_as_before(seed: int) -> None:
    from graphmem.runtime_models.torch_cuda import _step_events

    graph = aliased_dag(seed)
    model = build_memory_model(graph, sizes_of(graph), {"batch": 5})
    events = _step_events(model, step_events(model, range(model.node_count)), 0)
    replay = [(kind, name, size) for kind, (_, name), size in events]  # type: ignore[misc]
    pinned_frees = [("free", model.buffer_names[b], model.buffer_bytes[b])
                    for b, pinned in enumerate(model.pinned) if pinned]
    assert replay == old_allocator_events(model) + pinned_frees


# ----- what-ifs are pure ------------------------------------------------------------------------
def snapshot(graph: Graph) -> list[object]:
    """Everything liveness reads from a graph, by identity."""
    state: list[object] = [list(graph.nodes), list(graph.outputs)]
    for value in graph.values.values():
        state.append((value.name, value.role, value.alias_of, value.held_until, value.producer,
                      list(value.consumers)))
    return state


def mutated_peak(graph: Graph, sizes: dict[str, SymInt | None], out: Value,
                 victim: Value) -> SymInt:
    """The what-if as it was answered before: the graph changed, liveness run, then undone."""
    out.alias_of = victim
    try:
        return analyze_liveness(graph, sizes).peak_bytes
    finally:
        out.alias_of = None


@pytest.mark.parametrize("seed", range(10))
def test_alias_overrides_answer_what_the_mutation_did(seed: int) -> None:
    graph = aliased_dag(seed)
    sizes = sizes_of(graph)
    before = snapshot(graph)
    tried = 0
    for node in graph.nodes:
        out, victim = node.outputs[0], node.inputs[0]
        if out.alias_of is not None or victim is None or victim.role is not Role.ACTIVATION:
            continue
        pure = analyze_liveness(graph, sizes, aliases={out: victim})
        assert snapshot(graph) == before
        assert pure.peak_bytes == mutated_peak(graph, sizes, out, victim)
        assert pure.role_timeline.totals() == pure.live_bytes_per_step
        tried += 1
    assert tried >= 3


def test_the_inplace_what_if_leaves_the_graph_as_it_was() -> None:
    b = GraphBuilder("relu chain")
    b.tensor("x", 4, Role.INPUT)
    b.node("conv", ["x"], {"a": 100}, op_type="Conv")
    b.node("relu", ["a"], {"r": 100})  # a dies here: relu could write into it
    b.node("fc", ["r"], {"y": 10}, op_type="MatMul")
    graph = b.build(["y"])
    sizes = sizes_of(graph)
    before = snapshot(graph)
    found = find_inplace(graph, sizes, graph.nodes)
    assert snapshot(graph) == before
    # x 16 B; conv: + a 400 = 416; relu: + r 400 = 816 (the peak); fc: a freed, + y 40 = 456.
    # relu in place (r shares a's storage): 416, 416, then fc 16 + 400 + 40 = 456, the new peak
    assert [(c.node, c.input_name, c.saves_bytes, c.new_peak_bytes) for c in found] == [
        ("relu", "a", 816 - 456, 456)]
