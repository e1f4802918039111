"""Chart geometry for the HTML report, in SVG user units: the templates only draw it.

No plotting library: a chart is a few polylines, paths and ticks computed here. Colours and
patterns live in the stylesheet (Okabe-Ito, with hatching where two fills would otherwise
differ by colour alone).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from graphmem.core.units import format_bytes, format_si

_IEC_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))
_NICE = (1, 2, 5, 10, 20, 50, 100, 200, 256, 512)  # 256, 512: a quarter, a half of the next


@dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclass(frozen=True)
class Layer:
    """One role's band of a stacked area chart."""

    role: str
    path: str  # closed path from the bottom axis up to the band's top edge


@dataclass(frozen=True)
class Band:
    """A shaded span of steps (forward / backward / optimizer)."""

    label: str
    x: float
    width: float


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
        for column in range(columns):
            start, stop = column * count // columns, (column + 1) * count // columns
            highest = max(range(start, stop), key=lambda s: sum(rows[s]))
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


@dataclass(frozen=True)
class XYPoint:
    x: float
    y: float
    title: str
    marked: bool = False  # drawn hollow: e.g. does not fit


@dataclass(frozen=True)
class XYChart:
    """A line chart with dots: x a count (log scale when it spans decades), y bytes."""

    width: int
    height: int
    left: float
    top: float
    right: float
    bottom: float
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


_W, _H = 640, 260
_LIMIT_MAX_RATIO = 3.0  # draw the limit line when it is at most this x the highest point
_L, _R, _T, _B = 78.0, 620.0, 18.0, 222.0


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
    log_x = min(xs) > 0 and max(xs) / min(xs) >= 16
    fx = math.log2 if log_x else float
    x_low, x_high = fx(min(xs)), fx(max(xs))
    if x_high == x_low:
        x_low, x_high = x_low - 1, x_high + 1
    limit_shown = limit_bytes is not None and limit_bytes <= limit_max_ratio * max(ys)
    y_top = max([*ys, limit_bytes if limit_shown and limit_bytes else 0, 1]) * 1.1

    def x_of(value: float) -> float:
        return _L + (_R - _L) * (fx(value) - x_low) / (x_high - x_low)

    def y_of(value: float) -> float:
        return _B - (_B - _T) * value / y_top

    order = sorted(range(len(xs)), key=lambda i: xs[i])
    flags = marked or [False] * len(xs)
    points = tuple(XYPoint(round(x_of(xs[i]), 1), round(y_of(ys[i]), 1), titles[i], flags[i])
                   for i in order)
    if log_x:
        x_values = [2.0**k for k in range(math.ceil(x_low), math.floor(x_high) + 1)]
    else:
        x_values = number_ticks(x_low, x_high)
    return XYChart(
        width=_W, height=_H, left=_L, top=_T, right=_R, bottom=_B,
        points=points,
        line=" ".join(f"{p.x},{p.y}" for p in points),
        x_ticks=tuple(Tick(round(x_of(v), 1), x_format(v)) for v in x_values),
        y_ticks=tuple(Tick(round(y_of(v), 1), text) for v, text in byte_ticks(y_top)),
        x_label=x_label,
        y_label=y_label,
        limit_y=round(y_of(limit_bytes), 1) if limit_shown and limit_bytes else None,
        limit_label=f"{limit_label} {format_bytes(limit_bytes)}" if limit_bytes else "",
        limit_note="far above the chart" if limit_bytes and not limit_shown else "",
        marker_x=round(x_of(marker[0]), 1) if marker else None,
        marker_label=marker[1] if marker else "",
    )
