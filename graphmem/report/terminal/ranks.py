"""Terminal rendering of a model-parallel plan: one row per pipeline rank, the most loaded
marked (graphmem/distributed/ranks.py computes it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from graphmem.core.units import format_bytes
from graphmem.report.parallel_text import layout_text

if TYPE_CHECKING:  # rendered where the analysis has them: their modules are loaded then
    from graphmem.distributed.ranks import RankPlan, RankRow

__all__ = ["layout_text", "ranks_table"]


def ranks_table(plan: RankPlan) -> Table:
    top = plan.most_loaded.stage
    table = Table(title=f"per pipeline rank ({plan.layer_count} layers {plan.layer_prefix}.N;"
                  " every data-, tensor- and context-parallel rank of a stage holds the same)")
    for column in ("stage", "layers", "holds", "parameters", "in flight", "activations",
                   "total"):
        table.add_column(column, justify="left" if column in ("stage", "holds") else "right")
    for row in plan.rows:
        memory = row.memory
        mark = " [bold red]*[/]" if row.stage == top else ""
        table.add_row(f"{row.stage}{mark}", _layers(row), ", ".join(row.holds) or "-",
                      f"{row.parameter_count:,}", str(row.in_flight),
                      format_bytes(memory.activations_bytes),
                      f"[bold]{format_bytes(memory.total_bytes)}[/]")
    table.caption = ("* the most loaded (the verdict reads it); in flight: forwards whose"
                     " activations the rank holds at once")
    if plan.tied:
        table.caption += (f"; tied: {', '.join(plan.tied)} held on each stage that reads it"
                          " (its gradients all-reduced between them)")
    if plan.layout.context > 1:
        table.caption += ("; ring attention: max(C, 4) K/V blocks of the largest attention"
                          " per rank" if plan.attention_kv_bytes else
                          "; no fused attention in the trace: ring attention's K/V blocks"
                          " are not counted")
    if plan.experts is not None:
        shard = plan.experts
        table.caption += (f"; routed experts: {shard.experts} per layer,"
                         f" {shard.experts // shard.degree} per rank; the rest replicated;"
                          f" --moe-routing {plan.layout.routing}: the busiest expert-parallel"
                          f" rank's experts take {float(plan.routing_factor):g} x the traced"
                          " step's routed tokens (its expert activations scaled by it)")
    return table


def _layers(row: RankRow) -> str:
    return " + ".join(f"{run.start}-{run.stop - 1}" if len(run) > 1 else str(run.start)
                      for run in row.layers if run) or "-"
