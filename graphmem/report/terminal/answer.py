"""The answer the summary leads with: the verdict on the GPU, where the memory goes, what to
change. Every number is read from the typed results (graphmem/passes/fit.py `GpuFit`, the
liveness, the module report, the suggestions); nothing is recomputed here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from rich.table import Table

from graphmem.core.conventions import ROLE_KEYS
from graphmem.core.safe_text import markup, markup_text, shorten
from graphmem.core.symbolic import SymInt
from graphmem.core.units import count_noun, format_bytes
from graphmem.passes.device_parts import LIVE_PEAK_BASIS, DevicePart
from graphmem.passes.modules import TOP
from graphmem.pipeline.analysis import Analysis
from graphmem.report.error_band import range_text, tight_text
from graphmem.report.terminal.formulas import peak_text, probe_value, size_text
from graphmem.report.words import part_label, runtime_name

if TYPE_CHECKING:  # a GPU's verdict and runtime model: imported where the analysis has one
    from graphmem.passes.fit import FitPart, GpuFit
    from graphmem.passes.max_batch import MaxBatchResult
    from graphmem.runtime_models.base import RuntimeEstimate

ROLES_SHOWN = 5
MODULES_SHOWN = 3  # the answer stays within 20 lines (tests/test_terminal_samples.py)
LABEL_CHARS = 40  # the label column of the memory block: with the sizes, within 80 columns
CELL_CHARS = 40  # a size longer than this gets its own line
CLOSE_SHARE = 0.9  # a device total above this share of the GPU is "close": say what to change
_ROLE_WORDS = {key: key.replace("_", " ") for key in ROLE_KEYS.values()}


# ----- the verdict ---------------------------------------------------------------------------
def verdict_line(analysis: Analysis) -> str:
    """Fits or not, on which GPU, by how much, and the largest batch when it is solved."""
    fit = analysis.fit
    if fit is None:
        return "no GPU given: add --gpu NAME for a verdict ('graphmem gpus' lists them)"
    gpu = markup(fit.gpu.full_name)
    if fit.fits is None:
        return _open_verdict(analysis, fit, gpu)
    share = _share(fit.utilization)
    needs = f"{format_bytes(int(fit.required_bytes))} of {format_bytes(fit.capacity_bytes)}"
    # tight: within the measured error band (graphmem/report/error_band.py)
    tight = f"; [bold yellow]{markup(tight_text(fit))}[/]" if fit.tight else ""
    if not fit.fits:
        over = fit.over_bytes or 0
        return (f"[bold red]does NOT fit[/] on {gpu}: {needs} ({share}, {format_bytes(over)}"
                f" over{tight})")
    largest = _serving_answer(analysis) or max_batch_text(analysis.max_batch)
    return f"[bold green]fits[/] on {gpu}: {needs} ({share}{tight})" + (
        f"; {largest}" if largest else "")


def _serving_answer(analysis: Analysis) -> str:
    """Under --serve the answer is the plan's: how many sequences run at once."""
    plan = analysis.kv_cache.serving if analysis.kv_cache is not None else None
    if plan is None:
        return ""
    return (f"{count_noun(plan.total_sequences, 'sequence')} of {plan.context:,} tokens at"
            " once")


def _open_verdict(analysis: Analysis, fit: GpuFit, gpu: str) -> str:
    """Free dims: the largest batch where it is solved, else what to bind."""
    batch = analysis.max_batch
    if batch is not None and batch.max_batch and batch.peak_at_max_bytes is not None:
        return (f"[bold green]fits[/] on {gpu} up to {markup(batch.batch_dim)}="
                f"{batch.max_batch:,} ({format_bytes(batch.peak_at_max_bytes)} of"
                f" {format_bytes(batch.limit_bytes)} there)")
    if batch is not None and batch.max_batch == 0 and batch.peak_at_next_bytes is not None:
        return (f"[bold red]does NOT fit[/] on {gpu} even at {markup(batch.batch_dim)}=1"
                f" ({format_bytes(batch.peak_at_next_bytes)} of"
                f" {format_bytes(batch.limit_bytes)})")
    free = ", ".join(analysis.dims.free)
    return (f"fit on {gpu} ({format_bytes(fit.capacity_bytes)}) depends on {markup(free)}:"
            " bind them for a verdict")


def max_batch_text(result: MaxBatchResult | None) -> str:
    if result is None or not result.max_batch:
        return ""
    floor = "+" if result.reason else ""  # a floor: the search stopped before the limit
    return f"max {markup(result.batch_dim)} {result.max_batch:,}{floor}"


def _share(utilization: float | None) -> str:
    if utilization is None:
        return "-"
    return "<0.1%" if utilization < 0.001 else f"{utilization:.1%}"


def _peak(analysis: Analysis) -> str:
    return peak_text(analysis.liveness.peak_candidates)


# ----- where the memory goes -----------------------------------------------------------------
def memory_table(analysis: Analysis) -> Table:
    """The device total's parts, the live tensors by role, the largest modules: one block."""
    table = Table(show_header=False, box=None, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column(no_wrap=True, max_width=LABEL_CHARS)
    table.add_column(justify="right", overflow="fold")
    fit, estimate = analysis.fit, analysis.runtime
    at_max, batch = analysis.runtime_at_max_batch, analysis.max_batch
    if fit is not None and at_max is not None and batch is not None and batch.max_batch:
        # the batch free: the device total at the largest batch, the number the verdict
        # line reads ("up to batch=N (X of Y there)"), with its parts
        runtime = runtime_name(at_max.runtime)
        _group(table, f"on the GPU at {markup(batch.batch_dim)}={batch.max_batch:,}"
               f" ({runtime})", SymInt.const(at_max.device_total_bytes),
               _labelled(_runtime_parts(at_max)))
    elif fit is not None:  # the live peak is the next group: not repeated as a part
        _group(table, f"on the GPU ({_basis(fit)})", fit.required_bytes,
               _labelled(p for p in fit.parts if p.part is not DevicePart.LIVE_PEAK))
        if fit.error_band is not None and _band_matters(fit):
            table.add_row("  error band", range_text(fit.error_band))
    elif estimate is not None:  # no GPU: what the runtime on this machine holds (ort-cpu)
        runtime = runtime_name(estimate.runtime)
        _group(table, f"in the process ({runtime} model)",
               SymInt.const(estimate.device_total_bytes),
               _labelled(_runtime_parts(estimate)))
    _roles(table, analysis)
    _modules(table, analysis)
    return table


def _runtime_parts(estimate: RuntimeEstimate) -> tuple[FitPart, ...]:
    """A runtime estimate's parts (pipeline/device_total.py, imported where there is one)."""
    from graphmem.pipeline.device_total import runtime_parts

    return runtime_parts(estimate)


def _labelled(parts: Iterable[FitPart]) -> list[tuple[str, SymInt]]:
    return [(part_label(part), part.size_bytes) for part in parts]


def _band_matters(fit: GpuFit) -> bool:
    """The error band is a row of the answer where it can change the reading: the verdict is
    tight, or the device total is close to the capacity on a path never measured (--verbose
    states the band always)."""
    band = fit.error_band
    if band is None:
        return False
    close = fit.utilization is not None and fit.utilization >= CLOSE_SHARE
    return bool(fit.tight) or (not band.measured and close)


def _basis(fit: GpuFit) -> str:
    """What the verdict's number is, in a few words: `onnxruntime model`, `serving plan`."""
    if fit.runtime is not None:
        return f"{runtime_name(fit.runtime)} model"
    if fit.basis == LIVE_PEAK_BASIS:
        return "live peak + context"
    return markup(fit.basis.partition(":")[0])


def _group(table: Table, title: str, total: SymInt, rows: list[tuple[str, SymInt]]) -> None:
    table.add_row(f"[bold]{title}[/]", markup_text(size_text(total)))
    for label, size in rows:
        table.add_row(f"  {markup(label)}", markup_text(size_text(size)))


def _roles(table: Table, analysis: Analysis) -> None:
    """Live tensors at the peak by role, largest first; small roles named, not sized."""
    live = analysis.liveness
    roles = sorted(((ROLE_KEYS[role], size) for role, size in live.breakdown_at_peak.items()
                    if probe_value(size) > 0), key=lambda item: -probe_value(item[1]))
    peak = _peak(analysis)
    peak = markup_text(peak) if len(peak) <= CELL_CHARS else "see below"
    table.add_row("[bold]live tensors at the peak[/]", peak)
    for key, size in roles[:ROLES_SHOWN]:
        table.add_row(f"  {_ROLE_WORDS[key]}", markup_text(size_text(size)))
    rest = [_ROLE_WORDS[key] for key, _ in roles[ROLES_SHOWN:]]
    if rest:  # named, not sized: each is smaller than the ones above
        table.add_row(f"  + {markup(', '.join(rest))}", "")


def _modules(table: Table, analysis: Analysis) -> None:
    """The modules whose activations are largest at the peak."""
    report = analysis.modules
    rows = [] if report is None else [r for r in report.rows if probe_value(r.bytes_at_peak) > 0]
    if not rows or all(row.module == TOP for row in rows):
        return
    rows.sort(key=lambda row: -probe_value(row.bytes_at_peak))
    table.add_row("[bold]largest modules at the peak[/]", "")
    for row in rows[:MODULES_SHOWN]:
        table.add_row(f"  {markup(shorten(row.module, LABEL_CHARS - 2))}",
                      markup_text(size_text(row.bytes_at_peak)))


def peak_formula_line(analysis: Analysis) -> str:
    """A peak too long for a table cell (the largest of several polynomials, per range of a
    free dim): on its own line; empty otherwise."""
    peak = _peak(analysis)
    return "" if len(peak) <= CELL_CHARS else f"live-tensor peak: {markup_text(peak)}"


# ----- what to change ------------------------------------------------------------------------
def advice_lines(analysis: Analysis) -> list[str]:
    """At most two things to change: the suggestion that saves the most where suggestions
    ran; where it does not fit or is close, the batch that fits (or a hint to --suggest);
    what to bind while there is no verdict yet."""
    best = _best_suggestion(analysis)
    fit = analysis.fit
    lines = [best] if best else []
    if fit is None:
        return lines
    if fit.fits is None:  # the verdict line says what to bind, or the batch that fits
        return lines
    close = fit.utilization is not None and fit.utilization >= CLOSE_SHARE
    if fit.fits and not close:
        return lines
    if analysis.suggestions is None:
        lines.append(f"[bold]to save memory:[/] run with --suggest ({_levers(analysis)})")
    batch = analysis.max_batch
    if not fit.fits and batch is not None and batch.max_batch:
        lines.append(f"[bold]to fit:[/] --batch {batch.max_batch:,} (the largest"
                     f" {markup(batch.batch_dim)} that fits){_lever_batch(analysis)}")
    elif not fit.fits and batch is not None and batch.max_batch == 0:
        lines.append("[bold]to fit:[/] not even batch 1 fits this GPU: a larger GPU"
                     " ('graphmem gpus --fits MODEL')")
    return lines[:2]


def _lever_batch(analysis: Analysis) -> str:
    """The largest batch a runtime option raises it to, where --suggest found one."""
    report = analysis.suggestions
    for lever in report.runtime_levers if report is not None else ():
        if lever.base_max_batch and lever.raises_batch:
            return f", or {lever.max_batch:,} with {markup(lever.option)}"
    return ""


def _levers(analysis: Analysis) -> str:
    """What --suggest looks for in this model: a training step's levers (AMP only when it is
    not on already), or an inference graph's."""
    training = analysis.training
    if training is None:
        return "in-place ops, pooled FC heads, grouped convs"
    amp = "" if training.amp else ", AMP"
    return f"checkpointing{amp}, the batch and gradient accumulation, in-place ops"


def _best_suggestion(analysis: Analysis) -> str:
    report = analysis.suggestions
    if report is None:
        return ""
    saving = [s for s in report.suggestions if s.saves_bytes]
    if not saving:
        return ""
    best = max(saving, key=lambda s: s.saves_bytes or 0)
    return (f"[bold]largest saving:[/] {markup_text(best.title)}: saves"
            f" {format_bytes(best.saves_bytes or 0)} (--verbose for all)")
