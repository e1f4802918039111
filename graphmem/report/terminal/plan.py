"""Terminal lines for the planning results: schedule, arena, roofline, max batch, sweep."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from graphmem.core.safe_text import markup, markup_dims, markup_text
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes, format_rate, format_si
from graphmem.report.terminal import formulas

if TYPE_CHECKING:
    from graphmem.passes.arena import ArenaPlan
    from graphmem.passes.max_batch import MaxBatchResult
    from graphmem.passes.roofline import RooflineResult
    from graphmem.passes.schedule import ScheduleResult
    from graphmem.passes.sweep import SweepResult
    from graphmem.pipeline.analysis import Analysis
    from graphmem.pipeline.planning import GpuRow

_MOVED_SHOWN = 4
_TOP_SHOWN = 3


def print_plans(analysis: Analysis, console: Console,
                explain: Callable[[str], None] = lambda term: None, sweep: bool = True) -> None:
    """The planning lines (and the sweep unless `sweep` is False); `explain(term)` is called
    before the line that uses the term."""
    if analysis.schedule is not None:
        explain("best order")
        console.print(schedule_line(analysis.schedule, analysis.liveness.peak_candidates))
    if analysis.arena is not None:
        explain("arena plan")
        console.print(arena_line(analysis.arena, analysis.schedule))
    gpu = analysis.fit.gpu.full_name if analysis.fit else ""
    if analysis.roofline is not None or analysis.fit is not None:
        explain("roofline")
    if analysis.roofline is not None:
        console.print(roofline_line(analysis.roofline, gpu))
    elif analysis.fit is not None:
        console.print(f"roofline on {gpu}: bind every dim (--batch / --dim) to estimate latency")
    if analysis.max_batch is not None:
        explain("max batch")
        console.print(max_batch_line(analysis.max_batch, gpu))
    if sweep:
        print_sweep(analysis, console)


def print_sweep(analysis: Analysis, console: Console) -> None:
    """The sweep's table (--sweep), where one was asked for."""
    if analysis.sweep is not None:
        console.print(sweep_table(analysis.sweep))
        if analysis.sweep.saturates_at is not None:
            console.print(f"throughput saturates at {markup(analysis.sweep.dim)}="
                          f"{analysis.sweep.saturates_at} (90% of the best in the sweep)")


def peak_text(candidates: tuple[SymInt, ...]) -> str:
    """A peak: a number, or the exact maximum of its candidate steps, readable (per range of
    one free dim: graphmem/core/peak_formula.py), as rich markup."""
    return markup_text(formulas.peak_text(candidates))


def schedule_line(schedule: ScheduleResult, model_candidates: tuple[SymInt, ...] = ()) -> str:
    model = peak_text(model_candidates or (schedule.model_order_peak_bytes,))
    best = peak_text(schedule.best_order_peak_candidates)
    how = {"exact": "exact search: optimal", "greedy": "greedy list scheduling",
           "windowed exact": "greedy, then exact re-ordering around the peak",
           "model order": "no order found lower", "topological sort": "topological sort"}
    method = how.get(schedule.method, schedule.method)
    if schedule.proof == "lower bound":
        method = "optimal: it meets the lower bound"
    elif schedule.proof == "exact search" and schedule.method != "exact":
        method = "optimal: proven by exact search"
    lower = markup_text(formulas.size_text(schedule.lower_bound_bytes))
    text = (f"[bold]schedule[/]: peak {model} in the model's order, {best} in the best order"
            f" found ({method}); lower bound {lower}")
    if schedule.chosen_at_dims:
        text += f"; order chosen at {markup_dims(schedule.chosen_at_dims)}"
    if schedule.moved:
        moves = ", ".join(f"{markup(m.name)} (step {m.model_step} -> {m.best_step})"
                          for m in schedule.moved[:_MOVED_SHOWN])
        more = "" if schedule.moved_count <= _MOVED_SHOWN else (
            f" and {schedule.moved_count - _MOVED_SHOWN} more")
        text += f"\n  moves {schedule.moved_count} node(s): {moves}{more}"
    return text


def arena_line(arena: ArenaPlan, schedule: ScheduleResult | None) -> str:
    at = ""
    if schedule is not None and schedule.chosen_at_dims:
        at = " at " + markup_dims(schedule.chosen_at_dims)
    return (f"[bold]arena plan[/] (model order{at}; greedy by size, best fit):"
            f" {format_bytes(arena.arena_bytes)} for a live activation peak of"
            f" {format_bytes(arena.live_activation_peak_bytes)} (fragmentation"
            f" {arena.fragmentation:.1%}); without reuse {format_bytes(arena.no_reuse_bytes)}")


def roofline_line(roofline: RooflineResult, gpu: str) -> str:
    per = f"per batch of {roofline.batch}" if roofline.batch is not None else "per run"
    throughput = ""
    if roofline.est_throughput_per_s is not None:
        throughput = f" = {format_rate(roofline.est_throughput_per_s, 'samples/s')}"
    total = roofline.est_latency_s
    share = roofline.compute_bound_time_s / total if total else 0.0
    top = ", ".join(f"{markup(t.name)} ({format_seconds(t.est_time_s)}, {t.bound})"
                    for t in roofline.top[:_TOP_SHOWN])
    return (f"[bold]roofline[/] on {gpu} (a lower bound from datasheet peaks, not a benchmark):"
            f" {format_seconds(total)} {per}{throughput}; {share:.0%} of it compute-bound;"
            f" longest: {top}")


def max_batch_line(result: MaxBatchResult, gpu: str) -> str:
    head = f"[bold]max batch[/] on {gpu}"
    reason = markup_text(result.reason or "")
    limit = f"{format_bytes(result.limit_bytes)} {_limit_name(result)}"
    if result.max_batch is None:
        return f"{head}: not solved: {reason}"
    if result.max_batch == 0:
        return (f"{head}: 0, {reason} ({result.basis}"
                f" {format_bytes(result.peak_at_next_bytes or 0)} > {limit})")
    text = f"{head}: {markup(result.batch_dim)}={result.max_batch}"
    if result.peak_at_max_bytes is not None:
        text += f" ({result.basis} {format_bytes(result.peak_at_max_bytes)}"
        if result.peak_at_next_bytes is not None:
            text += (f"; {format_bytes(result.peak_at_next_bytes)} at {result.max_batch + 1}"
                     f" > {limit}")
        text += ")"
    return text + (f"; {reason}" if reason else "")


def _limit_name(result: MaxBatchResult) -> str:
    """A device total is held against the GPU's capacity, a live peak against usable."""
    return "capacity" if "device total" in result.basis else "usable"


def sweep_table(sweep: SweepResult) -> Table:
    table = Table(title=f"sweep over {markup(sweep.dim)} (latency: roofline lower bound)")
    totals = any(p.device_total_bytes is not None for p in sweep.points)
    columns = (markup(sweep.dim), "peak", *(("device total",) if totals else ()), "fits",
               "est. latency", "throughput /s")
    for column in columns:
        table.add_column(column, justify="right")
    for point in sweep.points:
        fits = "-" if point.fits is None else ("yes" if point.fits else "[red]no[/]")
        latency = "-" if point.est_latency_s is None else format_seconds(point.est_latency_s)
        throughput = ("-" if point.est_throughput_per_s is None
                      else format_si(point.est_throughput_per_s))
        total = () if not totals else (format_bytes(point.device_total_bytes or 0),)
        table.add_row(str(point.value), format_bytes(point.peak_bytes), *total, fits, latency,
                      throughput)
    return table


def gpu_fits_table(analysis: Analysis, rows: list[GpuRow]) -> Table:
    """`graphmem gpus --fits`: one row per GPU, each verdict on that GPU's device total."""
    dims = markup_dims(analysis.dims.bound, "no dims bound")
    free = f"; free: {markup_dims(analysis.dims.free)}" if analysis.dims.free else ""
    peak = peak_text(analysis.liveness.peak_candidates)
    bases = [row.fit.basis for row in rows] + [row.max_batch.basis for row in rows
                                               if row.max_batch is not None]
    basis = next((b for b in bases if "device total" in b), bases[0] if bases else "")
    table = Table(title=f"{markup(analysis.model.name)} ({dims}{free}): live-tensor peak"
                  f" {peak} in the model's order", caption=f"fits: the {basis} against the"
                  " GPU's memory (the total the driver reports), with its max batch; latency"
                  " is a roofline lower bound from datasheet peaks, not a benchmark")
    needed = "device total" if "device total" in basis else "peak + context"
    table.add_column("GPU", no_wrap=True)  # the name to type after --gpu: never cut
    for column in ("memory", needed, "fits", "est. latency", "throughput /s", "max batch"):
        table.add_column(column, justify="right")
    for row in rows:
        fit = row.fit
        if fit.fits is None:
            verdict = "-"
        else:
            utilization = fit.utilization or 0.0
            share = "<1%" if utilization < 0.01 else f"{utilization:.0%}"
            verdict = f"yes ({share})" if fit.fits else f"[red]no[/] ({share})"
        roofline = row.roofline
        latency = format_seconds(roofline.est_latency_s) if roofline else "-"
        throughput = "-"
        if roofline is not None and roofline.est_throughput_per_s is not None:
            throughput = format_si(roofline.est_throughput_per_s)
        required = fit.required_bytes
        total = format_bytes(int(required)) if required.is_constant else "-"
        table.add_row(fit.gpu.name, format_bytes(fit.capacity_bytes), total, verdict, latency,
                      throughput, _max_batch_cell(row.max_batch))
    return table


def _max_batch_cell(result: MaxBatchResult | None) -> str:
    if result is None or result.max_batch is None:
        return "-"
    limit = "+" if result.reason and result.max_batch > 0 else ""
    return f"{result.max_batch:,}{limit}"


def format_seconds(seconds: float) -> str:
    """0.0123 -> '12.3 ms'."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
