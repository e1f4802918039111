"""`graphmem check` on the terminal: per model a headline, one line per budget, a verdict.

Each budget line is `PASS|FAIL  name  value  <= limit  (how the value was obtained)`, on one
line whatever the terminal width, so CI logs can be grepped.
"""

from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape

from graphmem.core.safe_text import (
    TEXT_MAX_CHARS,
    escape_markup,
    markup,
    markup_dims,
    markup_text,
    printable,
    shorten,
)
from graphmem.core.units import count_noun, format_bytes, format_si
from graphmem.gate.budgets import BudgetResult, ModelNumbers, format_seconds
from graphmem.gate.check import CheckReport, ModelCheck
from graphmem.report.kv_layers import group_text


def format_quantity(value: float, unit: str) -> str:
    """A budget's value or limit in its unit: bytes in IEC, FLOPs in SI, growth in %."""
    if math.isinf(value):
        return "inf"
    if unit == "bytes":
        return format_bytes(value)
    if unit == "s":
        return format_seconds(value)
    if unit == "FLOP":
        return format_si(value, "FLOP")
    if unit == "%":
        return f"{value:+.2f}%"
    return f"{int(value):,}"


def print_check(report: CheckReport, console: Console) -> None:
    for model in report.models:
        console.print(_headline(model), soft_wrap=True)
        for line in plan_lines(model.numbers):
            console.print(f"  {markup_text(line)}", soft_wrap=True)
        for result in model.results:
            console.print(_budget_line(result), soft_wrap=True)
    console.print(_verdict(report), soft_wrap=True)


def _headline(model: ModelCheck) -> str:
    numbers = model.numbers
    dims = markup_dims(numbers.dims, "fixed shapes")
    gpu = f" · {markup(numbers.gpu_name)}" if numbers.gpu_name else ""
    peak = (f"peak {format_bytes(numbers.peak_bytes)}"
            f" (activations {format_bytes(numbers.activation_peak_bytes)})")
    if numbers.rank is not None:  # a job across GPUs: the rank's total is the memory answer
        peak = (f"{format_bytes(numbers.rank.device_total_bytes)} per GPU on the most-loaded"
                f" rank (the whole step on one GPU: {peak})")
    parts = [peak, f"{numbers.params:,} params", format_si(numbers.flops, "FLOP")]
    if numbers.latency_s is not None:
        parts.append(f"latency >= {format_seconds(numbers.latency_s)} (roofline)")
    return (f"[bold]{markup(model.spec.label)}[/] ({markup_text(model.spec.model_path)})"
            f" · {dims}{gpu}: {escape(', '.join(parts))}")


def plan_lines(numbers: ModelNumbers) -> list[str]:
    """The plan the memory budgets read, in plain text: a training job's every pipeline
    rank (the most loaded marked), the served KV cache per layer type."""
    lines = []
    rank = numbers.rank
    if rank is not None:
        stages = "; ".join(
            f"stage {r.stage}{' *' if r.most_loaded else ''} {format_bytes(r.device_total_bytes)}"
            f" ({r.parameters:,} params)" for r in rank.ranks)
        lines.append(f"per rank: {format_bytes(rank.device_total_bytes)} on {rank.text}"
                     + (f"; every stage: {stages} (* the most loaded)" if stages else ""))
    if numbers.serving_groups:
        groups = "; ".join(group_text(use) for use in numbers.serving_groups)
        per_token = format_bytes(numbers.serving_per_token_bytes or 0)
        lines.append(f"KV cache per layer type: {per_token} per token; one sequence of"
                     f" {numbers.serving_context or 0:,} tokens"
                     f" {format_bytes(numbers.serving_sequence_bytes or 0)}: {groups}")
    return lines


def _budget_line(result: BudgetResult) -> str:
    verdict = "[green]PASS[/]" if result.passed else "[bold red]FAIL[/]"
    value = format_quantity(result.value, result.unit)
    limit = format_quantity(result.limit, result.unit)
    return (f"  {verdict}  {escape(result.name):<20} {escape(value):>12}"
            f"  {result.comparison} {escape(limit):<12} {markup_text(result.message)}")


def _verdict(report: CheckReport) -> str:
    models = count_noun(len(report.models), "model")
    if report.passed:
        holds = "holds" if report.budget_count == 1 else "hold"
        return (f"graphmem check: [green]PASSED[/]: {count_noun(report.budget_count, 'budget')}"
                f" {holds} ({models})")
    broken = "; ".join(f"{printable(m.spec.label)}: {', '.join(r.name for r in m.failures)}"
                       for m in report.models if not m.passed)
    broken = escape_markup(shorten(broken, TEXT_MAX_CHARS))  # labels are printable already
    return (f"graphmem check: [bold red]FAILED[/]: {report.failure_count} of"
            f" {count_noun(report.budget_count, 'budget')} broken ({models}) - {broken}")
