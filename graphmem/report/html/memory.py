"""Where the memory goes, as the HTML report shows it: by module, the tensors live at the peak
(the largest first) and the memory timeline, from the liveness and module results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from graphmem.core.ir import Graph, Role, Value
from graphmem.core.safe_text import printable, printable_text
from graphmem.core.symbolic import SymInt, sum_sizes
from graphmem.core.units import format_bytes
from graphmem.passes.liveness import LivenessResult, LiveTensor
from graphmem.passes.modules import TOP, ModuleReport
from graphmem.pipeline.analysis import Analysis
from graphmem.report.html.charts import TimelineChart, timeline_chart
from graphmem.report.html.quantity import Quantity, bytes_quantity, count_quantity, percent, probe
from graphmem.report.html.summary import GpuView

MAX_LIVE_SHOWN = 20  # tensors live at the peak shown before "show all"
MAX_LIVE_ROWS = 500  # written as HTML at most; the rest are summed in one line
MAX_MODULE_BARS = 12  # the largest modules as bars; the table below has every one


# ----- tensors live at the peak ---------------------------------------------------------------


class LiveRow(NamedTuple):
    name: str
    shape: str
    dtype: str
    size: Quantity
    role: str
    made_by: str
    kept_alive_by: str
    percent: float  # of the peak, at the probe value
    resident: bool
    # the module that made it (its producer's module path; a parameter's own module), so a
    # PyTorch step's `mul_250` says where in the model it comes from; "" where unknown
    module: str = ""


class LiveTable(NamedTuple):
    rows: tuple[LiveRow, ...]  # largest first, at most MAX_LIVE_ROWS
    shown: int  # rows visible before "show all"
    hidden: int  # live tensors beyond MAX_LIVE_ROWS, not written
    hidden_bytes: Quantity | None
    activations: int  # how many of the live tensors are activations (made by a node)
    activation_bytes: Quantity
    residents: int
    resident_total: Quantity

    @property
    def total(self) -> int:
        return len(self.rows) + self.hidden


def live_table(liveness: LivenessResult, graph: Graph | None = None) -> LiveTable:
    """`graph`: where the tensors' modules are read (graphmem/core/ir.py Node.module_path)."""
    peak_probe = probe(liveness.peak_bytes)  # the shares add up to 100% of the peak
    values = graph.values if graph is not None else {}
    # a node outside every module is the root's own ("(top level)", as in the module table)
    # where the graph has module paths at all
    top = TOP if graph is not None and any(n.module_path for n in graph.nodes) else ""
    # largest first at the probe value, then by name: the liveness's own order
    # (passes/liveness.py `_describe_live`), the one this table shows
    tensors = liveness.live_at_peak
    residents = [t for t in tensors if t.producer is None]
    made = [t for t in tensors if t.producer is not None]
    rest = tensors[MAX_LIVE_ROWS:]
    return LiveTable(
        rows=tuple(_live_row(t, peak_probe, _module(t, values.get(t.name), top))
                   for t in tensors[:MAX_LIVE_ROWS]),
        shown=MAX_LIVE_SHOWN,
        hidden=len(rest),
        hidden_bytes=bytes_quantity(sum_sizes(t.nbytes for t in rest)) if rest else None,
        activations=len(made),
        activation_bytes=bytes_quantity(sum_sizes(t.nbytes for t in made)),
        residents=len(residents),
        resident_total=bytes_quantity(liveness.resident_bytes),
    )


def _module(tensor: LiveTensor, value: Value | None, top: str = "") -> str:
    """The module that made the tensor (its producer's); a PyTorch parameter, buffer or its
    optimizer state is named by its module path (`exp_avg[h.0.ln_1.weight]`: h.0.ln_1); an
    ONNX initializer (`onnx::Conv_632`) by the module of its first reader; an input by none."""
    if value is None:
        return ""
    if value.producer is not None:
        return value.producer.module_path or top
    named = tensor.name.rpartition("[")[2].rstrip("]")
    if tensor.role in _STATE_ROLES and "." in named and not any(c in named for c in "/:"):
        return named.rpartition(".")[0]
    if tensor.role not in (Role.PARAMETER, Role.BUFFER):  # an input is no module's
        return ""
    return next((node.module_path for node in value.consumers if node.module_path), "")


_STATE_ROLES = (Role.PARAMETER, Role.BUFFER, Role.OPTIMIZER_STATE, Role.GRADIENT)


def _live_row(tensor: LiveTensor, peak_probe: int, module: str = "") -> LiveRow:
    size = bytes_quantity(tensor.nbytes)
    if tensor.producer is None:
        made_by, kept = "(resident)", "(live throughout)"
    else:
        made_by = printable(tensor.producer)
        kept = printable(tensor.last_consumer or (
            "(graph output: to the end)" if tensor.role is Role.OUTPUT else "(to the end)"))
    return LiveRow(
        name=printable(tensor.name),
        shape=printable_text(tensor.shape),
        dtype=printable(tensor.dtype),
        size=size,
        role=tensor.role.value,
        made_by=made_by,
        kept_alive_by=kept,
        percent=percent(size.probe, peak_probe),
        resident=tensor.producer is None,
        module=printable(module),
    )


# ----- by module ------------------------------------------------------------------------------


class ModuleRowView(NamedTuple):
    module: str
    params: int
    flops: Quantity
    at_peak: Quantity
    params_percent: float
    flops_percent: float
    at_peak_percent: float


class ModuleBreakdown(NamedTuple):
    depth: int
    rows: tuple[ModuleRowView, ...]  # in order of appearance
    by_memory: tuple[ModuleRowView, ...]  # largest activations at the peak first
    by_flops: tuple[ModuleRowView, ...]
    by_params: tuple[ModuleRowView, ...]


def module_breakdown(modules: ModuleReport | None) -> ModuleBreakdown | None:
    if modules is None or not modules.rows:
        return None
    flops = [count_quantity(r.flops, "FLOP") for r in modules.rows]
    at_peak = [bytes_quantity(r.bytes_at_peak) for r in modules.rows]
    top_params = max(r.params for r in modules.rows)
    top_flops = max(q.probe for q in flops)
    top_peak = max(q.probe for q in at_peak)
    rows = tuple(
        # bars are relative to the largest row, so the top bar is full width
        ModuleRowView(printable(r.module), r.params, f, p, percent(r.params, top_params),
                      percent(f.probe, top_flops), percent(p.probe, top_peak))
        for r, f, p in zip(modules.rows, flops, at_peak, strict=True)
    )
    return ModuleBreakdown(
        depth=modules.depth,
        rows=rows,
        by_memory=_top(rows, lambda r: r.at_peak.probe),
        by_flops=_top(rows, lambda r: r.flops.probe),
        by_params=_top(rows, lambda r: r.params),
    )


def _top(rows: Sequence[ModuleRowView],
         key: Callable[[ModuleRowView], int]) -> tuple[ModuleRowView, ...]:
    ranked = sorted((r for r in rows if key(r) > 0), key=lambda r: -key(r))
    return tuple(ranked[:MAX_MODULE_BARS])


# ----- the memory timeline --------------------------------------------------------------------


class RoleSteps(NamedTuple):
    """Live bytes per step by role (adding up to the live total): the stacked area."""

    roles: tuple[str, ...]  # css names, bottom of the stack first
    bytes_per_step: tuple[tuple[int, ...], ...]  # [step][role], at the probe value


def _probes(sizes: Sequence[SymInt]) -> list[int]:
    """`probe` of each size: `int` of each where all are numbers (a bound graph's steps)."""
    try:
        return list(map(int, sizes))
    except ValueError:  # a size in free dims (SymInt.__int__)
        return list(map(probe, sizes))


def timeline(
    analysis: Analysis,
    op_of: Callable[[str], str],
    gpu: GpuView | None,
    by_role: RoleSteps | None,
    phases: Sequence[tuple[str, int, int]],
    probe_note: str,
) -> TimelineChart:
    live = analysis.liveness
    steps = live.live_bytes_per_step

    def describe(step: int) -> str:
        # the chart describes the few steps it draws a target for, not each of 10^5
        node, size = live.order[step], bytes_quantity(steps[step])
        value = f"{size.text} (= {format_bytes(size.probe)} at {probe_note})" if (
            size.is_formula) else size.text
        return f"step {step} · {printable(node)} ({op_of(node)}) · live {value}"

    stacked = by_role is not None and len(by_role.bytes_per_step) == len(steps)
    numbers = live.step_numbers  # a bound graph's: `probe` of each size is the number
    return timeline_chart(
        list(numbers) if numbers is not None else _probes(steps),
        resident_bytes=probe(live.resident_bytes),
        peak_step=live.peak_step,
        usable_bytes=gpu.usable.probe if gpu else None,
        describe_step=describe,
        roles=by_role.roles if by_role and stacked else (),
        role_bytes=by_role.bytes_per_step if by_role and stacked else (),
        phases=phases,
        capacity_bytes=gpu.capacity.probe if gpu else None,
    )
