"""What a new reader of the HTML report tripped over, each fixed and kept fixed: a peak that
depends on the free dims as one readable formula, no number shown twice in the summary, labels
that do not collide or spill out of the charts, the GPU line in a batch sweep."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from graphmem.passes import liveness
from graphmem.pipeline.analysis import Analysis, analyze_onnx
from graphmem.report.html.extras import sweep_view
from graphmem.report.html.page import PROBE_DIM_VALUE, build_view, render_html
from graphmem.report.json.report import to_dict
from tests.test_html_report import check_page
from tests.test_html_sections import TINY_CNN, training  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(TINY_CNN is None, reason="samples/tiny_cnn.onnx is missing")
MIB = 1 << 20


@pytest.fixture(scope="module")
def free_batch() -> Analysis:
    assert TINY_CNN is not None
    return analyze_onnx(TINY_CNN)  # batch left free: sizes are formulas in it


def _visible_text(page: str) -> str:
    """The report's sections as text: no tags, attributes (tooltips) or conventions."""
    body = page[page.index("<body>"): page.index('id="method"')]  # less the conventions
    return re.sub(r"<[^>]*>", " ", body)


def test_a_peak_with_candidate_steps_reads_as_one_formula(free_batch: Analysis) -> None:
    # gpt2.onnx with batch and seq free has 14 candidate peak steps: the headline showed
    # max(f1, ..., f14), a column of formulas taller than the screen
    report = copy.deepcopy(to_dict(free_batch))
    at_step = report["memory"]["peak_bytes"]
    report["memory"]["peak_candidates"] = [at_step, "100*batch + 900000"]
    view = build_view(free_batch, report)
    peak_fact = next(f for f in view.headline if f.label == "peak memory")
    assert peak_fact.value == view.summary.peak.text  # the step's own formula, not max(...)
    assert "max(" not in peak_fact.value and "1 of 2 candidate steps" in peak_fact.detail
    assert view.summary.peak.exact.startswith("max(")  # the exact value stays, as a tooltip
    page = render_html(free_batch, report)
    check_page(page)
    assert "max(" not in _visible_text(page)
    # both candidates are listed, behind a <details>: 100*batch + 900000 = 100 B*batch + 878.9 KiB
    candidates = page[page.index('class="candidates"'): page.index('class="columns"')]
    assert "The 2 candidate peak formulas" in candidates and candidates.count("<li>") == 2


def test_the_summary_does_not_repeat_the_headline(free_batch: Analysis) -> None:
    view = build_view(free_batch)
    headline = {fact.label for fact in view.headline}
    assert {"parameters", "FLOPs", "peak memory"} <= headline
    assert not headline & {stat.label for stat in view.summary.stats}
    assert [s.label for s in view.summary.stats] == [
        "MACs", "activations at peak", "residents", "lower bound"]


def test_charts_are_drawn_where_the_peak_step_was_chosen(free_batch: Analysis) -> None:
    # at batch=1 the marked peak step need not be the highest point drawn; the liveness pass
    # picks it with the free dims at its probe value, so the charts use the same one
    assert PROBE_DIM_VALUE == liveness._PROBE_DIM_VALUE
    timeline = build_view(free_batch).timeline
    ys = [float(point.split(",")[1]) for point in timeline.line_points.split()]
    assert timeline.peak_y == pytest.approx(min(ys), abs=0.05)  # SVG y grows downwards
    assert "Drawn at batch=64" in render_html(free_batch)


def test_phase_labels_sit_at_the_foot_of_the_plot_and_inside_it(training: Analysis) -> None:  # noqa: F811
    page = render_html(training)
    view = build_view(training)
    t = view.timeline
    labels = re.findall(r'<text class="band-label" x="([\d.]+)" y="([\d.]+)"'
                        r'( text-anchor="end")?>(\w+)</text>', page)
    assert {label for *_, label in labels} == {"forward", "backward", "optimizer"}
    for x, y, end, label in labels:
        # clear of the peak's label, which sits above the peak near the top of the plot
        assert float(y) == pytest.approx(t.bottom - 6)
        right_edge = float(x) if end else float(x) + 8 * len(label)  # ~7 px a character
        assert t.left <= float(x) and right_edge <= t.right, label


def _with_runtime(report: dict[str, Any]) -> dict[str, Any]:
    report = copy.deepcopy(report)
    report["memory"]["runtime"] = {
        "name": "torch-cuda", "tensors_at_peak_bytes": 14 * MIB,
        "allocator_overhead_bytes": 4 * MIB, "context_workspaces_bytes": 711 * MIB,
        "total_device_bytes": 729 * MIB, "capacity_bytes": 1024 * MIB}
    return report


def test_runtime_bar_names_only_the_segments_wide_enough(training: Analysis) -> None:  # noqa: F811
    # 14 MiB of 1 GiB is 1.4% of the bar: its name was cut to "ten" and overlapped the next
    page = render_html(training, _with_runtime(to_dict(training)))
    check_page(page)
    bar = page[page.index('class="runtime-bar"'): page.index('class="compact gpu-lines"',
                                                               page.index('id="runtime"'))]
    assert '<span class="rt-text">context + workspaces</span>' in bar  # 711/1024 = 69%
    assert '<span class="rt-text">tensors at peak</span>' not in bar
    assert '<span class="rt-text">allocator overhead</span>' not in bar
    assert 'title="tensors at peak: 14.0 MiB"' in bar  # still named on hover and in the table


def _sweep(usable_bytes: int) -> dict[str, Any]:
    return {"sweep": {"dim": "batch", "saturates_at": 1, "points": [
        {"value": b, "peak_bytes": b * 100 * MIB, "fits": True, "est_latency_s": None,
         "est_throughput_per_s": None} for b in (1, 2, 4, 8)]},
        "gpu": {"usable_bytes": usable_bytes, "max_batch": None}}


def test_a_sweep_keeps_the_gpu_line_in_view_up_to_10x() -> None:
    # gpt2 at seq=512 peaks at 6.8 GiB at batch 64 on a 38.7 GiB A100: the line, 5.7x the
    # highest point, was left out, and a sweep is read against it
    near = sweep_view(_sweep(6 * 800 * MIB))  # 6x the largest peak (800 MiB)
    assert near is not None and near.chart.limit_y is not None
    assert near.chart.limit_y < min(p.y for p in near.chart.points)  # above every point
    far = sweep_view(_sweep(11 * 800 * MIB))
    assert far is not None and far.chart.limit_y is None
    assert far.chart.limit_note == "far above the chart"
    assert near.saturation_percent == 90  # passes/sweep.py SATURATION_SHARE, said in words


def test_flops_with_unsupported_nodes_read_as_a_lower_bound(free_batch: Analysis) -> None:
    # a custom-domain op has no cost rule: the total leaves it out, so it is "at least"
    report = copy.deepcopy(to_dict(free_batch))
    node = report["nodes"][0]
    node.update(status="unsupported", domain="com.example", op="FancyAct")
    report["unsupported_ops"] = {"com.example.FancyAct": 1}
    flops = next(f for f in build_view(free_batch, report).headline if f.label == "FLOPs")
    assert flops.value.startswith("\u2265 ") and "1 unsupported node not counted" in flops.detail
    clean = next(f for f in build_view(free_batch).headline if f.label == "FLOPs")
    assert not clean.value.startswith("\u2265") and "not counted" not in clean.detail
