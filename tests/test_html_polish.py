"""Rough edges of the HTML report a reviewer found, each fixed and kept fixed: the per-GPU and
KV-cache sections laid out like the rest (not field/value dumps with [] and None), "µs" for
microseconds, timeline ticks that switch units (1.5 GiB, not 1500 MiB), and a node table that
shows a known zero as 0 and an unknown as a dash."""

from __future__ import annotations

import copy
import html
import re
from typing import Any

import pytest

from graphmem.core.units import format_bytes
from graphmem.distributed.attach import kv_shape, with_distributed, with_kv_cache
from graphmem.distributed.strategies import DistributedConfig
from graphmem.pipeline.analysis import Analysis
from graphmem.report.html.charts import byte_ticks
from graphmem.report.html.nodes import node_table
from graphmem.report.html.page import build_view, render_html
from graphmem.report.html.quantity import format_time
from graphmem.report.json.report import to_dict
from graphmem.report.terminal.plan import format_seconds
from tests.test_html_report import check_page
from tests.test_html_sections import TINY_CNN, inference, training  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(TINY_CNN is None, reason="samples/tiny_cnn.onnx is missing")
MIB, GIB = 1 << 20, 1 << 30
DASH = "\u2013"


def _section(page: str, start: str, end: str) -> str:
    return page[page.index(start): page.index(end)]


def _text(fragment: str) -> str:
    """What a reader sees: no tags, tooltips or runs of spaces."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]*>", " ", fragment)))


# ----- 1. per GPU ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def zero3(training: Analysis) -> Analysis:  # noqa: F811
    return with_distributed(training, DistributedConfig(strategy="zero3", gpus=8))


def test_per_gpu_section_is_a_table_of_the_parts(zero3: Analysis) -> None:
    page = render_html(zero3)
    check_page(page)
    section = _section(page, 'id="more-memory"', 'id="nodes"')
    text = _text(section)
    rank = zero3.distributed.per_rank
    for label, size in (("parameters", rank.parameters_bytes),
                        ("gradients", rank.gradients_bytes),
                        ("optimizer state", rank.optimizer_state_bytes),
                        ("optimizer temporaries", rank.temporaries_bytes),
                        ("activations", rank.activations_bytes),
                        ("gathered parameters", rank.gathered_bytes),
                        ("communication buckets", rank.buckets_bytes),
                        ("total per GPU", rank.total_bytes)):
        # each part formatted, its exact byte count as the tooltip
        assert re.search(rf"{label}</th><td class=\"r\"><span class=\"num\" "
                         rf"title=\"{size:,} bytes\">{re.escape(format_bytes(size))}</span>",
                         section), label
    assert "zero3 on N = 8 data-parallel ranks \u00d7 T = 1 tensor parallel (8 GPUs)" in text
    assert f"peaks at step {rank.peak_step}, {rank.peak_node}" in text
    # the "fewest GPUs" table: one row per strategy, tiny_cnn fits on one T4 with each
    fits = _section(section, 'id="fit-by-strategy"', 'id="kv-cache"' if "kv-cache" in section
                    else "</section>")
    for row in zero3.distributed.fit_by_strategy:
        assert f"<td>{row.strategy}</td>" in fits
        assert format_bytes(row.per_rank_total_bytes) in fits
    assert "14.3 GiB usable on each" in _text(fits)  # the T4's usable memory
    # the old field/value dump: no list or None printed, no raw keys
    assert "[]" not in section and "None" not in text and "replicated matmul" not in text
    assert "field" not in text.lower().split()


def test_per_gpu_without_a_gpu_has_no_fit_table(zero3: Analysis) -> None:
    report = copy.deepcopy(to_dict(zero3))
    report["memory"]["fit_by_strategy"] = None  # distributed_json.fit_json without --gpu
    report["memory"]["per_rank"]["replicated_matmul_weights"] = ["fc.weight"]
    page = render_html(zero3, report)
    check_page(page)
    section = _section(page, 'id="more-memory"', 'id="nodes"')
    assert 'id="per-gpu"' in section and 'id="fit-by-strategy"' not in section
    assert "None" not in _text(section)
    assert "Replicated (no dim divisible by T): fc.weight" in _text(section)


def test_a_generic_table_shows_empty_lists_and_none_as_a_dash() -> None:
    from graphmem.report.html.extras import generic_table

    table = generic_table("x", {"weights": [], "reason": None, "names": ["a"]})
    assert table is not None
    assert [row[1].text for row in table.rows] == [DASH, DASH, '["a"]']


# ----- 1. KV cache -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kv(inference: Analysis) -> Analysis:  # noqa: F811
    # tiny llama of tests/torch_models/hf.py: 2 layers, 2 KV heads, head dim 32, float32
    return with_kv_cache(inference, kv_shape(2, 2, 32, "float32", "model.config"), batch=1)


def test_kv_cache_reads_as_the_formula_in_words(kv: Analysis) -> None:
    page = render_html(kv)
    check_page(page)
    section = _section(page, 'id="kv-cache"', 'id="nodes"')
    text = _text(section)
    # 2 (K and V) x 2 layers x 2 KV heads x 32 head dim x 4 B = 1,024 B = 1.0 KiB a token
    words = " x ".join(("2 (K and V)", "2 layers", "batch", "2 KV heads", "32 head dim",
                        "context", "4 B (float32) = 1.0 KiB per token per sequence"))
    assert words.replace(" x ", " \u00d7 ") in text
    assert "at batch 1 1.0 KiB \u00d7 context tokens" in text
    assert "1024*context" not in text and "1024*batch*context" not in text
    report = kv.kv_cache
    assert report.max_context is not None
    # (usable - base) // 1,024 tokens: 15 M on a T4 for a model of a few MiB
    assert f"longest context that fits {report.max_context:,} tokens" in text
    assert report.max_context == (report.usable_bytes - report.base_bytes) // 1024
    assert "None" not in text and "[]" not in text and DASH not in text


def test_kv_cache_without_a_gpu_says_why_there_is_no_longest_context(kv: Analysis) -> None:
    report = copy.deepcopy(to_dict(kv))
    report["memory"]["kv_cache"].update(
        max_context=None, usable_bytes=None, base_bytes=None,
        max_context_reason="give --gpu to get the longest context that fits")
    page = render_html(kv, report)
    check_page(page)
    text = _text(_section(page, 'id="kv-cache"', 'id="nodes"'))
    assert "Longest context that fits: give --gpu to get the longest context that fits." in text
    assert "usable on the GPU" not in text and "None" not in text


# ----- 2. time units ---------------------------------------------------------------------------


def test_html_times_use_the_micro_sign_and_the_terminal_keeps_us() -> None:
    assert format_time(5.72e-05) == "57.2 \u00b5s" and format_seconds(5.72e-05) == "57.2 us"
    for seconds in (3.0, 0.0123, 2e-09):  # the same digits in every other unit
        assert format_time(seconds) == format_seconds(seconds)


def test_the_page_has_no_us(training: Analysis) -> None:  # noqa: F811
    page = render_html(training)  # a T4: est. latency and a time per node
    view = build_view(training)
    assert view.nodes.has_times
    times = [row.time_text for row in view.nodes.rows if row.time_text]
    assert any(t.endswith(" \u00b5s") for t in times)
    assert not any(t.endswith(" us") for t in times)
    assert not re.search(r"\d us\b", page)


# ----- 3. timeline ticks -----------------------------------------------------------------------


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


def test_timeline_ticks_never_read_1000_or_more_of_a_unit(training: Analysis) -> None:  # noqa: F811
    from graphmem.report.html.page import timeline_chart

    live = [100 * MIB, 1400 * MIB, 900 * MIB]  # peak 1.37 GiB: the chart's top is 1.5 GiB
    chart = timeline_chart(live, 50 * MIB, 1, None, lambda step: f"step {step}")
    labels = [tick.label for tick in chart.y_ticks]
    assert labels == ["0", "512 MiB", "1 GiB", "1.5 GiB"]


# ----- 4. node table ---------------------------------------------------------------------------


def _node(**fields: Any) -> dict[str, Any]:
    node = {"name": "n", "output_shapes": ["[1]"], "params": 0, "macs": 0, "flops": 0,
            "output_bytes": 4, "status": "ok", "note": ""}
    node.update(fields)
    return node


def test_node_table_shows_a_known_zero_as_0_and_an_unknown_as_a_dash(
        inference: Analysis) -> None:  # noqa: F811
    page = render_html(inference)
    rows = re.findall(r'<tr id="node-\d+">(.*?)</tr>', page, re.S)
    assert rows
    relu = next(r for r in rows if "<td>Relu</td>" in r)  # counts FLOPs, no MACs, no params
    cells = re.findall(r'<td class="r" data-sort="[^"]*">(.*?)</td>', relu, re.S)
    params, macs = cells[0], cells[1]  # params, MACs, FLOPs, output bytes
    assert params == "0" and macs == '<span class="num" title="0 MACs">0</span>'
    ops = build_view(inference).ops
    assert any(row.macs.text == "0" for row in ops.rows)  # "Where the FLOPs go" prints 0 too
    # a node whose count is unknown: a dash in the HTML and in the script's data
    table = node_table([_node(macs=None)], ["Custom"], [""])
    assert table.rows[0].macs.exact is None and table.rows[0].data()[7] == -1


def test_the_script_renders_zero_and_unknown_like_the_html(
        inference: Analysis, tmp_path) -> None:  # noqa: F811
    # the script re-renders the node table from its JSON data: the same 0 and dash
    import shutil
    from pathlib import Path

    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.skip("chromium is not installed")
    report = copy.deepcopy(to_dict(inference))
    relu = next(n for n in report["nodes"] if n["op"] == "Relu")
    relu.update(status="unsupported", macs=None, flops=None)  # no cost rule: not counted
    path = tmp_path / "r.html"
    path.write_text(render_html(inference, report), encoding="utf-8")
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
    unknown = by_name[relu["name"]]
    assert unknown[6:8] == ["not counted", "not counted"]  # MACs, FLOPs: no rule, never 0
    known = next(row for row in cells if row[2] == "Relu" and row[1] != relu["name"])
    assert known[5] == "0" and known[6] == "0"  # params and MACs: known zeros, as in the HTML
    assert known[7].endswith("FLOP") and known[7] != "0 FLOP"
