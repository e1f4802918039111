"""What to change and what it trades: the suggestion cards, the checkpointing trade-off curve and
the batch sweep, from graphmem/suggest (SuggestionReport) and graphmem/passes/sweep.py.

Each section is None (or empty) when its result was not computed; a number a suggestion could
not compute (None in its result) is shown as a dash, never as 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from graphmem.core.safe_text import SNIPPET_MAX_CHARS, printable, printable_text
from graphmem.core.units import format_si
from graphmem.passes.sweep import SATURATION_SHARE, SweepResult
from graphmem.report.html.charts import XYChart, xy_chart
from graphmem.report.html.quantity import (
    Quantity,
    bytes_quantity,
    count_quantity,
    format_time,
    percent,
)

if TYPE_CHECKING:  # rendered where the analysis has them: their modules are loaded then
    from graphmem.suggest.cards import RuntimeLever, Suggestion, SuggestionReport


class SuggestionCard(NamedTuple):
    kind: str
    title: str
    targets: tuple[str, ...]
    saves: Quantity | None
    new_peak: Quantity | None
    extra_flops: Quantity | None
    extra_time: str
    snippet: str
    note: str
    saves_percent: float  # of the current peak: the card's bar


def suggestion_cards(report: SuggestionReport | None,
                     peak_probe: int) -> tuple[SuggestionCard, ...]:
    if report is None:
        return ()
    return tuple(_card(s, peak_probe) for s in report.suggestions)


def _card(suggestion: Suggestion, peak_probe: int) -> SuggestionCard:
    saves = suggestion.saves_bytes
    return SuggestionCard(
        kind=str(suggestion.kind),
        title=printable_text(suggestion.title or suggestion.kind),
        targets=tuple(map(printable, suggestion.targets)),
        saves=None if saves is None else bytes_quantity(saves),
        new_peak=None if suggestion.new_peak_bytes is None else bytes_quantity(
            suggestion.new_peak_bytes),
        extra_flops=None if suggestion.extra_flops is None else count_quantity(
            suggestion.extra_flops, "FLOP"),
        extra_time="" if suggestion.extra_time_s is None else format_time(
            suggestion.extra_time_s),
        snippet=printable_text(suggestion.snippet or "", SNIPPET_MAX_CHARS, multiline=True),
        note=printable_text(suggestion.note),
        saves_percent=0.0 if saves is None else min(max(percent(saves, peak_probe), 0.0), 100.0),
    )


class LeverView(NamedTuple):
    """A runtime option, on the device total (not the live-tensor peak of the cards)."""

    option: str
    setting: str
    device_total: Quantity | None
    base_device_total: Quantity | None
    max_batch: str  # "1,071" or "" where not solved
    base_max_batch: str


def lever_views(report: SuggestionReport | None) -> tuple[LeverView, ...]:
    if report is None:
        return ()
    return tuple(_lever_view(lever) for lever in report.runtime_levers)


def _lever_view(lever: RuntimeLever) -> LeverView:
    def batch(value: int | None) -> str:
        return "" if value is None else f"{value:,}"

    def size(value: int | None) -> Quantity | None:
        return None if value is None else bytes_quantity(value)

    return LeverView(printable_text(lever.option), printable_text(lever.setting),
                     size(lever.device_total_bytes), size(lever.base_device_total_bytes),
                     batch(lever.max_batch), batch(lever.base_max_batch))


# ----- charts: checkpointing trade-off, batch sweep -------------------------------------------


class CurveRow(NamedTuple):
    peak: Quantity
    extra_flops: Quantity
    modules: str


class CheckpointCurve(NamedTuple):
    chart: XYChart
    rows: tuple[CurveRow, ...]


def checkpoint_curve(report: SuggestionReport | None) -> CheckpointCurve | None:
    if report is None or not report.checkpoint_curve:
        return None
    points = report.checkpoint_curve
    rows = tuple(CurveRow(bytes_quantity(p.peak_bytes), count_quantity(p.extra_flops, "FLOP"),
                          printable_text(", ".join(map(printable, p.modules))) or "none")
                 for p in points)
    chart = xy_chart(
        [p.extra_flops for p in points], [p.peak_bytes for p in points],
        [f"recompute {format_si(p.extra_flops, 'FLOP')} -> peak {r.peak.text}: {r.modules}"
         for p, r in zip(points, rows, strict=True)],
        x_label="extra FLOPs (recomputation)", y_label="peak memory",
        x_format=lambda v: format_si(v, "FLOP"),
    )
    return CheckpointCurve(chart, rows)


class SweepRow(NamedTuple):
    value: int
    peak: Quantity
    fits: bool | None
    latency: str
    throughput: str


class SweepView(NamedTuple):
    dim: str
    chart: XYChart
    rows: tuple[SweepRow, ...]
    max_batch: int | None
    saturates_at: int | None
    saturation_percent: int = round(100 * SATURATION_SHARE)  # what "saturates" means


# A sweep is read against the GPU's line: keep it in view up to 10x the largest peak (the
# curve still spans a tenth of the chart); above that the legend says where it is.
_SWEEP_LIMIT_MAX_RATIO = 10.0


def sweep_view(sweep: SweepResult | None, usable: int | None,
               largest: int | None) -> SweepView | None:
    """The sweep against the GPU's `usable` bytes, with the `largest` batch that fits."""
    if sweep is None or not sweep.points:
        return None
    dim = printable(sweep.dim)
    rows = tuple(SweepRow(
        value=p.value, peak=bytes_quantity(p.peak_bytes), fits=p.fits,
        latency="" if p.est_latency_s is None else format_time(p.est_latency_s),
        throughput="" if p.est_throughput_per_s is None else f"{p.est_throughput_per_s:,.1f}/s",
    ) for p in sweep.points)
    values = [r.value for r in rows]
    marker = None
    if largest and dim == "batch" and min(values) <= largest <= max(values):
        marker = (float(largest), f"max batch {largest:,}")
    chart = xy_chart(
        values, [r.peak.probe for r in rows],
        [f"{dim}={r.value:,}: peak {r.peak.text}"
         + {True: ", fits", False: ", does not fit", None: ""}[r.fits]
         + (f", {r.latency}" if r.latency else "") for r in rows],
        x_label=dim, y_label="peak memory", x_format=lambda v: f"{v:,.0f}",
        limit_bytes=usable, limit_label="GPU usable",
        marked=[r.fits is False for r in rows], marker=marker,
        limit_max_ratio=_SWEEP_LIMIT_MAX_RATIO,
    )
    return SweepView(dim, chart, rows, largest, sweep.saturates_at)
