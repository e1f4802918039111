"""The HTML's node data written as text per kind of node (report/html/nodes.py `_RowTexts`)
is byte for byte the encoder's text of every row as `node_row(...).data()` makes it, for
names, module paths, phases and times the samples do not have."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from graphmem.api import analyze_onnx
from graphmem.report.html import nodes

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
# quotes, backslashes, markup, controls, line separators, astral and invalid-looking text
NAMES = ("", "a", 'q"uote', "back\\slash", "</script>", "a&b", "tab\there", "nl\nx",
         "\u2028\u2029", "\x00\x1f\x7f", "caf\u00e9", "\U0001f600", "\ud800", "x" * 300)
TIMES = (0.0, -0.0, 1e-300, 5e-324, 1.5, 2.0**60, math.inf, math.nan)


@pytest.fixture(scope="module")
def analysis():  # type: ignore[no-untyped-def]
    return analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=8, gpu="t4")


@pytest.mark.parametrize("seed", range(6))
def test_row_texts_are_the_rows_encoded(analysis, seed: int,  # type: ignore[no-untyped-def]
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pick = random.Random(seed).choice
    costs = [replace(cost, name=pick(NAMES), module_path=pick(NAMES),
                     param_count=pick((0, 1, 10**20)))
             for cost in analysis.costs.nodes * 3]
    with_times = seed % 2 == 0
    times = [replace(analysis.roofline.nodes[0], est_time_s=pick(TIMES),
                     bound=pick(("compute", "memory"))) for _ in costs] if with_times else None
    phases = [pick(("", "forward", "back<ward>")) for _ in costs]
    monkeypatch.setattr(nodes, "MAX_NODE_ROWS", seed)  # 0 to 5 rows as HTML, the rest as text
    table = nodes.node_table(replace(analysis.costs, nodes=tuple(costs)),
                             replace(analysis.roofline, nodes=tuple(times)) if times else None,
                             phases)
    rows = [nodes.node_row(step, cost, None if times is None else times[step], phase).data()
            for step, (cost, phase) in enumerate(zip(costs, phases, strict=True))]
    assert str(table.data) == str(nodes.script_json(rows))
