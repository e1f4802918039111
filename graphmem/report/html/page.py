"""The HTML report: one self-contained, offline page rendered with jinja2 from templates/.

Every number on the page is read from the JSON report (`to_dict`), so the page and the JSON
cannot disagree; this module only turns that dict into a view (formatted text, sort keys,
chart geometry) and the templates only lay the view out. The one thing taken from the
Analysis itself is the schedule (which node runs at each step), which the JSON does not carry.

Sizes are exact integers when every dim is bound, or formulas in the free dims. A formula is
shown as it is (term by term, in IEC bytes or SI counts); charts, bars and sort keys need one
number, so they use the formula's value with every free dim at PROBE_DIM_VALUE, and say so.

A model's strings are data (report/safe_text.py): jinja2 escapes them (autoescape), names are
shortened to NAME_MAX_CHARS where the view takes them from the JSON, and every other string
the templates write passes `_inert` (control and bidi characters made visible, each long run
of non-space characters shortened), so a name quoted in a sentence is bounded too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes, format_bytes_sym, format_si_sym
from graphmem.errors import GraphmemError
from graphmem.passes.dims import value_bytes
from graphmem.passes.fit import default_cuda_reserve
from graphmem.passes.role_timeline import PhaseSpan, role_timeline, training_phases
from graphmem.pipeline.analysis import Analysis
from graphmem.report.html.charts import Band, Layer, Tick, byte_ticks, stacked_layers
from graphmem.report.html.extras import Extras, extras
from graphmem.report.html.nodes import NodeTable, node_table
from graphmem.report.html.quantity import (
    PROBE_DIM_VALUE,
    Quantity,
    _as_symint,
    _probe,
    bytes_quantity,
    count_quantity,
)
from graphmem.report.html.summary import (
    Fact,
    ModuleBreakdown,
    headline_facts,
    module_breakdown,
)
from graphmem.report.json.report import ROLE_KEYS, to_dict
from graphmem.report.safe_text import printable, printable_text

MAX_HOVER_TARGETS = 2000  # timeline tooltips: one per step, or per bucket of steps above this
MAX_RESIDENT_ROWS = 20  # residents live at the peak: the largest, then "N more"
MAX_ACTIVATION_ROWS = 500  # activations live at the peak (the rest are summed in one line)
_GPU_LINE_MAX_RATIO = 3.0  # draw the GPU's usable line when usable <= this x the peak

_TEMPLATE = "report.html.j2"

# ---------------------------------------------------------------------------------------------
# Public API


def templates_dir() -> Path:
    """The templates folder, shipped inside this package (graphmem/report/html/templates)."""
    folder = Path(__file__).parent / "templates"
    if not (folder / _TEMPLATE).is_file():
        raise GraphmemError(f"HTML report templates not found in {folder}: reinstall graphmem")
    return folder


def render_html(analysis: Analysis, report: Mapping[str, Any] | None = None) -> str:
    """The report as one HTML document: inline CSS, JS and SVG; no network requests.

    `report` is the JSON dict to render (default: `to_dict(analysis)`); sections whose
    fields it lacks are left out.
    """
    view = build_view(analysis, report)
    return _environment(templates_dir()).get_template(_TEMPLATE).render(view=view)


def write_html(analysis: Analysis, path: Path) -> None:
    Path(path).write_text(render_html(analysis), encoding="utf-8")


@cache
def _environment(folder: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        autoescape=True,  # every template here is HTML (or SVG inside it)
        finalize=_inert,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _inert(value: Any) -> Any:
    """Every `{{ ... }}` before it is escaped: text made printable (Markup is the view's own
    markup, already escaped: the node data, `| safe` entities)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return printable_text(value, None, multiline=True)
    return value


# ---------------------------------------------------------------------------------------------
# The view: what the templates lay out


@dataclass(frozen=True)
class Stat:
    label: str
    value: str
    detail: str = ""
    exact: str = ""  # shown as a tooltip: the exact integer or formula
    is_formula: bool = False


def _stat(label: str, value: Quantity, detail: str, unit: str = "bytes") -> Stat:
    return Stat(label, value.text, detail, f"{value.exact_text} {unit}", value.is_formula)


@dataclass(frozen=True)
class RoleShare:
    role: str
    size: Quantity
    percent: float  # of the peak, at the probe value


@dataclass(frozen=True)
class Summary:
    stats: tuple[Stat, ...]
    peak: Quantity
    peak_candidates: tuple[Quantity, ...]  # () unless the peak step depends on free dims
    peak_step: int
    peak_node: str
    peak_op: str
    macs: Quantity
    flops: Quantity
    breakdown: tuple[RoleShare, ...]
    bytes_by_dtype: tuple[tuple[str, Quantity], ...]


@dataclass(frozen=True)
class Gaps:
    unsupported_ops: tuple[tuple[str, int], ...]
    unsupported_nodes: tuple[str, ...]
    shape_unknown_nodes: tuple[str, ...]
    unknown_size_values: tuple[str, ...]
    control_flow_nodes: tuple[str, ...]
    model_warnings: tuple[str, ...]

    @property
    def unsupported_node_count(self) -> int:
        return sum(count for _, count in self.unsupported_ops)


@dataclass(frozen=True)
class GpuView:
    name: str
    full_name: str
    capacity: Quantity
    datasheet: Quantity
    reserve: Quantity
    reserve_source: str
    usable: Quantity
    required: Quantity
    fits: bool | None  # None while the peak depends on free dims
    utilization_text: str
    overflow: Quantity | None  # by how much the peak exceeds usable memory
    reserve_percent: float  # the bar: shares of the capacity
    peak_percent: float
    source: str


@dataclass(frozen=True)
class LiveRow:
    name: str
    shape: str
    dtype: str
    size: Quantity
    role: str
    made_by: str
    kept_alive_by: str
    percent: float  # of the peak, at the probe value


@dataclass(frozen=True)
class LiveTables:
    activations: tuple[LiveRow, ...]
    activations_hidden: int
    activations_hidden_bytes: Quantity | None
    residents: tuple[LiveRow, ...]
    residents_hidden: int
    residents_hidden_bytes: Quantity | None
    resident_total: Quantity


@dataclass(frozen=True)
class OpShare:
    op: str
    nodes: int
    macs: Quantity
    flops: Quantity
    percent: float  # of all FLOPs, at the probe value


@dataclass(frozen=True)
class OpTable:
    rows: tuple[OpShare, ...]  # ops with FLOPs, largest first
    no_arithmetic: tuple[tuple[str, int], ...]  # ops that count 0 FLOPs (data movement)
    not_counted: tuple[tuple[str, int], ...]  # unsupported / shape unknown / control flow


@dataclass(frozen=True)
class HoverTarget:
    x: float
    width: float
    title: str
    step: int  # the step a click jumps to in the node table (the highest of a bucket)


@dataclass(frozen=True)
class TimelineChart:
    """Geometry of the memory timeline, in SVG user units; the template draws it."""

    width: int
    height: int
    left: float
    top: float
    right: float
    bottom: float
    line_points: str
    area_path: str
    resident_y: float
    peak_x: float
    peak_y: float
    peak_label: str
    peak_label_anchor: str  # "start" or "end": keeps the label inside the plot
    usable_y: float | None
    usable_label: str
    usable_note: str  # when the usable line is far above the chart
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]
    targets: tuple[HoverTarget, ...]
    step_count: int
    steps_per_target: int
    description: str
    layers: tuple[Layer, ...] = ()  # live bytes stacked by role, when the roles are known
    bands: tuple[Band, ...] = ()  # forward / backward / optimizer spans of a training step
    capacity_y: float | None = None  # the GPU's whole memory, when near the chart
    capacity_label: str = ""


@dataclass(frozen=True)
class ReportView:
    title: str
    model: Mapping[str, Any]
    mode: str
    schedule: str
    versions: Mapping[str, Any]
    dims_bound: tuple[str, ...]
    dims_free: tuple[str, ...]
    probe_note: str  # "" when every dim is bound
    summary: Summary
    gaps: Gaps
    gpu: GpuView | None
    timeline: TimelineChart
    live: LiveTables
    ops: OpTable
    nodes: NodeTable
    reserve_default: Quantity
    reserve_default_source: str
    headline: tuple[Fact, ...] = ()
    modules: ModuleBreakdown | None = None
    extras: Extras | None = None


def build_view(analysis: Analysis, report: Mapping[str, Any] | None = None) -> ReportView:
    report = to_dict(analysis) if report is None else report
    nodes = report["nodes"]
    op_of = {node["name"]: _qualified_op(node) for node in nodes}
    free = tuple(report["dims"]["free"])
    gpu = _gpu_view(report["gpu"]) if report["gpu"] else None
    reserve = default_cuda_reserve("")  # the figure assumed for GPUs not measured
    spans = _phase_spans(report, analysis)
    summary = _summary(report, op_of)
    gaps = _gaps(report)
    return ReportView(
        title=printable(Path(report["model"]["path"]).name or report["model"]["name"]),
        model=_model_view(report["model"]),
        mode=report["config"]["mode"],
        schedule=report["config"]["schedule"],
        versions={"graphmem": report["graphmem_version"], "schema": report["schema_version"]},
        dims_bound=tuple(f"{printable(name)}={value}"
                         for name, value in report["dims"]["bound"].items()),
        dims_free=tuple(printable(name) for name in free),
        probe_note=_probe_note(free),
        summary=summary,
        gaps=gaps,
        gpu=gpu,
        timeline=_timeline(report, analysis, op_of, gpu, spans),
        live=_live_tables(report["memory"]),
        ops=_op_table(nodes),
        nodes=node_table(nodes, [op_of[n["name"]] for n in nodes], _node_phases(nodes, spans)),
        reserve_default=bytes_quantity(reserve.bytes),
        reserve_default_source=reserve.source,
        headline=headline_facts(report, summary.peak, gaps.unsupported_node_count),
        modules=module_breakdown(report.get("modules")),
        extras=extras(report, summary.peak.probe),
    )


def _model_view(model: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON's `model` with its strings as shown: the graph's name and the file's path
    shortened, the warnings (which quote names) bounded."""
    return {**model, "name": printable(model["name"]), "path": printable_text(model["path"]),
            "warnings": [printable_text(w) for w in model["warnings"]]}


def _phase_spans(report: Mapping[str, Any], analysis: Analysis) -> tuple[PhaseSpan, ...]:
    """The phases of a training step: the nodes' own `phase` where the JSON has it, else
    read from the tensors' roles (graphmem/passes/role_timeline.py)."""
    if report["config"]["mode"] != "training":
        return ()
    phases = [node.get("phase") for node in report["nodes"]]
    if not all(phases):
        return training_phases(analysis.graph)
    spans: list[PhaseSpan] = []
    for step, phase in enumerate(phases):
        if spans and spans[-1].phase == phase:
            spans[-1] = PhaseSpan(phase, spans[-1].first_step, step)
        else:
            spans.append(PhaseSpan(str(phase), step, step))
    return tuple(spans)


def _node_phases(nodes: Sequence[Mapping[str, Any]], spans: Sequence[PhaseSpan]) -> list[str]:
    phases = [""] * len(nodes)
    for span in spans:
        phases[span.first_step: span.last_step + 1] = [span.phase] * (
            span.last_step + 1 - span.first_step)
    return phases


def _probe_note(free: Sequence[str]) -> str:
    if not free:
        return ""
    return ", ".join(f"{printable(name)}={PROBE_DIM_VALUE}" for name in free)


def _qualified_op(node: Mapping[str, Any]) -> str:
    """The op as shown: `Conv`, or `com.microsoft.FusedGemm` outside the default domain."""
    domain, op = node["domain"], node["op"]
    if domain in ("", "ai.onnx") or op.startswith(f"{domain}."):
        return printable(op)
    return printable(f"{domain}.{op}")


def _percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def _summary(report: Mapping[str, Any], op_of: Mapping[str, str]) -> Summary:
    params, flops, memory = report["params"], report["flops"], report["memory"]
    peak = _peak_quantity(memory)
    activations = bytes_quantity(memory["activation_peak_bytes"])
    residents = bytes_quantity(memory["resident_bytes"])
    lower_bound = bytes_quantity(memory["lower_bound_bytes"])
    macs, total_flops = count_quantity(flops["macs"]), count_quantity(flops["total"], "FLOP")
    # parameters, FLOPs and the peak are in the headline above: these are the rest
    stats = []
    if params["buffer_count"]:
        stats.append(Stat("buffers", f"{params['buffer_count']:,}",
                          format_bytes(params["buffer_bytes"]), "running statistics etc."))
    at_step = bytes_quantity(memory["peak_bytes"])  # the live total at the peak step
    stats += [
        _stat("MACs", macs, "multiply-accumulates", "MACs"),
        _stat("activations at peak", activations, "peak less residents"),
        _stat("residents", residents, "weights, inputs, constants: live throughout"),
        _stat("lower bound", lower_bound,
              f"largest node: {printable(memory['lower_bound_node'])}"),
    ]
    breakdown = tuple(
        RoleShare(role, size, _percent(size.probe, at_step.probe))
        for role, size in ((r, bytes_quantity(v)) for r, v in memory["breakdown"].items())
    )
    return Summary(
        stats=tuple(stats),
        peak=peak,
        peak_candidates=_peak_candidates(memory),
        peak_step=memory["peak_step"],
        peak_node=printable(memory["peak_node"]),
        peak_op=op_of.get(memory["peak_node"], ""),
        macs=macs,
        flops=total_flops,
        breakdown=tuple(sorted(breakdown, key=lambda r: -r.size.probe)),
        bytes_by_dtype=tuple((d, bytes_quantity(b)) for d, b in params["bytes_by_dtype"].items()),
    )


def _peak_quantity(memory: Mapping[str, Any]) -> Quantity:
    """The peak: the live total at the peak step (the largest at large values of the free
    dims); with several candidate steps the exact value, max(a, b, ...), is its tooltip."""
    peak = bytes_quantity(memory["peak_bytes"])
    candidates = _peak_candidates(memory)
    if not candidates:
        return peak
    return Quantity(
        exact="max(" + ", ".join(str(c.exact) for c in candidates) + ")",
        text=peak.text,
        probe=max(c.probe for c in candidates),
    )


def _peak_candidates(memory: Mapping[str, Any]) -> tuple[Quantity, ...]:
    """The steps that can peak, each a formula; () when one step peaks at every value."""
    candidates = tuple(bytes_quantity(c) for c in memory["peak_candidates"])
    return candidates if len(candidates) > 1 else ()


def _gaps(report: Mapping[str, Any]) -> Gaps:
    return Gaps(
        unsupported_ops=tuple((printable(op), n) for op, n in report["unsupported_ops"].items()),
        unsupported_nodes=tuple(
            printable(n["name"]) for n in report["nodes"] if n["status"] == "unsupported"),
        shape_unknown_nodes=tuple(map(printable, report["unknown_shapes"]["nodes"])),
        unknown_size_values=tuple(map(printable, report["unknown_shapes"]["values"])),
        control_flow_nodes=tuple(map(printable, report["control_flow_nodes"])),
        model_warnings=tuple(map(printable_text, report["model"]["warnings"])),
    )


def _gpu_view(gpu: Mapping[str, Any]) -> GpuView:
    capacity = bytes_quantity(gpu["memory_bytes"])
    usable = bytes_quantity(gpu["usable_bytes"])
    required = bytes_quantity(gpu["required_bytes"])
    utilization = gpu["utilization"]
    if utilization is None:
        utilization_text = "depends on the free dims"
    elif utilization < 0.001:
        utilization_text = "<0.1% of usable"
    else:
        utilization_text = f"{utilization:.1%} of usable"
    overflow = None
    if gpu["fits"] is False:
        overflow = bytes_quantity(required.probe - usable.probe)
    reserve_percent = _percent(gpu["cuda_reserve_bytes"], capacity.probe)
    peak_percent = 0.0
    if not required.is_formula:
        peak_percent = min(_percent(required.probe, capacity.probe), 100.0 - reserve_percent)
    return GpuView(
        name=gpu["name"],
        full_name=gpu["full_name"],
        capacity=capacity,
        datasheet=bytes_quantity(gpu["datasheet_memory_bytes"]),
        reserve=bytes_quantity(gpu["cuda_reserve_bytes"]),
        reserve_source=gpu["cuda_reserve_source"],
        usable=usable,
        required=required,
        fits=gpu["fits"],
        utilization_text=utilization_text,
        overflow=overflow,
        reserve_percent=reserve_percent,
        peak_percent=peak_percent,
        source=gpu["source"],
    )


def _live_row(tensor: Mapping[str, Any], peak_probe: int) -> LiveRow:
    size = bytes_quantity(tensor["bytes"])
    if tensor["producer"] is None:
        made_by, kept = "(resident)", "(live throughout)"
    else:
        made_by = printable(tensor["producer"])
        kept = printable(tensor["last_consumer"] or (
            "(graph output: to the end)" if tensor["role"] == "output" else "(to the end)"))
    return LiveRow(
        name=printable(tensor["name"]),
        shape=printable_text(tensor["shape"]),
        dtype=printable(tensor["dtype"]),
        size=size,
        role=tensor["role"],
        made_by=made_by,
        kept_alive_by=kept,
        percent=_percent(size.probe, peak_probe),
    )


def _live_tables(memory: Mapping[str, Any]) -> LiveTables:
    peak_probe = bytes_quantity(memory["peak_bytes"]).probe  # the shares add up to this
    rows = [_live_row(t, peak_probe) for t in memory["live_at_peak"]]
    made = [r for r in rows if r.made_by != "(resident)"]
    residents = [r for r in rows if r.made_by == "(resident)"]
    return LiveTables(
        activations=tuple(made[:MAX_ACTIVATION_ROWS]),
        activations_hidden=max(len(made) - MAX_ACTIVATION_ROWS, 0),
        activations_hidden_bytes=_sum_sizes(made[MAX_ACTIVATION_ROWS:]),
        residents=tuple(residents[:MAX_RESIDENT_ROWS]),
        residents_hidden=max(len(residents) - MAX_RESIDENT_ROWS, 0),
        residents_hidden_bytes=_sum_sizes(residents[MAX_RESIDENT_ROWS:]),
        resident_total=bytes_quantity(memory["resident_bytes"]),
    )


def _sum_sizes(rows: Sequence[LiveRow]) -> Quantity | None:
    if not rows:
        return None
    total = sum((_as_symint(r.size.exact) for r in rows), SymInt())
    return Quantity(_exact(total), format_bytes_sym(total), _probe(total))


def _exact(value: SymInt) -> int | str:
    return int(value) if value.is_constant else str(value.to_sympy())


def _op_table(nodes: Sequence[Mapping[str, Any]]) -> OpTable:
    counted: dict[str, list[Mapping[str, Any]]] = {}
    not_counted: dict[str, int] = {}
    for node in nodes:
        op = _qualified_op(node)
        if node["status"] == "ok":
            counted.setdefault(op, []).append(node)
        else:
            label = f"{op} ({node['status'].replace('_', ' ')})"
            not_counted[label] = not_counted.get(label, 0) + 1
    totals = {
        op: (sum((_as_symint(n["macs"]) for n in group), SymInt()),
             sum((_as_symint(n["flops"]) for n in group), SymInt()), len(group))
        for op, group in counted.items()
    }
    all_flops = sum(_probe(flops) for _, flops, _ in totals.values())
    rows = [
        OpShare(op, count, Quantity(_exact(macs), format_si_sym(macs), _probe(macs)),
                Quantity(_exact(flops), format_si_sym(flops, "FLOP"), _probe(flops)),
                _percent(_probe(flops), all_flops))
        for op, (macs, flops, count) in totals.items()
        if flops != 0
    ]
    zero = [(op, count) for op, (_, flops, count) in totals.items() if flops == 0]
    return OpTable(
        rows=tuple(sorted(rows, key=lambda r: (-r.flops.probe, r.op))),
        no_arithmetic=tuple(sorted(zero, key=lambda item: (-item[1], item[0]))),
        not_counted=tuple(sorted(not_counted.items())),
    )


# ---------------------------------------------------------------------------------------------
# The memory timeline: geometry computed here, markup in templates/partials/timeline.html.j2

_CHART_WIDTH, _CHART_HEIGHT = 1000, 300
_PLOT_LEFT, _PLOT_RIGHT, _PLOT_TOP, _PLOT_BOTTOM = 78.0, 986.0, 22.0, 268.0


def _timeline(
    report: Mapping[str, Any],
    analysis: Analysis,
    op_of: Mapping[str, str],
    gpu: GpuView | None,
    phases: Sequence[PhaseSpan],
) -> TimelineChart:
    order = analysis.liveness.order
    memory = report["memory"]
    live = [bytes_quantity(v) for v in memory["timeline_bytes"]]
    probe_note = _probe_note(report["dims"]["free"])

    def describe(step: int) -> str:
        node = order[step]
        size = live[step]
        value = f"{size.text} (= {format_bytes(size.probe)} at {probe_note})" if (
            size.is_formula) else size.text
        return f"step {step} · {printable(node)} ({op_of.get(node, '?')}) · live {value}"

    usable = gpu.usable.probe if gpu else None
    by_role = role_timeline(analysis.graph, value_bytes(analysis.graph, analysis.dims))
    stacked = len(by_role.bytes_per_step) == len(live)
    return timeline_chart(
        [q.probe for q in live],
        resident_bytes=bytes_quantity(memory["resident_bytes"]).probe,
        peak_step=memory["peak_step"],
        usable_bytes=usable,
        describe_step=describe,
        roles=tuple(ROLE_KEYS[r] for r in by_role.roles) if stacked else (),
        role_bytes=[[_probe(b) for b in step] for step in by_role.bytes_per_step] if stacked
        else (),
        phases=phases,
        capacity_bytes=gpu.capacity.probe if gpu else None,
    )


def timeline_chart(
    live_bytes: Sequence[int],
    resident_bytes: int,
    peak_step: int,
    usable_bytes: int | None,
    describe_step: Callable[[int], str],
    roles: Sequence[str] = (),
    role_bytes: Sequence[Sequence[int]] = (),
    phases: Sequence[PhaseSpan] = (),
    capacity_bytes: int | None = None,
) -> TimelineChart:
    """Live bytes per step as a line over a band of residents, the peak marked.

    With `roles` and `role_bytes` ([step][role] bytes, adding up to `live_bytes`) the area is
    stacked by role; `phases` shade the forward, backward and optimizer spans; the GPU's
    capacity and usable memory are lines when they are within reach of the peak.

    Above `_PLOT_RIGHT - _PLOT_LEFT` steps the line keeps each pixel column's min and max, so
    spikes survive; above MAX_HOVER_TARGETS steps a tooltip covers a bucket of steps and
    names the highest one in it.
    """
    count = len(live_bytes)
    peak_bytes = live_bytes[peak_step]
    top_value = max(peak_bytes, resident_bytes, 1)
    show_usable = usable_bytes is not None and usable_bytes <= _GPU_LINE_MAX_RATIO * top_value
    show_capacity = show_usable and capacity_bytes is not None
    if show_usable and usable_bytes is not None:
        top_value = max(top_value, usable_bytes, capacity_bytes or 0)
    y_ticks, y_max = _byte_ticks(top_value * 1.1)  # room for the peak's label above it
    plot_width = _PLOT_RIGHT - _PLOT_LEFT

    def x_of(step: float) -> float:
        return _PLOT_LEFT + plot_width * step / count

    def y_of(value: float) -> float:
        return _PLOT_BOTTOM - (_PLOT_BOTTOM - _PLOT_TOP) * value / y_max

    points = _line_points(live_bytes, x_of, y_of, int(plot_width))
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    resident_y = y_of(resident_bytes)
    # Activations: the area between the residents band and the live total (never below it).
    area = f"M{_PLOT_LEFT:.1f},{resident_y:.1f} L{line} L{_PLOT_RIGHT:.1f},{resident_y:.1f} Z"
    peak_x = x_of(peak_step + 0.5)
    usable_label = usable_note = ""
    if usable_bytes is not None:
        usable_label = f"GPU usable {format_bytes(usable_bytes)}"
        if not show_usable:
            usable_note = f"{usable_label}: far above this chart"
    targets, per_target = _hover_targets(live_bytes, x_of, describe_step)
    bands = tuple(Band(p.phase, round(x_of(p.first_step), 1),
                       round(x_of(p.last_step + 1) - x_of(p.first_step), 1)) for p in phases)
    return TimelineChart(
        width=_CHART_WIDTH,
        height=_CHART_HEIGHT,
        left=_PLOT_LEFT,
        top=_PLOT_TOP,
        right=_PLOT_RIGHT,
        bottom=_PLOT_BOTTOM,
        line_points=line,
        area_path=area,
        resident_y=resident_y,
        peak_x=peak_x,
        peak_y=y_of(peak_bytes),
        peak_label=f"peak {format_bytes(peak_bytes)} at step {peak_step}",
        peak_label_anchor="end" if peak_x > _PLOT_LEFT + 0.6 * plot_width else "start",
        usable_y=y_of(usable_bytes) if show_usable and usable_bytes is not None else None,
        usable_label=usable_label,
        usable_note=usable_note,
        y_ticks=tuple(Tick(y_of(value), label) for value, label in y_ticks),
        x_ticks=tuple(Tick(x_of(step + 0.5), f"{step:,}") for step in _step_ticks(count)),
        targets=targets,
        step_count=count,
        steps_per_target=per_target,
        description=(f"Live memory at each of {count:,} steps; peak {format_bytes(peak_bytes)}"
                     f" at step {peak_step}; residents {format_bytes(resident_bytes)}."),
        layers=stacked_layers(roles, role_bytes, x_of, y_of, int(plot_width)) if roles else (),
        bands=bands,
        capacity_y=y_of(capacity_bytes) if show_capacity and capacity_bytes else None,
        capacity_label=f"GPU capacity {format_bytes(capacity_bytes)}" if capacity_bytes else "",
    )


def _line_points(
    values: Sequence[int],
    x_of: Callable[[float], float],
    y_of: Callable[[float], float],
    columns: int,
) -> list[tuple[float, float]]:
    """A step line (each step flat across its width), or min/max per column when dense."""
    count = len(values)
    if count <= columns:
        return [(x_of(step + edge), y_of(v)) for step, v in enumerate(values) for edge in (0, 1)]
    points = []
    for column in range(columns):
        start, stop = column * count // columns, (column + 1) * count // columns
        chunk = range(start, stop)
        low = min(chunk, key=values.__getitem__)
        high = max(chunk, key=values.__getitem__)
        x = x_of((start + stop) / 2)
        points += [(x, y_of(values[step])) for step in sorted({low, high})]
    return points


def _hover_targets(
    values: Sequence[int],
    x_of: Callable[[float], float],
    describe_step: Callable[[int], str],
) -> tuple[tuple[HoverTarget, ...], int]:
    count = len(values)
    per_target = math.ceil(count / MAX_HOVER_TARGETS)
    targets = []
    for start in range(0, count, per_target):
        stop = min(start + per_target, count)
        highest = max(range(start, stop), key=values.__getitem__)
        if per_target == 1:
            title = describe_step(start)
        else:
            title = f"steps {start:,} to {stop - 1:,}, highest: {describe_step(highest)}"
        x = x_of(start)
        targets.append(HoverTarget(round(x, 2), round(x_of(stop) - x, 2), title, highest))
    return tuple(targets), per_target


def _byte_ticks(top: float, wanted: int = 4) -> tuple[list[tuple[int, str]], float]:
    """Gridlines up to `top` (the chart's top, which stays `top`): html_charts.byte_ticks."""
    return byte_ticks(top, wanted), top


def _step_ticks(count: int, wanted: int = 8) -> list[int]:
    if count <= 1:
        return [0]
    raw = (count - 1) / wanted
    magnitude = 10 ** max(math.floor(math.log10(raw)), 0) if raw >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return list(range(0, count, step))
