"""The nodes' kinds (report/node_kinds.py), which the JSON and HTML writers encode once each:
nodes of one kind must write the same fields, so each node's row is its kind's first node's
row with the node's own name and module path. Checked on random nodes drawn from a sample's
costs and times, with the values a dict key would merge but the encoder writes apart (0.0 and
-0.0, 1 and 1.0, NaN, None), and the one-entry cache by identity: a replaced result is a new
analysis, never served the last one's kinds.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from graphmem.api import analyze_onnx
from graphmem.core.symbolic import SymInt
from graphmem.report.json.report import _node
from graphmem.report.json.rows import item
from graphmem.report.node_kinds import node_kinds, shared_node_kinds

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
AWKWARD = (0.0, -0.0, 1, 1.0, True, 2.5e-9, math.inf, -math.inf, math.nan, None)


@pytest.fixture(scope="module")
def analysis():  # type: ignore[no-untyped-def]
    return analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=8, gpu="t4")


def _random_rows(analysis, seed: int):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    costs, times = analysis.costs.nodes, analysis.roofline.nodes
    nodes, node_times = [], []
    for index in range(rng.randint(1, 300)):
        cost = rng.choice(costs)
        changes = {"name": f"n{index}", "module_path": rng.choice(("", "a", "a.b"))}
        if rng.random() < 0.3:  # equal counts as other objects, or other counts
            changes["macs"] = SymInt.const(rng.choice((0, 1, int(cost.macs) if
                                                       cost.macs.is_constant else 7)))
        if rng.random() < 0.2:
            changes["param_count"] = rng.choice((0, 1, 10**20))
        nodes.append(replace(cost, **changes))
        time = rng.choice(times)
        node_times.append(replace(time, est_time_s=rng.choice(AWKWARD[:-1]),
                                  intensity_flops_per_byte=rng.choice(AWKWARD)))
    return nodes, node_times


@pytest.mark.parametrize("seed", range(8))
def test_a_kinds_nodes_write_alike(analysis, seed: int) -> None:  # type: ignore[no-untyped-def]
    nodes, times = _random_rows(analysis, seed)
    use_times = seed % 3 != 0
    kinds = node_kinds(nodes, times if use_times else None)
    assert len(kinds.of_node) == len(nodes)
    assert [kinds.of_node[i] for i in kinds.first] == list(range(len(kinds.first)))
    for index, kind in enumerate(kinds.of_node):
        first = kinds.first[kind]
        assert first <= index
        cost = replace(nodes[first], name=nodes[index].name,
                       module_path=nodes[index].module_path)
        mine, theirs = (times[index], times[first]) if use_times else (None, None)
        assert item(_node(nodes[index], mine)) == item(_node(cost, theirs))


def test_values_written_apart_are_kinds_apart(analysis) -> None:  # type: ignore[no-untyped-def]
    cost, time = analysis.costs.nodes[0], analysis.roofline.nodes[0]
    values = (0.0, -0.0, 1, 1.0, 0, float("nan"), float("nan"))  # NaN objects: each its own
    times = [replace(time, est_time_s=value) for value in values]
    assert node_kinds([cost] * len(times), times).of_node == [0, 1, 2, 3, 4, 5, 6]
    same = [replace(time, est_time_s=2.5, intensity_flops_per_byte=2.0 ** 0.5)
            for _ in range(3)]
    assert node_kinds([cost] * 3, same).of_node == [0, 0, 0]


def test_the_cache_serves_only_the_same_results(analysis) -> None:  # type: ignore[no-untyped-def]
    with_times = shared_node_kinds(analysis.costs, analysis.roofline)
    assert shared_node_kinds(analysis.costs, analysis.roofline) is with_times
    without = shared_node_kinds(analysis.costs, None)
    assert without is not with_times
    assert shared_node_kinds(analysis.costs, None) is without
    renamed = replace(analysis.costs, nodes=analysis.costs.nodes[:3])
    assert len(shared_node_kinds(renamed, None).of_node) == 3
    slower = replace(analysis.roofline, nodes=tuple(
        replace(t, est_time_s=1.0 + i) for i, t in enumerate(analysis.roofline.nodes)))
    kinds = shared_node_kinds(analysis.costs, slower)
    assert len(kinds.first) == len(analysis.costs.nodes)  # every time its own
