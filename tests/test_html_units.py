"""Numbers as the HTML report writes them: "µs" for microseconds (the terminal keeps "us"),
timeline ticks that switch units (1.5 GiB, not 1500 MiB), and a node table that shows a known
zero as 0 and an unknown count as "not counted", in the HTML and in the script alike."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from graphmem.core.symbolic import SymInt
from graphmem.passes.costs import CostStatus, NodeCost
from graphmem.pipeline.analysis import Analysis
from graphmem.report.html.charts import byte_ticks, timeline_chart
from graphmem.report.html.nodes import node_row
from graphmem.report.html.page import render_html
from graphmem.report.html.quantity import format_time
from graphmem.report.html.view import build_view
from graphmem.report.terminal.plan import format_seconds
from tests.helpers.samples import TINY_CNN

pytestmark = pytest.mark.skipif(TINY_CNN is None, reason="samples/tiny_cnn.onnx is missing")
MIB, GIB = 1 << 20, 1 << 30


# ----- time units ------------------------------------------------------------------------------


def test_html_times_use_the_micro_sign_and_the_terminal_keeps_us() -> None:
    assert format_time(5.72e-05) == "57.2 \u00b5s" and format_seconds(5.72e-05) == "57.2 us"
    for seconds in (3.0, 0.0123, 2e-09):  # the same digits in every other unit
        assert format_time(seconds) == format_seconds(seconds)


@pytest.mark.torch
def test_the_page_has_no_us(training: Analysis) -> None:
    page = render_html(training)  # a T4: est. latency and a time per node
    view = build_view(training)
    assert view.nodes.has_times
    times = [row.time_text for row in view.nodes.rows if row.time_text]
    assert any(t.endswith(" \u00b5s") for t in times)
    assert not any(t.endswith(" us") for t in times)
    assert not re.search(r"\d us\b", page)


# ----- timeline ticks --------------------------------------------------------------------------


@pytest.mark.parametrize(("top_bytes", "labels"), [
    (1.6 * GIB, ["0", "512 MiB", "1 GiB", "1.5 GiB"]),  # was 0, 500, 1000, 1500 MiB
    (900 * MIB, ["0", "256 MiB", "512 MiB", "768 MiB"]),
    (450 * MIB, ["0", "200 MiB", "400 MiB"]),
    (60 * GIB, ["0", "20 GiB", "40 GiB", "60 GiB"]),
    (2.2 * 1024 * GIB, ["0", "1 TiB", "2 TiB"]),
])
def test_byte_ticks_switch_units(top_bytes: float, labels: list[str]) -> None:
    ticks = byte_ticks(top_bytes)
    assert [label for _, label in ticks] == labels
    for value, label in ticks[1:]:
        number, unit = label.split()
        # the label is the tick's exact value: 1.5 GiB is 1,610,612,736 bytes
        assert float(number) * {"MiB": MIB, "GiB": GIB, "TiB": 1024 * GIB}[unit] == value
        assert float(number) < 1024


def test_timeline_ticks_never_read_1000_or_more_of_a_unit() -> None:
    live = [100 * MIB, 1400 * MIB, 900 * MIB]  # peak 1.37 GiB: the chart's top is 1.5 GiB
    chart = timeline_chart(live, 50 * MIB, 1, None, lambda step: f"step {step}")
    labels = [tick.label for tick in chart.y_ticks]
    assert labels == ["0", "512 MiB", "1 GiB", "1.5 GiB"]


# ----- node table ------------------------------------------------------------------------------


def _unsupported(cost: NodeCost) -> NodeCost:
    """The node as it reads without a cost rule: its FLOPs unknown, never 0."""
    return replace(cost, status=CostStatus.UNSUPPORTED, macs=SymInt(), flops=SymInt())


def test_node_table_shows_a_known_zero_as_0_and_an_unknown_as_a_dash(
        inference: Analysis) -> None:
    page = render_html(inference)
    rows = re.findall(r'<tr id="node-\d+">(.*?)</tr>', page, re.S)
    assert rows
    relu = next(r for r in rows if "<td>Relu</td>" in r)  # counts FLOPs, no MACs, no params
    cells = re.findall(r'<td class="r" data-sort="[^"]*">(.*?)</td>', relu, re.S)
    params, macs = cells[0], cells[1]  # params, MACs, FLOPs, output bytes
    assert params == "0" and macs == '<span class="num" title="0 MACs">0</span>'
    ops = build_view(inference).ops
    assert any(row.macs.text == "0" for row in ops.rows)  # "Where the FLOPs go" prints 0 too
    # a node whose count is unknown (no rule): not counted in the HTML and the script's data
    cost = next(c for c in inference.costs.nodes if c.op_type == "Relu")
    row = node_row(0, _unsupported(cost), None)
    assert row.macs.exact is None and row.data()[7] == -1 and row.data()[8] == "not counted"


@pytest.mark.browser
@pytest.mark.slow
def test_the_script_renders_zero_and_unknown_like_the_html(
        inference: Analysis, tmp_path: Path) -> None:
    # the script re-renders the node table from its JSON data: the same 0 and dash
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.skip("chromium is not installed")
    relu = next(c for c in inference.costs.nodes if c.op_type == "Relu")
    nodes = tuple(_unsupported(c) if c is relu else c for c in inference.costs.nodes)
    analysis = replace(inference, costs=replace(inference.costs, nodes=nodes))
    path = tmp_path / "r.html"
    path.write_text(render_html(analysis), encoding="utf-8")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.goto(path.as_uri())
        page.wait_for_selector("#node-controls:not([hidden])")
        cells = page.eval_on_selector_all(
            "#node-table tbody tr",
            "rows => rows.map(r => Array.from(r.cells, c => c.textContent))")
        browser.close()
    by_name = {row[1]: row for row in cells}
    unknown = by_name[relu.name]
    assert unknown[6:8] == ["not counted", "not counted"]  # MACs, FLOPs: no rule, never 0
    known = next(row for row in cells if row[2] == "Relu" and row[1] != relu.name)
    assert known[5] == "0" and known[6] == "0"  # params and MACs: known zeros, as in the HTML
    assert known[7].endswith("FLOP") and known[7] != "0 FLOP"


# ----- rates -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("per_second", "text"), [
    (1 / 2.2, "0.455 samples/s"),  # a 2.2 s step at batch 1: it used to read "0 samples/s"
    (12.345, "12.3 samples/s"),  # three significant digits below 100
    (99.94, "99.9 samples/s"),
    (100.4, "100 samples/s"),  # whole numbers from 100 on
    (12_345.6, "12,346 samples/s"),  # with thousands separators, as the HTML always wrote them
])
def test_rates_keep_three_digits_below_a_hundred(per_second: float, text: str) -> None:
    from graphmem.core.units import format_rate

    assert format_rate(per_second, "samples/s") == text


def test_the_terminal_and_the_html_write_the_same_throughput() -> None:
    from graphmem import analyze_onnx
    from graphmem.core.units import format_rate
    from graphmem.report.terminal.plan import roofline_line

    analysis = analyze_onnx(TINY_CNN, batch=1, gpu="a100-80gb")
    roofline = analysis.roofline
    assert roofline is not None and roofline.est_throughput_per_s
    rate = format_rate(roofline.est_throughput_per_s, "samples/s")
    assert rate in roofline_line(roofline, "a100-80gb")
    latency = [f for f in build_view(analysis).facts if f.label == "est. latency"]
    assert len(latency) == 1 and rate in latency[0].detail
