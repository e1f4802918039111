"""The page's FLOPs by op (report/html/nodes.py `op_table`), summed per kind of node where
every count is a number: the same table, to the last field and in the same order, as the
counts summed node by node (`_node_totals`). Checked on the samples (bound and free dims,
inference and training) and on random nodes drawn from a sample's costs with awkward counts:
Fractions, zeros, statuses not counted, ops outside ai.onnx, repeated kinds.
"""

from __future__ import annotations

import random
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from graphmem.api import analyze_onnx
from graphmem.core.symbolic import SymInt
from graphmem.passes.costs import CostStatus
from graphmem.report.html import nodes

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _by_node(costs):  # type: ignore[no-untyped-def]
    return nodes._op_table(*nodes._node_totals(costs))


@pytest.mark.parametrize(("sample", "options"), [
    ("tiny_cnn.onnx", {"batch": 8, "gpu": "t4"}),
    ("tiny_gpt.onnx", {}),  # free dims: counts are formulas, summed node by node
    ("tiny_gpt.onnx", {"batch": 2, "gpu": "a100-80gb", "train": True}),
    ("tiny_llama.onnx", {"gpu": "t4"}),
])
def test_op_table_is_the_node_by_node_sums(sample: str, options: dict) -> None:  # type: ignore[type-arg]
    analysis = analyze_onnx(SAMPLES / sample, **options)
    table = nodes.op_table(analysis.costs, analysis.roofline)
    assert repr(table) == repr(_by_node(analysis.costs))  # types too: 3 == 3.0, not in repr
    assert table.rows  # every sample has FLOPs


@pytest.mark.parametrize("seed", range(10))
def test_op_table_per_kind_on_random_nodes(seed: int) -> None:
    rng = random.Random(seed)
    analysis = analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=8, gpu="t4")
    costs = analysis.costs
    counts = (0, 1, 7, 10**20, Fraction(3, 2), Fraction(5, 4))
    drawn = []
    for index in range(rng.randint(1, 200)):
        cost = rng.choice(costs.nodes)
        changes: dict[str, object] = {"name": f"n{index}"}
        if rng.random() < 0.3:
            changes["macs"] = SymInt.const(rng.choice(counts))
        if rng.random() < 0.3:
            changes["flops"] = SymInt.const(rng.choice(counts))
        if rng.random() < 0.15:
            changes["status"] = rng.choice([s for s in CostStatus if s is not CostStatus.OK])
        if rng.random() < 0.15:
            changes["domain"] = rng.choice(("com.microsoft", "ai.onnx", ""))
        drawn.append(replace(cost, **changes))
    drawn_costs = replace(costs, nodes=tuple(drawn))
    table = nodes.op_table(drawn_costs)
    assert repr(table) == repr(_by_node(drawn_costs))
    # the per-kind path was taken: every count here is a number
    assert all(c.macs.is_constant and c.flops.is_constant for c in drawn)
