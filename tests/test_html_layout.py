"""How the HTML report reads: the answer first, then where the memory goes, then the details; a
peak that depends on the free dims as one readable formula; no number shown twice at the top;
the largest tensors first with the rest behind "show all"; labels that never collide or spill
out of the charts; the GPU's line kept in view where a chart is read against it."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import pytest

from graphmem import analyze_onnx
from graphmem.core.symbolic import SymInt
from graphmem.passes import liveness
from graphmem.passes.costs import CostStatus
from graphmem.passes.sweep import SweepPoint, SweepResult
from graphmem.pipeline.analysis import Analysis
from graphmem.report.html.charts import TIMELINE_BOX, Label, place_labels, timeline_chart
from graphmem.report.html.memory import MAX_LIVE_SHOWN
from graphmem.report.html.page import render_html
from graphmem.report.html.plans import sweep_view
from graphmem.report.html.quantity import PROBE_DIM_VALUE
from graphmem.report.html.view import build_view
from graphmem.runtime_models.base import RuntimeEstimate
from tests.helpers.html_page import check_page, relu_chain
from tests.helpers.samples import TINY_CNN

pytestmark = pytest.mark.skipif(TINY_CNN is None, reason="samples/tiny_cnn.onnx is missing")
MIB, GIB = 1 << 20, 1 << 30


@pytest.fixture(scope="module")
def free_batch() -> Analysis:
    assert TINY_CNN is not None
    return analyze_onnx(TINY_CNN, gpu="t4")  # batch left free: sizes are formulas in it


def _visible_text(page: str) -> str:
    """The report's sections as text: no tags, attributes (tooltips) or conventions."""
    body = page[page.index("<body>"): page.index('id="method"')]  # less the conventions
    return re.sub(r"<[^>]*>", " ", body)


# ----- the order a reader asks in ------------------------------------------------------------


def test_the_page_opens_with_the_answer_then_where_the_memory_goes(inference: Analysis) -> None:
    page = render_html(inference)
    sections = re.findall(r'<section id="([\w-]+)"', page)
    # with a GPU the runtime model gives the verdict's device total: its section follows
    assert sections == ["summary", "modules", "roles", "live", "timeline", "runtime", "flops",
                        "nodes", "about", "method"]
    # the first facts: does it fit (by how much), the peak, the largest batch that fits
    facts = re.findall(r'data-n="fact:([^"]+)"', page)
    assert facts[:3] == ["fits", "peak memory", "max batch"]
    view = build_view(inference)
    assert [f.name for f in view.answers] == ["fits", "peak memory", "max batch",
                                              "on the device"]  # the verdict's device total
    fits = view.answers[0]
    assert fits.label == "on NVIDIA Tesla T4" and fits.value == "fits"
    assert fits.detail.startswith(f"{view.gpu.headroom.text} to spare")


def test_the_answer_says_by_how_much_a_model_does_not_fit() -> None:
    assert TINY_CNN is not None
    analysis = analyze_onnx(TINY_CNN, batch=200_000, gpu="t4")  # about 27 GiB
    verdict = build_view(analysis).answers[0]
    # over by the device total (onnxruntime CUDA's) less the GPU's capacity
    over = int(analysis.fit.required_bytes) - analysis.fit.capacity_bytes
    assert verdict.value == "does not fit" and verdict.tone == "bad"
    assert verdict.detail.startswith(f"over by {build_view(analysis).gpu.overflow.text}")
    assert build_view(analysis).gpu.overflow.exact == over


def _live_rows(page: str) -> list[bool]:
    """The live-at-peak table's rows: True for each one behind "show all"."""
    start = page.index('id="live-table"')
    table = page[start: page.index("</table>", start)]
    return [bool(more) for more in re.findall(r'<tr data-n="live"( class="more")?>', table)]


def test_a_short_live_table_shows_every_row(tmp_path) -> None:
    import onnx

    path = tmp_path / "chain.onnx"
    onnx.save(relu_chain(40), path)  # at the peak: x, w and two activations
    page = render_html(analyze_onnx(path, batch=2))
    assert _live_rows(page) == [False] * 4 and 'id="live-all"' not in page


@pytest.mark.torch
def test_the_largest_tensors_first_and_the_rest_behind_show_all(training: Analysis) -> None:
    view = build_view(training)  # an Adam step: weights, gradients, optimizer state, ...
    assert len(view.live.rows) > MAX_LIVE_SHOWN
    sizes = [row.size.probe for row in view.live.rows]
    assert sizes == sorted(sizes, reverse=True)
    page = render_html(training)
    rows = _live_rows(page)
    assert rows == [False] * MAX_LIVE_SHOWN + [True] * (len(view.live.rows) - MAX_LIVE_SHOWN)
    # a checkbox and its label toggle the rest: no script needed, the page stays offline
    assert '<input type="checkbox" id="live-all" class="show-all-toggle">' in page
    assert f"Show all {len(rows)} tensors" in page


def test_tables_scroll_inside_their_box(inference: Analysis) -> None:
    page = render_html(inference)
    for table_id in ("live-table", "node-table", "module-table"):
        start = page.index(f'id="{table_id}"')
        opening = page.rindex("<div", 0, start)
        assert page[opening: page.index(">", opening)].startswith('<div class="scroll'), table_id
    flops = page[page.index('id="flops"'):]
    assert flops.index('<div class="scroll">') < flops.index("<table")


# ----- a formula for the peak ------------------------------------------------------------------


def test_a_peak_with_candidate_steps_reads_as_one_formula(free_batch: Analysis) -> None:
    # gpt2.onnx with batch and seq free has 14 candidate peak steps: the headline showed
    # max(f1, ..., f14), a column of formulas taller than the screen; with one free dim it is
    # the leading candidate per range of it, the crossover exact
    live = free_batch.liveness
    other = SymInt.symbol("batch") * 100 + 900_000
    analysis = replace(free_batch, liveness=replace(
        live, peak_candidates=(live.peak_bytes, other)))
    view = build_view(analysis)
    peak_fact = next(f for f in view.headline if f.label == "peak memory")
    assert peak_fact.value == view.summary.peak.text  # per range, not max(...)
    assert "max(" not in peak_fact.value and "maximum of 2 candidate steps" in peak_fact.detail
    # 40232 + 143360*batch > 900000 + 100*batch from batch >= 859768/143260 = 6.0...: 7 on
    assert peak_fact.value.endswith("above that 39.3 KiB + 140.0 KiB·batch (from batch=7)")
    assert view.summary.peak.exact.startswith("max(")  # the exact value stays, as a tooltip
    page = render_html(analysis)
    check_page(page)
    assert "max(" not in _visible_text(page)
    # both candidates are listed, behind a <details>: 100*batch + 900000 = 100 B*batch + 878.9 KiB
    candidates = page[page.index('class="candidates"'): page.index("</details>",
                                                                   page.index('class="candidates"'))]
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
    assert PROBE_DIM_VALUE == liveness.PROBE_DIM_VALUE
    timeline = build_view(free_batch).timeline
    ys = [float(point.split(",")[1]) for point in timeline.line_points.split()]
    assert timeline.peak_y == pytest.approx(min(ys), abs=0.05)  # SVG y grows downwards
    assert "Drawn at batch=64" in render_html(free_batch)


def test_flops_with_unsupported_nodes_read_as_a_lower_bound(free_batch: Analysis) -> None:
    # a custom-domain op has no cost rule: the total leaves it out, so it is "at least"
    costs = free_batch.costs
    first = replace(costs.nodes[0], status=CostStatus.UNSUPPORTED, domain="com.example",
                    op_type="FancyAct")
    analysis = replace(free_batch, costs=replace(
        costs, nodes=(first, *costs.nodes[1:]), unsupported_ops={"com.example.FancyAct": 1}))
    flops = next(f for f in build_view(analysis).headline if f.label == "FLOPs")
    assert flops.value.startswith("\u2265 ") and "1 unsupported node not counted" in flops.detail
    clean = next(f for f in build_view(free_batch).headline if f.label == "FLOPs")
    assert not clean.value.startswith("\u2265") and "not counted" not in clean.detail


# ----- labels ----------------------------------------------------------------------------------


@pytest.mark.torch
def test_phase_labels_sit_at_the_foot_of_the_plot_and_inside_it(training: Analysis) -> None:
    page = render_html(training)
    box = build_view(training).timeline.box
    labels = re.findall(r'<text class="band-label" x="([\d.]+)" y="([\d.]+)"'
                        r'( text-anchor="end")?>(\w+)</text>', page)
    assert {label for *_, label in labels} == {"forward", "backward", "optimizer"}
    for x, y, end, label in labels:
        # clear of the peak's label, which sits above the peak near the top of the plot
        assert float(y) == pytest.approx(box.bottom - 6)
        right_edge = float(x) if end else float(x) + 8 * len(label)  # ~7 px a character
        assert box.left <= float(x) and right_edge <= box.right, label


@pytest.mark.parametrize("peak_step", [5, 90])  # the label left or right of the peak
@pytest.mark.parametrize("peak_gib", [9.0, 13.8, 14.1, 14.3, 14.5, 14.7, 15.0, 15.2, 16.0, 20.0])
def test_the_peak_label_never_collides_with_the_gpu_lines(peak_step: int, peak_gib: float) -> None:
    # a T4: 14.3 GiB usable under 15.0 GiB of capacity. Near them the capacity line struck
    # through the peak's label ("peak 14.8 GiB at step 974")
    live = [GIB] * 100
    live[peak_step] = int(peak_gib * GIB)
    chart = timeline_chart(live, GIB // 2, peak_step, int(14.3 * GIB), str,
                           capacity_bytes=15 * GIB)
    assert [r.kind for r in chart.rules] == ["capacity-line", "usable"]
    peak = chart.peak_label
    assert peak.text == f"peak {peak_gib:.1f} GiB at step {peak_step}"
    for rule in chart.rules:
        assert not peak.crossed_by(rule.y), (rule.kind, peak)
        if rule.label is not None:
            assert not rule.label.overlaps(peak), rule.kind
            assert not any(rule.label.crossed_by(r.y) for r in chart.rules if r is not rule)
    placed = [peak, *(r.label for r in chart.rules if r.label)]
    for label in placed:
        x0, y0, x1, y1 = label.extent()
        assert TIMELINE_BOX.left - 1 <= x0 and x1 <= TIMELINE_BOX.right + 1, label
        assert TIMELINE_BOX.top - 2 <= y0 and y1 <= TIMELINE_BOX.bottom, label


def test_a_line_label_with_no_room_is_left_to_the_legend() -> None:
    # three lines 6 px apart: the middle one's label fits nowhere without touching another
    box = TIMELINE_BOX
    peak, rules = place_labels(box, 500.0, 200.0, "peak 1 GiB at step 3",
                               [("capacity-line", 94.0, "GPU capacity"), ("usable", 100.0, "u"),
                                ("capacity-line", 106.0, "third")])
    assert rules[1].label is None
    assert all(not peak.crossed_by(r.y) for r in rules)


def test_label_extents_overlap_as_boxes() -> None:
    a = Label("peak 3.0 GiB", 100, 50, "start", 12)
    assert a.overlaps(Label("x", 110, 52, "start")) and not a.overlaps(Label("x", 110, 80, "start"))
    assert a.crossed_by(45) and not a.crossed_by(60)


@pytest.mark.torch
def test_runtime_bar_names_only_the_segments_wide_enough(training: Analysis) -> None:
    # 14 MiB of 1 GiB is 1.4% of the bar: its name was cut to "ten" and overlapped the next
    runtime = RuntimeEstimate(
        runtime="torch-cuda", tensors_at_peak_bytes=14 * MIB, allocator_overhead_bytes=4 * MIB,
        context_bytes=711 * MIB, runtime_peak_bytes=18 * MIB, device_total_bytes=729 * MIB)
    fit = replace(training.fit, capacity_bytes=1024 * MIB)
    page = render_html(replace(training, runtime=runtime, fit=fit))
    check_page(page)
    bar = page[page.index('class="runtime-bar"'): page.index('class="compact gpu-lines"',
                                                               page.index('id="runtime"'))]
    assert '<span class="rt-text">CUDA context + workspaces</span>' in bar  # 711/1024 = 69%
    assert '<span class="rt-text">tensors at peak</span>' not in bar
    assert '<span class="rt-text">allocator overhead</span>' not in bar
    assert 'title="tensors at peak: 14.0 MiB"' in bar  # still named on hover and in the table


def _sweep() -> SweepResult:
    return SweepResult("batch", tuple(SweepPoint(b, b * 100 * MIB, True, None, None)
                                      for b in (1, 2, 4, 8)), 1)


def test_a_sweep_keeps_the_gpu_line_in_view_up_to_10x() -> None:
    # gpt2 at seq=512 peaks at 6.8 GiB at batch 64 on a 38.7 GiB A100: the line, 5.7x the
    # highest point, was left out, and a sweep is read against it
    near = sweep_view(_sweep(), 6 * 800 * MIB, None)  # 6x the largest peak (800 MiB)
    assert near is not None and near.chart.limit_y is not None
    assert near.chart.limit_y < min(p.y for p in near.chart.points)  # above every point
    far = sweep_view(_sweep(), 11 * 800 * MIB, None)
    assert far is not None and far.chart.limit_y is None
    assert far.chart.limit_note == "far above the chart"
    assert near.saturation_percent == 90  # passes/sweep.py SATURATION_SHARE, said in words


def test_a_wide_sweep_labels_every_few_doublings_and_keeps_its_marker_inside() -> None:
    # 1 to 262,144: 19 doublings labelled one by one ran into each other ("65,536131,072"),
    # and "max batch 107,265" near the right edge was cut off
    values = [2**k for k in range(0, 19, 2)]
    sweep = SweepResult("batch", tuple(SweepPoint(b, b * 140 * 1024, b <= 107_265, None, None)
                                       for b in values), None)
    view = sweep_view(sweep, int(14.3 * GIB), 107_265)
    assert view is not None
    chart, box = view.chart, view.chart.box
    labels = [Label(t.label, t.position, box.bottom + 16, "start") for t in chart.x_ticks]
    assert len(labels) <= 8
    centred = [label._replace(x=label.x - (label.extent()[2] - label.x) / 2) for label in labels]
    assert not any(a.overlaps(b) for a, b in itertools.pairwise(centred))
    assert chart.marker_label == "max batch 107,265" and chart.marker_anchor == "end"
    marker = Label(chart.marker_label, chart.marker_x - 4, box.top + 12, "end", 12)
    assert box.left <= marker.extent()[0] and marker.extent()[2] <= box.right
