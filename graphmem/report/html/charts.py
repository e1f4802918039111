"""Chart geometry for the HTML report, in SVG user units: the templates only draw it.

No plotting library: a chart is a few polylines, paths, ticks and labels computed here, inside a
PlotBox. Two charts: the memory timeline (live bytes per step, stacked by role) and an XY chart
(a batch sweep, the checkpointing trade-off). Labels are placed so that they never overlap
each other and no rule crosses the peak's label. Colours and patterns live in the stylesheet
(Okabe-Ito, with hatching where two fills would otherwise differ by colour alone).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from graphmem.core.units import format_bytes, format_si

_IEC_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))
_NICE = (1, 2, 5, 10, 20, 50, 100, 200, 256, 512)  # 256, 512: a quarter, a half of the next

MAX_HOVER_TARGETS = 2000  # timeline tooltips: one per step, or per bucket of steps above this
_GPU_LINE_MAX_RATIO = 3.0  # draw the GPU's lines when usable <= this x the peak


class PlotBox(NamedTuple):
    """An SVG of width x height user units; the plot area inside it (axes' labels outside)."""

    width: int
    height: int
    left: float
    top: float
    right: float
    bottom: float

    def x_of(self, share: float) -> float:
        """x at `share` (0 to 1) of the plot's width."""
        return self.left + (self.right - self.left) * share

    def y_of(self, share: float) -> float:
        """y at `share` (0 to 1) of the plot's height, from the bottom (SVG y grows down)."""
        return self.bottom - (self.bottom - self.top) * share


TIMELINE_BOX = PlotBox(1000, 300, 78.0, 22.0, 986.0, 268.0)
XY_BOX = PlotBox(640, 260, 78.0, 18.0, 620.0, 222.0)


class Tick(NamedTuple):
    position: float
    label: str


class Layer(NamedTuple):
    """One role's band of a stacked area chart."""

    role: str
    path: str  # closed path from the bottom axis up to the band's top edge


class Band(NamedTuple):
    """A shaded span of steps (forward / backward / optimizer)."""

    label: str
    x: float
    width: float


class Label(NamedTuple):
    """A text in the plot: `y` is its baseline, `anchor` "start" or "end" (SVG text-anchor)."""

    text: str
    x: float
    y: float
    anchor: str
    font_px: float = 11.0

    def extent(self) -> tuple[float, float, float, float]:
        """(x0, y0, x1, y1): a generous estimate of the box the text covers."""
        width = len(self.text) * self.font_px * 0.62
        x0 = self.x - width if self.anchor == "end" else self.x
        return x0, self.y - self.font_px, x0 + width, self.y + 0.3 * self.font_px

    def overlaps(self, other: Label) -> bool:
        a, b = self.extent(), other.extent()
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]

    def crossed_by(self, line_y: float, margin: float = 2.0) -> bool:
        _, y0, _, y1 = self.extent()
        return y0 - margin <= line_y <= y1 + margin


def byte_ticks(top: float, wanted: int = 4) -> list[tuple[int, str]]:
    """Gridlines at a 1-2-5 step of an IEC unit, from 0 up to `top` bytes.

    Above 200 of a unit the step is 256 or 512 of it (a quarter or half of the next unit), so
    every label reads in the largest unit it reaches: 512 MiB, 1 GiB, 1.5 GiB, never 1500 MiB.
    """
    raw = top / wanted
    multiple, unit = next(
        ((m, u) for _, u in reversed(_IEC_UNITS) for m in _NICE if m * u >= raw),
        (math.ceil(raw / _IEC_UNITS[0][1]), _IEC_UNITS[0][1]),
    )
    step = multiple * unit
    return [(k * step, byte_tick_label(k * step)) for k in range(int(top // step) + 1)]


def byte_tick_label(value: int) -> str:
    """A tick's bytes in the largest IEC unit they reach, as format_bytes picks it, with no
    needless decimals: 0, 768 MiB, 1 GiB, 1.5 GiB, 1.25 GiB."""
    if value == 0:
        return "0"
    name, unit = next((n, u) for n, u in _IEC_UNITS if value >= u)
    return f"{value / unit:g} {name}"


def number_ticks(low: float, high: float, wanted: int = 6) -> list[float]:
    """Round values (1-2-5 steps) between low and high."""
    span = max(high - low, 1e-300)
    raw = span / wanted
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [first + k * step for k in range(int((high - first) / step + 1e-9) + 1)]


def step_ticks(count: int, wanted: int = 8) -> list[int]:
    if count <= 1:
        return [0]
    raw = (count - 1) / wanted
    magnitude = 10 ** max(math.floor(math.log10(raw)), 0) if raw >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return list(range(0, count, step))


def stacked_layers(
    roles: Sequence[str],
    rows: Sequence[Sequence[int]],
    x_of: Callable[[float], float],
    y_of: Callable[[float], float],
    columns: int,
) -> tuple[Layer, ...]:
    """Bands of a stacked area chart, top band first (each later band is drawn over it).

    `rows[step][k]` is role k's bytes at that step. Up to `columns` steps each step is flat
    across its width; above that each pixel column shows the step with the highest total,
    so a spike is never averaged away.
    """
    count = len(rows)
    if count <= columns:
        xs = [x_of(step + edge) for step in range(count) for edge in (0, 1)]
        picked = [rows[step] for step in range(count) for _ in (0, 1)]
    else:
        xs, picked = [], []
        totals = list(map(sum, rows))
        for column in range(columns):
            start, stop = column * count // columns, (column + 1) * count // columns
            column_totals = totals[start:stop]  # its first highest step, no key call per step
            highest = start + column_totals.index(max(column_totals))
            xs.append(x_of((start + stop) / 2))
            picked.append(rows[highest])
    bottom, left, right = y_of(0), x_of(0), x_of(count)
    layers = []
    for k in range(len(roles) - 1, -1, -1):
        tops = " ".join(f"{x:.1f},{y_of(sum(row[: k + 1])):.1f}"
                        for x, row in zip(xs, picked, strict=True))
        path = f"M{left:.1f},{bottom:.1f} L{tops} L{right:.1f},{bottom:.1f} Z"
        layers.append(Layer(roles[k], path))
    return tuple(layers)


# ----- the memory timeline ---------------------------------------------------------------------


class HoverTarget(NamedTuple):
    x: float
    width: float
    title: str
    step: int  # the step a click jumps to in the node table (the highest of a bucket)


class Rule(NamedTuple):
    """A horizontal line across the plot (the GPU's capacity or usable memory)."""

    kind: str  # css class: "capacity-line" | "usable"
    y: float
    label: Label | None  # None: no room in the plot; the legend names it


class TimelineChart(NamedTuple):
    """Geometry of the memory timeline; the template draws it."""

    box: PlotBox
    line_points: str
    area_path: str
    resident_y: float
    peak_x: float
    peak_y: float
    peak_label: Label
    rules: tuple[Rule, ...]  # capacity, usable: when they are within reach of the peak
    usable_label: str  # "GPU usable 14.3 GiB" ("" without a GPU): the legend's words
    usable_note: str  # when the usable line is far above the chart
    capacity_label: str
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]
    targets: tuple[HoverTarget, ...]
    step_count: int
    steps_per_target: int
    description: str
    layers: tuple[Layer, ...] = ()  # live bytes stacked by role, when the roles are known
    bands: tuple[Band, ...] = ()  # forward / backward / optimizer spans of a training step

    def rule(self, kind: str) -> Rule | None:
        return next((r for r in self.rules if r.kind == kind), None)


def timeline_chart(
    live_bytes: Sequence[int],
    resident_bytes: int,
    peak_step: int,
    usable_bytes: int | None,
    describe_step: Callable[[int], str],
    roles: Sequence[str] = (),
    role_bytes: Sequence[Sequence[int]] = (),
    phases: Sequence[tuple[str, int, int]] = (),  # (phase, first step, last step)
    capacity_bytes: int | None = None,
) -> TimelineChart:
    """Live bytes per step as a line over a band of residents, the peak marked.

    With `roles` and `role_bytes` ([step][role] bytes, adding up to `live_bytes`) the area is
    stacked by role; `phases` shade the forward, backward and optimizer spans; the GPU's
    capacity and usable memory are rules when they are within reach of the peak.

    Above one step per pixel column the line keeps each column's min and max, so spikes
    survive; above MAX_HOVER_TARGETS steps a tooltip covers a bucket of steps and names the
    highest one in it.
    """
    box, count = TIMELINE_BOX, len(live_bytes)
    peak_bytes = live_bytes[peak_step]
    top_value = max(peak_bytes, resident_bytes, 1)
    show_gpu = usable_bytes is not None and usable_bytes <= _GPU_LINE_MAX_RATIO * top_value
    if show_gpu:
        top_value = max(top_value, usable_bytes or 0, capacity_bytes or 0)
    y_max = top_value * 1.1  # room for the peak's label above it
    columns = int(box.right - box.left)

    def x_of(step: float) -> float:
        return box.x_of(step / count)

    def y_of(value: float) -> float:
        return box.y_of(value / y_max)

    line = " ".join(f"{x:.1f},{y:.1f}"
                    for x, y in _line_points(live_bytes, x_of, y_of, columns))
    resident_y = y_of(resident_bytes)
    # Activations: the area between the residents band and the live total (never below it).
    area = f"M{box.left:.1f},{resident_y:.1f} L{line} L{box.right:.1f},{resident_y:.1f} Z"
    peak_x, peak_y = x_of(peak_step + 0.5), y_of(peak_bytes)
    usable_label = f"GPU usable {format_bytes(usable_bytes)}" if usable_bytes is not None else ""
    capacity_label = (f"GPU capacity {format_bytes(capacity_bytes)}"
                      if capacity_bytes is not None else "")
    lines = []
    if show_gpu and capacity_bytes is not None:
        lines.append(("capacity-line", y_of(capacity_bytes), capacity_label))
    if show_gpu and usable_bytes is not None:
        lines.append(("usable", y_of(usable_bytes), usable_label))
    peak_text = f"peak {format_bytes(peak_bytes)} at step {peak_step}"
    peak_label, rules = place_labels(box, peak_x, peak_y, peak_text, lines)
    targets, per_target = _hover_targets(live_bytes, x_of, describe_step)
    return TimelineChart(
        box=box,
        line_points=line,
        area_path=area,
        resident_y=resident_y,
        peak_x=peak_x,
        peak_y=peak_y,
        peak_label=peak_label,
        rules=rules,
        usable_label=usable_label,
        usable_note=f"{usable_label}: far above this chart" if usable_label and not show_gpu
        else "",
        capacity_label=capacity_label,
        y_ticks=tuple(Tick(y_of(value), label) for value, label in byte_ticks(y_max)),
        x_ticks=tuple(Tick(x_of(step + 0.5), f"{step:,}") for step in step_ticks(count)),
        targets=targets,
        step_count=count,
        steps_per_target=per_target,
        description=(f"Live memory at each of {count:,} steps; peak {format_bytes(peak_bytes)}"
                     f" at step {peak_step}; residents {format_bytes(resident_bytes)}."),
        layers=stacked_layers(roles, role_bytes, x_of, y_of, columns) if roles else (),
        bands=tuple(Band(phase, round(x_of(first), 1), round(x_of(last + 1) - x_of(first), 1))
                    for phase, first, last in phases),
    )


_PEAK_FONT_PX = 12.0


def place_labels(
    box: PlotBox, peak_x: float, peak_y: float, peak_text: str,
    lines: Sequence[tuple[str, float, str]],
) -> tuple[Label, tuple[Rule, ...]]:
    """The peak's label, then each line's (kind, y, text) label, placed so that none overlaps
    another and no line crosses the peak's label.

    The peak's label goes above the peak's dot, else below it, else at the top of the plot
    (the chart's top is 10% above its highest line, so no line is there). A line's label
    goes above the line at its end (left for the capacity, right for the usable memory), else
    at the other end, else below it; with no room left it stays in the legend only.
    """
    anchor = "end" if peak_x > box.x_of(0.6) else "start"
    x = peak_x - 4 if anchor == "end" else peak_x + 4
    ys = [y for _, y, _ in lines]
    candidates = [Label(peak_text, x, y, anchor, _PEAK_FONT_PX)
                  for y in (peak_y - 8, peak_y + 8 + _PEAK_FONT_PX, box.top + _PEAK_FONT_PX + 1)]
    peak = next((c for c in candidates if not any(c.crossed_by(y) for y in ys)), candidates[-1])
    placed = [peak]
    rules = []
    for kind, y, text in lines:
        ends = ((box.left + 4, "start"), (box.right - 4, "end"))
        if kind != "capacity-line":
            ends = ends[::-1]
        options = [Label(text, lx, ly, la) for ly in (y - 5, y + 14) for lx, la in ends]
        label = next((o for o in options
                      if not any(o.overlaps(p) for p in placed)
                      and not any(o.crossed_by(other) for other in ys if other != y)
                      and o.extent()[1] >= box.top - 2 and o.y <= box.bottom - 2), None)
        if label is not None:
            placed.append(label)
        rules.append(Rule(kind, y, label))
    return peak, tuple(rules)


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
        # the first lowest and first highest step of the column (a slice's min and max in C,
        # found again by `index`: no key call per step)
        chunk = values[start:stop]
        low, high = start + chunk.index(min(chunk)), start + chunk.index(max(chunk))
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
        bucket = values[start:stop]
        highest = start + bucket.index(max(bucket))  # the first highest step of the bucket
        if per_target == 1:
            title = describe_step(start)
        else:
            title = f"steps {start:,} to {stop - 1:,}, highest: {describe_step(highest)}"
        x = x_of(start)
        targets.append(HoverTarget(round(x, 2), round(x_of(stop) - x, 2), title, highest))
    return tuple(targets), per_target


# ----- XY charts: a batch sweep, the checkpointing trade-off -----------------------------------


class XYPoint(NamedTuple):
    x: float
    y: float
    title: str
    marked: bool = False  # drawn hollow: e.g. does not fit


class XYChart(NamedTuple):
    """A line chart with dots: x a count (log scale when it spans decades), y bytes."""

    box: PlotBox
    points: tuple[XYPoint, ...]
    line: str
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    x_label: str
    y_label: str
    limit_y: float | None  # a horizontal rule (the GPU's usable memory); None: out of view
    limit_label: str
    limit_note: str  # the limit is far above the points: said instead of squashing them
    marker_x: float | None  # a vertical rule (the largest batch that fits)
    marker_label: str
    marker_anchor: str = "start"  # "end": the label sits left of the rule


_LIMIT_MAX_RATIO = 3.0  # draw the limit line when it is at most this x the highest point
_MAX_X_TICKS = 8  # labels along x: "262,144" is 7 characters, 8 of them fit 540 units


def xy_chart(
    xs: Sequence[float],
    ys: Sequence[int],
    titles: Sequence[str],
    x_label: str,
    y_label: str,
    x_format: Callable[[float], str] = lambda v: format_si(v),
    limit_bytes: int | None = None,
    limit_label: str = "",
    marked: Sequence[bool] | None = None,
    marker: tuple[float, str] | None = None,
    limit_max_ratio: float = _LIMIT_MAX_RATIO,
) -> XYChart:
    """Points (x, bytes) joined in x order; `limit_bytes` a horizontal line (left out, and
    said, when above `limit_max_ratio` x the highest point); `marker` (x, label) a vertical
    one."""
    box = XY_BOX
    log_x = min(xs) > 0 and max(xs) / min(xs) >= 16
    fx = math.log2 if log_x else float
    x_low, x_high = fx(min(xs)), fx(max(xs))
    if x_high == x_low:
        x_low, x_high = x_low - 1, x_high + 1
    limit_shown = limit_bytes is not None and limit_bytes <= limit_max_ratio * max(ys)
    y_top = max([*ys, limit_bytes if limit_shown and limit_bytes else 0, 1]) * 1.1

    def x_of(value: float) -> float:
        return box.x_of((fx(value) - x_low) / (x_high - x_low))

    def y_of(value: float) -> float:
        return box.y_of(value / y_top)

    order = sorted(range(len(xs)), key=lambda i: xs[i])
    flags = marked or [False] * len(xs)
    points = tuple(XYPoint(round(x_of(xs[i]), 1), round(y_of(ys[i]), 1), titles[i], flags[i])
                   for i in order)
    if log_x:  # every power of two, or every 2nd, 3rd...: at most _MAX_X_TICKS labels
        powers = range(math.ceil(x_low), math.floor(x_high) + 1)
        x_values = [2.0**k for k in powers[::math.ceil(len(powers) / _MAX_X_TICKS)]]
    else:
        x_values = number_ticks(x_low, x_high)
    marker_x = x_of(marker[0]) if marker else None
    return XYChart(
        box=box,
        points=points,
        line=" ".join(f"{p.x},{p.y}" for p in points),
        x_ticks=tuple(Tick(round(x_of(v), 1), x_format(v)) for v in x_values),
        y_ticks=tuple(Tick(round(y_of(v), 1), text) for v, text in byte_ticks(y_top)),
        x_label=x_label,
        y_label=y_label,
        limit_y=round(y_of(limit_bytes), 1) if limit_shown and limit_bytes else None,
        limit_label=f"{limit_label} {format_bytes(limit_bytes)}" if limit_bytes else "",
        limit_note="far above the chart" if limit_bytes and not limit_shown else "",
        marker_x=None if marker_x is None else round(marker_x, 1),
        marker_label=marker[1] if marker else "",
        # the label reads away from the plot's right edge, as the timeline's peak label does
        marker_anchor="end" if marker_x is not None and marker_x > box.x_of(0.6) else "start",
    )
