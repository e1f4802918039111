"""`--verbose`: everything behind the summary's answer, each term glossed where it first appears.

Tables fit the console's width without breaking a word: names are shortened in the middle
(`/layer1/layer1.0/conv3/Co…output_0`: both ends of a path stay readable) to the width their
column gets, and numbers wrap only at spaces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console, JustifyMethod
from rich.table import Table

from graphmem.core.safe_text import markup, markup_text, shorten
from graphmem.core.units import format_bytes
from graphmem.passes.modules import TOP, ModuleReport
from graphmem.pipeline.analysis import Analysis
from graphmem.report.error_band import band_text
from graphmem.report.precision import precision_warnings
from graphmem.report.terminal.formulas import count_text, peak_text, size_text

if TYPE_CHECKING:  # a GPU's verdict and runtime model: imported where the analysis has one
    from graphmem.passes.fit import GpuFit

LIVE_ROWS = 8
MIN_NAME_CHARS = 12
TIMES = "\u00d7"  # the multiplication sign between the dims of a shape: `batchxseq` misreads
# one gloss per term, printed the first time the term appears (plain words, one line each)
GLOSSES = {
    "model order": "model order: the order of the ops as the file (or the trace) gives them",
    "lower bound": "lower bound: no execution order can use less",
    "live at the peak": "live at the peak: tensors made and not yet freed at the step where"
                        " the live total is largest",
    "usable": "usable: the GPU's memory less the CUDA context and library workspaces",
    "best order": "best order: the order of the ops with the lowest peak graphmem found",
    "arena plan": "arena plan: how the runtime packs tensors into reusable blocks",
    "roofline": "roofline: a time lower bound from the GPU's datasheet peaks",
    "max batch": "max batch: the largest batch whose device total fits the GPU",
    "device total": "device total: what the process holds on the GPU, as nvidia-smi shows it",
    "KV cache": "KV cache: the keys and values a decoder keeps for every past token",
    "top level": "(top level): ops outside every module: the model's own forward code and, in"
                 " a training step, the loss, the gradients it starts and the optimizer's"
                 " update",
}


class Glossary:
    """Prints a term's gloss (dim) the first time it is asked for."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.seen: set[str] = set()

    def explain(self, *terms: str) -> None:
        for term in terms:
            if term not in self.seen:
                self.seen.add(term)
                self.console.print(f"[dim]{markup_text(GLOSSES[term])}[/]")


def print_totals(analysis: Analysis, console: Console, glossary: Glossary) -> None:
    """Parameters, MACs and FLOPs, the peak in the model's order and the lower bound."""
    glossary.explain("model order", "lower bound")
    live = analysis.liveness
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    model = analysis.model
    opset = f", opset {model.opset}" if model.opset else ""
    table.add_row("graph", f"{markup(model.name)}: {model.node_count:,} nodes{opset}; shapes:"
                  f" {markup_text(model.shape_inference)}")
    params = analysis.params
    table.add_row("parameters", f"{params.count:,} ({format_bytes(params.bytes)})")
    if params.buffer_count:
        table.add_row("buffers", f"{params.buffer_count:,} ({format_bytes(params.buffer_bytes)})")
    costs = analysis.costs
    table.add_row("MACs", markup_text(count_text(costs.total_macs)))
    table.add_row("FLOPs", markup_text(count_text(costs.total_flops, "FLOP"))
                  + " (1 MAC = 2 FLOPs)")
    peak_node = markup(shorten(live.order[live.peak_step], 40))
    table.add_row("peak, model order", f"{markup_text(peak_text(live.peak_candidates))}"
                  f" at step {live.peak_step:,} of {len(live.order):,} ({peak_node})")
    table.add_row("lower bound", markup_text(size_text(live.lower_bound_bytes))
                  + " (the largest single node + residents)")
    console.print(table)


def live_table(analysis: Analysis, width: int) -> Table:
    """The largest activations live at the peak; names shortened to fit `width` columns."""
    tensors = [t for t in analysis.liveness.live_at_peak if t.producer is not None]
    table = Table(title=f"largest activations live at the peak ({len(tensors)} in all)")
    shown = tensors[:LIVE_ROWS]
    names = [_tensor_label(t.name, t.producer) for t in shown]
    users = [t.last_consumer or "(graph output)" for t in shown]
    shapes = [markup_text(_shape(t.shape)) for t in shown]
    sizes = [markup_text(size_text(t.nbytes)) for t in shown]
    # 13: borders and padding of 4 columns; the names share the rest, the tensor's the larger
    room = width - 13 - max(map(len, shapes), default=5) - max(map(len, sizes), default=4)
    name_chars = max(MIN_NAME_CHARS, min(max(map(len, names), default=0), room * 3 // 5))
    user_chars = max(MIN_NAME_CHARS, room - name_chars)
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("tensor", "left"), ("shape", "left"), ("size", "right"), ("kept alive by", "left"))
    for column, justify in columns:
        table.add_column(column, justify=justify, no_wrap=True)
    for name, user, shape, size in zip(names, users, shapes, sizes, strict=True):
        table.add_row(markup(shorten(name, name_chars)), shape, size,
                      markup(shorten(user, user_chars)))
    return table


def _tensor_label(name: str, producer: str | None) -> str:
    """An exporter's `<node>_output_0` is shown as its node: the same thing, shorter."""
    if producer and name == f"{producer}_output_0":
        return producer
    return name


def _shape(shape: str) -> str:
    """`[32, 256, 56, 56]` -> `32x256x56x56` with the multiplication sign: one word."""
    return shape.strip("[]").replace(", ", TIMES) if shape.startswith("[") else shape


def module_table(report: ModuleReport, width: int) -> Table:
    """Parameters, FLOPs and bytes live at the peak per module at the report's depth."""
    table = Table(title=f"by module (depth {report.depth})")
    name_chars = max(MIN_NAME_CHARS, width // 3)
    table.add_column("module", no_wrap=True)
    for column in ("params", "FLOPs", "live at peak"):
        table.add_column(column, justify="right")
    for row in report.rows:
        table.add_row(markup(shorten(row.module, name_chars)), f"{row.params:,}",
                      markup_text(count_text(row.flops)), markup_text(size_text(row.bytes_at_peak)))
    return table


def has_modules(report: ModuleReport | None) -> bool:
    return report is not None and any(row.module != TOP for row in report.rows)


def gap_lines(analysis: Analysis) -> list[str]:
    """What the numbers leave out: real warnings, shown in the default view."""
    costs = analysis.costs
    lines = []
    if costs.unsupported_ops:
        ops = ", ".join(f"{op} x{count}" for op, count in costs.unsupported_ops.items())
        lines.append(f"[yellow]warning:[/] unsupported ops (FLOPs not counted):"
                     f" {markup_text(ops)}")
    if costs.shape_unknown_nodes:
        lines.append(f"[yellow]warning:[/] {len(costs.shape_unknown_nodes)} nodes with unknown"
                     f" shapes (FLOPs not counted), e.g. {markup(costs.shape_unknown_nodes[0])}")
    if analysis.liveness.unknown_size_values:
        lines.append(f"[yellow]warning:[/] {len(analysis.liveness.unknown_size_values)} tensors"
                     " of unknown size are counted as 0 bytes")
    for line in precision_warnings(analysis.roofline):
        lines.append(f"[yellow]warning:[/] {markup_text(line)}")
    if costs.subgraph_nodes:
        lines.append(f"[yellow]warning:[/] {len(costs.subgraph_nodes)} control-flow nodes"
                     " (If/Loop/Scan/cond) with body ops graphmem cannot cost; outer tensors"
                     " they read stay live")
    return lines


def fit_line(fit: GpuFit) -> str:
    """The GPU's memory, its CUDA context and what is left for tensors; the basis."""
    head = (f"GPU {markup(fit.gpu.full_name)}: {format_bytes(fit.capacity_bytes)} -"
            f" {format_bytes(fit.reserve.bytes)} CUDA context + workspaces ="
            f" {format_bytes(fit.usable_bytes)} usable")
    band = f"; {markup(band_text(fit.error_band))}" if fit.error_band is not None else ""
    return f"{head}; the verdict reads the {markup(fit.basis)}{band}"
