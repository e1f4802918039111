"""The HTML report's training view, and the sections that appear only when their result exists
(suggestions, the checkpointing curve, the runtime, a batch sweep).

Results the passes of these tests do not produce are built as the typed results the pipeline
would attach (a SuggestionReport, a RuntimeEstimate) and put on a real analysis.
"""

from __future__ import annotations

import html
import math
from dataclasses import replace

import pytest

from graphmem import analyze_onnx
from graphmem.core.units import format_bytes
from graphmem.passes.sweep import SweepPoint, SweepResult
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.request import SweepRequest
from graphmem.report.html.page import render_html
from graphmem.report.html.plans import sweep_view
from graphmem.report.html.view import build_view
from graphmem.report.json.report import to_dict
from graphmem.runtime_models.base import RuntimeEstimate
from graphmem.suggest.cards import Suggestion, SuggestionReport
from graphmem.suggest.search import PlanOutcome
from tests.helpers.html_page import check_page
from tests.helpers.samples import TINY_CNN

pytestmark = pytest.mark.skipif(TINY_CNN is None, reason="samples/tiny_cnn.onnx is missing")
MIB = 1 << 20


def section(page: str, section_id: str) -> str:
    """The markup of one section of the page."""
    start = page.index(f'<section id="{section_id}"')
    return page[start: page.index("</section>", start)]


@pytest.mark.torch
def test_training_report_shows_the_step(training: Analysis) -> None:
    page = render_html(training)
    check_page(page)
    report = to_dict(training)
    assert f"{report['params']['count']:,}" in page  # 10,138 (tests/models.py)
    assert "training · adam · float32" in page
    assert "micro-batch 4" in page
    # the timeline is stacked by role and shaded by phase
    for role in ("parameters", "optimizer_state", "gradients", "saved_activations",
                 "activation_gradients", "temporaries"):
        assert f'class="layer layer-{role}"' in page, role
    for phase in ("forward", "backward", "optimizer"):
        assert f'class="band band-{phase}"' in page and f">{phase}</text>" in page
    assert format_bytes(int(training.liveness.peak_bytes)) in page
    assert "est. latency" in page and "roofline lower bound" in page
    assert html.escape(report["gpu"]["max_batch_reason"]) in page  # why there is no max batch
    assert "Memory and compute by module" in page and "<code>stem.0</code>" in page


@pytest.mark.torch
def test_timeline_layers_stack_to_the_live_total(training: Analysis) -> None:
    chart = build_view(training).timeline
    top_layer = chart.layers[0].path  # the top band's upper edge is the live total
    tops = [p.split(",") for p in top_layer.split(" L")[1].split()]
    line = [p.split(",") for p in chart.line_points.split()]
    assert [float(y) for _, y in tops] == pytest.approx([float(y) for _, y in line], abs=0.05)


@pytest.mark.torch
def test_node_table_has_phase_time_and_bound(training: Analysis) -> None:
    table = build_view(training).nodes
    assert table.has_phases and table.has_times
    phases = [row.phase for row in table.rows]
    assert phases[0] == "forward" and phases[-1] == "optimizer" and "backward" in phases
    assert all(row.bound in ("compute", "memory") for row in table.rows)


def test_inference_report_has_no_training_parts(inference: Analysis) -> None:
    page = render_html(inference)
    check_page(page)
    assert 'class="band ' not in page
    assert 'class="layer layer-activations"' in page
    assert "What to change" not in page and "Trade-offs" not in page
    assert 'id="more-memory"' not in page
    # with a GPU the runtime model's device total is the verdict, and its section is shown
    assert 'id="runtime"' in page
    assert f"{inference.max_batch.max_batch:,}" in page  # the largest batch that fits on a t4


def _with_optional_results(analysis: Analysis) -> Analysis:
    peak = int(analysis.liveness.peak_bytes)
    suggestions = SuggestionReport(
        budget_bytes=None, budget_source="", base_peak_bytes=peak,
        suggestions=(
            Suggestion(kind="checkpoint", title="Checkpoint block.0",
                       targets=("block.0", "block.1"), saves_bytes=123_456,
                       new_peak_bytes=peak - 123_456, extra_flops=7_000_000,
                       extra_time_s=0.0021, snippet="x = checkpoint(self.block, x)  # <b>",
                       note="recompute in backward"),
            # nothing re-analysed: every number unknown
            Suggestion(kind="inplace", title="ReLU in place", targets=(), saves_bytes=None,
                       new_peak_bytes=None, extra_flops=None, extra_time_s=None, snippet=None,
                       note=""),
        ),
        checkpoint_curve=(PlanOutcome((), peak, 0, None),
                          PlanOutcome(("block",), peak // 2, 5_000_000, None),
                          PlanOutcome(("block", "down"), peak // 3, 9_000_000, None)),
    )
    runtime = RuntimeEstimate(
        runtime="torch-cuda", tensors_at_peak_bytes=peak, allocator_overhead_bytes=2 * MIB,
        context_bytes=500 * MIB, runtime_peak_bytes=peak, device_total_bytes=peak + 502 * MIB)
    return replace(analysis, suggestions=suggestions, runtime=runtime)


def test_optional_sections_render_from_their_results(inference: Analysis) -> None:
    page = render_html(_with_optional_results(inference))
    check_page(page)
    cards = section(page, "suggestions")
    assert "Checkpoint block.0" in cards and "120.6 KiB" in cards  # 123,456 B
    assert "7.00 MFLOP" in cards and "2.1 ms more per step" in cards
    assert html.escape("x = checkpoint(self.block, x)  # <b>") in cards and "<b>" not in cards
    assert "ReLU in place" in cards and "nothing counted" in cards  # unknowns: no zeros
    curve = page[page.index('id="checkpoint-chart-title"'): page.index('id="checkpoint-table"')]
    assert curve.count("<circle") == 3 and "block, down" in curve
    runtime = section(page, "runtime")
    for label in ("tensors at peak", "allocator overhead", "CUDA context + workspaces"):
        assert label in runtime
    # the capacity is the T4's (inference.fit): 15.0 GiB
    assert "500.0 MiB" in runtime and "15.0 GiB" in runtime and "fits" in runtime


def test_empty_results_leave_their_sections_out(inference: Analysis) -> None:
    # a suggestion report with nothing in it (nothing to suggest, no curve), no runtime
    empty = SuggestionReport(budget_bytes=None, budget_source="", base_peak_bytes=0,
                             suggestions=(), checkpoint_curve=())
    page = render_html(replace(inference, suggestions=empty, runtime=None))
    check_page(page)
    assert 'id="suggestions"' not in page and 'id="curves"' not in page
    assert 'id="runtime"' not in page and 'id="more-memory"' not in page


def test_batch_sweep_chart_with_the_gpu_line() -> None:
    assert TINY_CNN is not None
    analysis = analyze_onnx(TINY_CNN, gpu="t4", sweep=SweepRequest("batch", (1, 4, 16, 64)))
    page = render_html(analysis)
    check_page(page)
    chart = page[page.index('id="sweep-chart-title"'): page.index('id="sweep-table"')]
    assert chart.count("<circle") == 4
    for point in analysis.sweep.points:
        assert f"batch={point.value}: peak {format_bytes(point.peak_bytes)}" in chart
    # tiny_cnn peaks at a few MiB at batch 64: the T4's 14.3 GiB line would flatten the curve
    assert 'class="usable"' not in chart
    assert "GPU usable 14.3 GiB: far above the chart" in page


def test_sweep_near_the_limit_draws_the_line_and_the_max_batch() -> None:
    sweep = SweepResult("batch", tuple(
        SweepPoint(b, b * 100 * MIB, b * 100 <= 700, None, None) for b in (1, 2, 4, 8, 16)), None)
    view = sweep_view(sweep, 700 * MIB, 7)
    assert view is not None and view.max_batch == 7
    chart, box = view.chart, view.chart.box
    assert chart.limit_y is not None and chart.marker_label == "max batch 7"
    # x is log2 (1..16 spans 4 doublings): batch 7 sits at log2(7)/4 of the plot's width
    assert chart.marker_x == pytest.approx(
        box.left + (box.right - box.left) * math.log2(7) / 4, abs=0.1)
    assert [p.marked for p in chart.points] == [False, False, False, True, True]  # 800, 1600 MiB
    below = [p for p in chart.points if not p.marked]
    assert all(p.y > chart.limit_y for p in below)  # under the line (SVG y grows downwards)


@pytest.mark.slow
def test_notes_are_listed_apart_from_warnings() -> None:
    # ModelInfo.notes (what the front end built) render as notes, never as problems
    result = analyze_onnx(TINY_CNN, batch=2)
    noted = replace(result, model=replace(result.model, notes=("built from a config <b>",)))
    page = render_html(noted)
    assert '<li class="note">built from a config &lt;b&gt;</li>' in page
    assert '<li class="bad">built from a config' not in page
