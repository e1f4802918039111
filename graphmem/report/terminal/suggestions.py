"""Terminal section for the suggestions (graphmem/suggest/cards.py): one row each, the snippets
of the ones that save memory, and what could not be suggested."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from graphmem.core.safe_text import SNIPPET_MAX_CHARS, markup_text
from graphmem.core.units import format_bytes, format_si
from graphmem.report.terminal.plan import format_seconds

if TYPE_CHECKING:  # rendered where suggestions were made: their module is loaded then
    from graphmem.suggest.cards import RuntimeLever, Suggestion, SuggestionReport

_TARGETS_SHOWN = 4
_ZERO_INPLACE_SHOWN = 3  # in-place candidates that save nothing at the peak, listed by name


def print_suggestions(report: SuggestionReport | None, console: Console) -> None:
    if report is None:
        return
    if report.suggestions:
        console.print(suggestions_table(report))
    else:
        console.print("suggestions: none found")
    hidden = _hidden_inplace(report.suggestions)
    if hidden:
        console.print(f"  and {len(hidden)} more in-place candidates, each saving 0 B at the"
                      " peak (their input and output are not both live there)")
    for suggestion in report.suggestions:
        if suggestion.snippet and suggestion.kind in ("checkpoint", "amp", "grad_accum"):
            console.print(f"[bold]{suggestion.kind}[/]: {markup_text(suggestion.title)}")
            console.print(markup_text(suggestion.snippet.rstrip(), SNIPPET_MAX_CHARS,
                                      multiline=True), soft_wrap=True)
    if len(report.checkpoint_curve) > 1:
        points = "; ".join(f"{format_bytes(p.peak_bytes)} at +{format_si(p.extra_flops, 'FLOP')}"
                           f" ({len(p.modules)} modules)" for p in report.checkpoint_curve)
        console.print(f"checkpointing, peak against recompute (re-analysed): {points}")
    for lever in report.runtime_levers:
        console.print(lever_line(lever))
        console.print(f"  set it: {markup_text(lever.setting)}", soft_wrap=True)
    for note in report.notes:
        console.print(f"[yellow]note:[/] {markup_text(note)}")


def lever_line(lever: RuntimeLever) -> str:
    """A runtime option's device total and largest batch, with it and as analysed."""
    parts = []
    if lever.device_total_bytes is not None and lever.base_device_total_bytes is not None:
        parts.append(f"device total {format_bytes(lever.device_total_bytes)} (now"
                     f" {format_bytes(lever.base_device_total_bytes)})")
    if lever.max_batch is not None and lever.base_max_batch is not None:
        parts.append(f"largest batch {lever.max_batch:,} (now {lever.base_max_batch:,})")
    return f"[bold]runtime option[/] {markup_text(lever.option)}: {'; '.join(parts)}"


def suggestions_table(report: SuggestionReport) -> Table:
    budget = (f"budget {format_bytes(report.budget_bytes)} ({report.budget_source})"
              if report.budget_bytes is not None else "no budget (--memory-budget or --gpu)")
    table = Table(title=f"suggestions: peak now {format_bytes(report.base_peak_bytes)}, {budget}")
    for column in ("kind", "change", "saves", "new peak", "extra compute", "where"):
        table.add_column(column, overflow="fold")
    hidden = set(map(id, _hidden_inplace(report.suggestions)))
    for suggestion in report.suggestions:
        if id(suggestion) not in hidden:
            table.add_row(*_row(suggestion))
    return table


def _row(suggestion: Suggestion) -> tuple[str, ...]:
    where = "" if suggestion.kind == "inplace" else _targets(suggestion.targets)  # in the title
    return (suggestion.kind, markup_text(suggestion.title), _bytes(suggestion.saves_bytes),
            _bytes(suggestion.new_peak_bytes), _cost(suggestion), where)


def _hidden_inplace(suggestions: tuple[Suggestion, ...]) -> list[Suggestion]:
    zero = [s for s in suggestions if s.kind == "inplace" and s.saves_bytes == 0]
    return zero[_ZERO_INPLACE_SHOWN:]


def _bytes(value: int | None) -> str:
    return "-" if value is None else format_bytes(value)


def _cost(suggestion: Suggestion) -> str:
    parts = []
    if suggestion.extra_flops:
        parts.append(_signed(suggestion.extra_flops, lambda v: format_si(v, "FLOP")))
    if suggestion.extra_time_s:
        parts.append(_signed(suggestion.extra_time_s, format_seconds) + "/step")
    if not parts:
        return "none" if suggestion.extra_flops == 0 else "-"
    return ", ".join(parts)


def _signed(value: float, render: Callable[[float], str]) -> str:
    return ("-" if value < 0 else "+") + render(abs(value))


def _targets(targets: tuple[str, ...]) -> str:
    shown = ", ".join(targets[:_TARGETS_SHOWN])
    more = len(targets) - _TARGETS_SHOWN
    return markup_text(shown + (f" +{more} more" if more > 0 else ""))
