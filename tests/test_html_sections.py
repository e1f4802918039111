"""The HTML report's training view and the sections that appear only when the JSON has them.

The optional fields (suggestions, checkpoint curve, runtime, per rank, fit by strategy, KV
cache) are added to a real analysis's JSON dict here, so their rendering is tested before the
passes that produce them exist.
"""

from __future__ import annotations

import copy
import html
from pathlib import Path
from typing import Any

import pytest

from graphmem.core.units import format_bytes
from graphmem.pipeline.analysis import Analysis, analyze_onnx
from graphmem.pipeline.planning import SweepRequest
from graphmem.report.html.page import build_view, render_html
from graphmem.report.json.report import to_dict
from tests.test_html_report import SAMPLES, check_page

TINY_CNN = next((s for s in SAMPLES if s.name == "tiny_cnn.onnx"), None)
pytestmark = pytest.mark.skipif(TINY_CNN is None, reason="samples/tiny_cnn.onnx is missing")


@pytest.fixture(scope="module")
def training() -> Analysis:
    pytest.importorskip("torch")
    from graphmem.frontends.torch.analyze import analyze_torch
    from tests.models import TinyCNN

    return analyze_torch(TinyCNN(), ["4x3x32x32"], train=True, optimizer="adam", gpu="t4")


@pytest.fixture(scope="module")
def inference() -> Analysis:
    assert TINY_CNN is not None
    return analyze_onnx(TINY_CNN, batch=8, gpu="t4")


def test_training_report_shows_the_step(training: Analysis) -> None:
    page = render_html(training)
    check_page(page)
    report = training.to_dict()
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


def test_timeline_layers_stack_to_the_live_total(training: Analysis) -> None:
    chart = build_view(training).timeline
    top_layer = chart.layers[0].path  # the top band's upper edge is the live total
    tops = [p.split(",") for p in top_layer.split(" L")[1].split()]
    line = [p.split(",") for p in chart.line_points.split()]
    assert [float(y) for _, y in tops] == pytest.approx([float(y) for _, y in line], abs=0.05)


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
    assert 'id="runtime"' not in page and 'id="more-memory"' not in page
    assert f"{inference.max_batch.max_batch:,}" in page  # the largest batch that fits on a t4


def _with_optional_fields(report: dict[str, Any]) -> dict[str, Any]:
    report = copy.deepcopy(report)
    peak = report["memory"]["peak_bytes"]
    report["suggestions"] = [
        {"kind": "checkpoint", "title": "Checkpoint block.0", "targets": ["block.0", "block.1"],
         "saves_bytes": 123_456, "new_peak_bytes": peak - 123_456, "extra_flops": 7_000_000,
         "extra_time_s": 0.0021, "snippet": "x = checkpoint(self.block, x)  # <b>",
         "note": "recompute in backward"},
        {"kind": "inplace", "title": "ReLU in place"},  # every other key missing
    ]
    report["checkpoint_curve"] = [
        {"peak_bytes": peak, "extra_flops": 0, "modules": []},
        {"peak_bytes": peak // 2, "extra_flops": 5_000_000, "modules": ["block"]},
        {"peak_bytes": peak // 3, "extra_flops": 9_000_000, "modules": ["block", "down"]},
    ]
    report["memory"]["runtime"] = {
        "name": "pytorch-cuda", "tensors_at_peak_bytes": peak, "allocator_overhead_bytes": 2 << 20,
        "context_workspaces_bytes": 500 << 20, "total_device_bytes": peak + (502 << 20),
        "capacity_bytes": 15 << 30}
    report["memory"]["per_rank"] = [
        {"rank": 0, "peak_bytes": 7_340_032, "params_bytes": 1_048_576},
        {"rank": 1, "peak_bytes": 6_291_456, "params_bytes": 1_048_576}]
    report["memory"]["fit_by_strategy"] = {
        "ddp": {"peak_bytes": 9_437_184, "fits": True},
        "fsdp": {"peak_bytes": 4_194_304, "fits": True}}
    report["memory"]["kv_cache"] = {"bytes": 3_145_728, "layers": 12, "bytes_per_token": 49_152}
    return report


def test_optional_sections_render_from_the_json(inference: Analysis) -> None:
    page = render_html(inference, _with_optional_fields(to_dict(inference)))
    check_page(page)
    cards = page[page.index('id="suggestions"'): page.index('id="curves"')]
    assert "Checkpoint block.0" in cards and "120.6 KiB" in cards  # 123,456 B
    assert "7.00 MFLOP" in cards and "2.1 ms more per step" in cards
    assert html.escape("x = checkpoint(self.block, x)  # <b>") in cards and "<b>" not in cards
    assert "ReLU in place" in cards and "nothing counted" in cards  # missing keys: no zeros
    curve = page[page.index('id="checkpoint-chart-title"'): page.index('id="checkpoint-table"')]
    assert curve.count("<circle") == 3 and "block, down" in curve
    runtime = page[page.index('id="runtime"'): page.index('id="timeline"')]
    for label in ("tensors at peak", "allocator overhead", "context + workspaces"):
        assert label in runtime
    assert "500.0 MiB" in runtime and "15.0 GiB" in runtime and "fits" in runtime
    tables = page[page.index('id="more-memory"'): page.index('id="nodes"')]
    assert "Memory per GPU (rank)" in tables and "7.0 MiB" in tables and "6.0 MiB" in tables
    assert "fsdp" in tables and "4.0 MiB" in tables and "yes" in tables
    assert "KV cache" in tables and "bytes per token" in tables and "48.0 KiB" not in tables
    assert "49,152" in tables  # a count, not bytes: its key does not end in _bytes


def test_malformed_optional_fields_are_left_out(inference: Analysis) -> None:
    report = to_dict(inference)
    report.update(suggestions="not a list", checkpoint_curve=[{"modules": []}])
    report["memory"].update(runtime={"name": "x"}, per_rank=[], kv_cache=None)
    page = render_html(inference, report)
    check_page(page)
    assert 'id="suggestions"' not in page and 'id="curves"' not in page
    assert 'id="runtime"' not in page and 'id="more-memory"' not in page


def test_batch_sweep_chart_with_the_gpu_line(tmp_path: Path) -> None:
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
    from graphmem.report.html.extras import sweep_view

    mib = 1 << 20
    report = {"sweep": {"dim": "batch", "saturates_at": None, "points": [
        {"value": b, "peak_bytes": b * 100 * mib, "fits": b * 100 <= 700,
         "est_latency_s": None, "est_throughput_per_s": None} for b in (1, 2, 4, 8, 16)]},
        "gpu": {"usable_bytes": 700 * mib, "max_batch": 7}}
    view = sweep_view(report)
    assert view is not None and view.max_batch == 7
    chart = view.chart
    assert chart.limit_y is not None and chart.marker_label == "max batch 7"
    # x is log2 (1..16 spans 4 doublings): batch 7 sits at log2(7)/4 of the plot's width
    import math
    assert chart.marker_x == pytest.approx(
        chart.left + (chart.right - chart.left) * math.log2(7) / 4, abs=0.1)
    assert [p.marked for p in chart.points] == [False, False, False, True, True]  # 800, 1600 MiB
    below = [p for p in chart.points if not p.marked]
    assert all(p.y > chart.limit_y for p in below)  # under the line (SVG y grows downwards)
