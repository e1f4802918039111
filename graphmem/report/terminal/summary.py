"""The concise terminal summary (rich). It only renders an Analysis."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from graphmem.core.safe_text import markup, markup_dims, markup_text
from graphmem.core.units import format_bytes, format_bytes_sym, format_si_sym, format_sym_or_max
from graphmem.passes.fit import GpuFit
from graphmem.passes.modules import TOP, ModuleReport
from graphmem.pipeline.analysis import Analysis
from graphmem.report.json.report import ROLE_KEYS
from graphmem.report.terminal.distributed import print_distributed
from graphmem.report.terminal.plan import print_plans
from graphmem.report.terminal.runtime import print_runtime
from graphmem.report.terminal.suggestions import print_suggestions

_LIVE_ROWS = 8


def print_summary(analysis: Analysis, console: Console) -> None:
    console.print(_headline(analysis))
    for warning in analysis.model.warnings:
        console.print(f"[yellow]warning:[/] {markup_text(warning)}")
    console.print(_totals_table(analysis))
    console.print(_live_table(analysis))
    if analysis.modules and any(row.module != TOP for row in analysis.modules.rows):
        console.print(_module_table(analysis.modules))
    _print_gaps(analysis, console)
    if analysis.fit:
        console.print(_fit_line(analysis.fit))
    print_plans(analysis, console)
    print_runtime(analysis, console)
    print_distributed(analysis, console)
    print_suggestions(analysis.suggestions, console)


def _headline(analysis: Analysis) -> str:
    model = analysis.model
    dims = markup_dims(analysis.dims.bound, "none bound")
    free = f"; free dims: {markup_dims(analysis.dims.free)}" if analysis.dims.free else ""
    opset = f"opset {model.opset}, " if model.opset else ""
    mode = analysis.mode
    if analysis.training:
        training = analysis.training
        mode += f" · {training.optimizer}" + (f" · AMP {training.amp}" if training.amp else "")
        if training.grad_accum > 1:
            mode += (f" · {training.grad_accum} micro-batches of {training.micro_batch}"
                     f" = effective batch {training.effective_batch} (memory per micro-batch)")
    return (
        f"[bold]{markup(model.name)}[/] ({model.source_format}, {opset}"
        f"{model.node_count} nodes) · {mode} · dims: {dims}{free}"
    )


def _totals_table(analysis: Analysis) -> Table:
    live = analysis.liveness
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    params = analysis.params
    table.add_row("parameters", f"{params.count:,} ({format_bytes(params.bytes)})")
    if params.buffer_count:
        table.add_row("buffers", f"{params.buffer_count:,} ({format_bytes(params.buffer_bytes)})")
    macs = format_si_sym(analysis.costs.total_macs)
    flops = format_si_sym(analysis.costs.total_flops, "FLOP")
    table.add_row("MACs / FLOPs", f"{markup_text(macs)} / {markup_text(flops)} (1 MAC = 2 FLOPs)")
    peak_node = live.order[live.peak_step]
    peak = format_sym_or_max(live.peak_candidates, format_bytes_sym)
    table.add_row("peak memory", f"{markup_text(peak)}  at step {live.peak_step}"
                  f" ({markup(peak_node)}), model order; of which:")
    for role, size in live.breakdown_at_peak.items():
        table.add_row(f"  {ROLE_KEYS[role]}", markup_text(format_bytes_sym(size)))
    table.add_row("lower bound", f"{markup_text(format_bytes_sym(live.lower_bound_bytes))} "
                  "(largest single node + residents: no order does better)")
    return table


def _live_table(analysis: Analysis) -> Table:
    tensors = [t for t in analysis.liveness.live_at_peak if t.producer is not None]
    table = Table(title=f"largest activations live at the peak ({len(tensors)} in all)")
    for column in ("tensor", "shape", "dtype", "size", "made by", "kept alive by"):
        table.add_column(column, overflow="fold")
    for tensor in tensors[:_LIVE_ROWS]:
        table.add_row(markup(tensor.name), markup_text(tensor.shape), markup(tensor.dtype),
                      markup_text(format_bytes_sym(tensor.nbytes)), markup(tensor.producer or "-"),
                      markup(tensor.last_consumer or "(graph output)"))
    return table


def _module_table(report: ModuleReport) -> Table:
    table = Table(title=f"by module (depth {report.depth})")
    for column in ("module", "params", "FLOPs", "live at peak"):
        table.add_column(column, justify="left" if column == "module" else "right")
    for row in report.rows:
        table.add_row(markup(row.module), f"{row.params:,}", markup_text(format_si_sym(row.flops)),
                      markup_text(format_bytes_sym(row.bytes_at_peak)))
    return table


def _print_gaps(analysis: Analysis, console: Console) -> None:
    costs = analysis.costs
    if costs.unsupported_ops:
        ops = ", ".join(f"{op} x{count}" for op, count in costs.unsupported_ops.items())
        console.print(f"[yellow]unsupported ops (FLOPs not counted):[/] {markup_text(ops)}")
    if costs.shape_unknown_nodes:
        console.print(f"[yellow]{len(costs.shape_unknown_nodes)} nodes with unknown shapes[/]"
                      f" (FLOPs not counted), e.g. {markup(costs.shape_unknown_nodes[0])}")
    if analysis.liveness.unknown_size_values:
        console.print(f"[yellow]{len(analysis.liveness.unknown_size_values)} tensors of unknown"
                      " size are counted as 0 bytes[/]")
    if costs.subgraph_nodes:
        console.print(f"[yellow]{len(costs.subgraph_nodes)} control-flow nodes (If/Loop/Scan):"
                      " their bodies are not costed; outer tensors they read stay live[/]")


def _fit_line(fit: GpuFit) -> str:
    head = (f"GPU {fit.gpu.full_name}: {format_bytes(fit.capacity_bytes)} - "
            f"{format_bytes(fit.reserve.bytes)} CUDA context + workspaces = "
            f"{format_bytes(fit.usable_bytes)} usable")
    if fit.fits is None:
        return f"{head}; bind the free dims (--batch / --dim) to decide whether it fits"
    verdict = "[green]fits[/]" if fit.fits else "[red]does NOT fit[/]"
    share = "<0.1%" if fit.utilization is not None and fit.utilization < 0.001 else (
        f"{fit.utilization:.1%}")
    return f"{head}; peak uses {share}: {verdict}"
