"""Liveness: hand-worked peaks and invariants that must hold on any graph."""

import pytest

from graphmem.core.ir import RESIDENT_ROLES, Graph, Role
from graphmem.core.symbolic import SymInt
from graphmem.passes.liveness import analyze_liveness
from tests.builders import GraphBuilder, sizes_of
from tests.helpers.graphs import random_dag


def chain_graph() -> Graph:
    b = GraphBuilder("chain")
    b.tensor("x", 4, Role.INPUT)  # 16 B
    b.tensor("w", 10, Role.PARAMETER)  # 40 B
    b.node("A", ["x", "w"], {"a": 25})  # 100 B
    b.node("B", ["a"], {"b": 50})  # 200 B
    b.node("C", ["b"], {"c": 12})  # 48 B
    return b.build(["c"])


def test_chain_peak_by_hand() -> None:
    result = analyze_liveness(chain_graph(), sizes_of(chain_graph()))
    # residents: x 16 + w 40 = 56 B
    # step 0 A: 56 + a 100 = 156
    # step 1 B: 56 + a 100 + b 200 = 356  <- peak (a is B's input, b its output)
    # step 2 C: 56 + b 200 + c 48 = 304
    assert [int(s) for s in result.live_bytes_per_step] == [156, 356, 304]
    assert result.peak_step == 1 and int(result.peak_bytes) == 356
    assert int(result.activation_peak_bytes) == 300
    assert int(result.resident_bytes) == 56
    # lower bound: the largest node working set is B's (100 + 200) on top of 56
    assert int(result.lower_bound_bytes) == 356
    live = {t.name: t for t in result.live_at_peak}
    assert set(live) == {"x", "w", "a", "b"}
    assert live["a"].producer == "A" and live["a"].last_consumer == "B"
    assert [t.name for t in result.live_at_peak][:2] == ["b", "a"]  # largest first
    breakdown = {role: int(size) for role, size in result.breakdown_at_peak.items()}
    assert breakdown == {Role.INPUT: 16, Role.PARAMETER: 40, Role.ACTIVATION: 300}


def test_outputs_stay_live_to_the_end_and_unread_outputs_die_at_once() -> None:
    b = GraphBuilder("outputs")
    b.tensor("x", 1, Role.INPUT)  # 4 B
    b.node("A", ["x"], {"early_out": 100, "unused": 1000})  # 400 B + 4000 B
    b.node("B", ["x"], {"tail": 10})  # 40 B
    graph = b.build(["early_out", "tail"])
    result = analyze_liveness(graph, sizes_of(graph))
    # step 0: 4 + 400 + 4000 = 4404; step 1: unused freed, early_out stays: 4 + 400 + 40 = 444
    assert [int(s) for s in result.live_bytes_per_step] == [4404, 444]


def test_symbolic_peak_is_a_formula_in_batch() -> None:
    batch = SymInt.symbol("batch")
    b = GraphBuilder("sym")
    b.tensor("x", batch * 3, Role.INPUT)  # 12*batch B
    b.tensor("w", 100, Role.PARAMETER)  # 400 B
    b.node("A", ["x", "w"], {"a": batch * 10})  # 40*batch
    b.node("B", ["a"], {"b": batch * 5})  # 20*batch
    graph = b.build(["b"])
    result = analyze_liveness(graph, sizes_of(graph))
    # peak at B: 400 + 12b + 40b + 20b = 400 + 72*batch
    assert result.peak_bytes == batch * 72 + 400
    assert result.peak_step == 1
    # binding batch=8 afterwards gives what a bound analysis gives: 400 + 576 = 976
    assert result.peak_bytes.evaluate({"batch": 8}) == 976


def brute_force_live_bytes(graph: Graph, step: int) -> int:
    """By definition: residents, plus every activation whose producer step <= step <= last use."""
    position = {node: i for i, node in enumerate(graph.nodes)}
    end = len(graph.nodes) - 1
    total = 0
    for value in graph.values.values():
        size = int(value.nbytes or 0)
        if value.role in RESIDENT_ROLES:
            total += size
            continue
        born = position[value.producer]  # type: ignore[index]
        uses = [position[c] for c in value.consumers]
        dies = end if value.role is Role.OUTPUT else max(uses, default=born)
        total += size if born <= step <= dies else 0
    return total


@pytest.mark.parametrize("seed", range(20))
def test_invariants_on_random_graphs(seed: int) -> None:
    graph = random_dag(seed)
    result = analyze_liveness(graph, sizes_of(graph))
    steps = [int(s) for s in result.live_bytes_per_step]
    assert steps == [brute_force_live_bytes(graph, i) for i in range(len(graph.nodes))]
    peak = int(result.peak_bytes)
    assert peak == max(steps)
    assert peak >= int(result.lower_bound_bytes)
    resident = int(result.resident_bytes)
    for node in graph.nodes:  # the lower bound is at least every single node's working set
        touched = {v for v in (*node.present_inputs, *node.outputs) if v.role not in RESIDENT_ROLES}
        assert int(result.lower_bound_bytes) >= resident + sum(int(v.nbytes) for v in touched)
    assert sum(int(t.nbytes) for t in result.live_at_peak) == peak


def test_views_allocate_nothing_and_keep_their_base_alive() -> None:
    b = GraphBuilder("views")
    b.tensor("x", 1, Role.INPUT)  # 4 B
    b.node("A", ["x"], {"a": 25})  # 100 B
    view = b.node("V", ["a"], {"a_view": 25}, op_type="view")
    view.outputs[0].alias_of = b.values["a"]
    b.node("C", ["x"], {"c": 50})  # 200 B, while a is kept alive by the view's reader
    b.node("D", ["a_view", "c"], {"d": 1})  # 4 B
    graph = b.build(["d"])
    result = analyze_liveness(graph, sizes_of(graph))
    # step 0 A: 4 + 100 = 104; step 1 V: the view adds 0 -> 104;
    # step 2 C: a still live (read through its view at step 3): 4 + 100 + 200 = 304
    # step 3 D: 4 + 100 + 200 + 4 = 308
    assert [int(s) for s in result.live_bytes_per_step] == [104, 104, 304, 308]
    assert "a_view" not in {t.name for t in result.live_at_peak}


def test_in_place_update_of_a_resident_allocates_nothing() -> None:
    b = GraphBuilder("inplace")
    b.tensor("p", 10, Role.PARAMETER)  # 40 B
    b.tensor("g", 10, Role.INPUT)  # 40 B
    update = b.node("sgd", ["p", "g"], {"p_new": 10}, op_type="add_")
    update.outputs[0].alias_of = b.values["p"]
    graph = b.build(["p_new"])
    result = analyze_liveness(graph, sizes_of(graph))
    assert [int(s) for s in result.live_bytes_per_step] == [80]


def test_value_size_follows_a_replaced_shape_or_dtype() -> None:
    # nbytes is cached per (shape, dtype) object: [2, 3] float32 = 6*4 = 24 bytes; a new
    # shape [4, 3] gives 48; float16 gives 4*3*2 = 24.
    from graphmem.core.ir import DType, Role, Value
    from graphmem.core.symbolic import SymInt

    value = Value("x", DType.FLOAT32, (SymInt.const(2), SymInt.const(3)), Role.ACTIVATION)
    assert value.nbytes == SymInt.const(24)
    value.shape = (SymInt.const(4), SymInt.const(3))
    assert value.nbytes == SymInt.const(48)
    value.dtype = DType.FLOAT16
    assert value.nbytes == SymInt.const(24)
    value.shape = (None, SymInt.const(3))
    assert value.nbytes is None
