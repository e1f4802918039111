"""Sections of the HTML report that appear only when the JSON report carries their field.

Every field is optional: a section with nothing to show is None and the template leaves it
out; a missing key inside an entry is shown as a dash, never as 0. Fields read:
`suggestions`, `checkpoint_curve`, `sweep` (with `gpu.usable_bytes` and `gpu.max_batch`),
`memory.runtime`, `memory.per_rank`, `memory.fit_by_strategy` and `memory.kv_cache`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from graphmem.core.units import format_si
from graphmem.passes.sweep import SATURATION_SHARE
from graphmem.report.html.charts import XYChart, xy_chart
from graphmem.report.html.distributed import KvCacheView, PerGpuView, kv_cache_view, per_gpu_view
from graphmem.report.html.quantity import Quantity, bytes_quantity, count_quantity, format_time
from graphmem.report.safe_text import SNIPPET_MAX_CHARS, printable, printable_text

DASH = "\u2013"


def _size(value: Any) -> Quantity | None:
    return bytes_quantity(value) if isinstance(value, int | str) and value != "" else None


def _flops(value: Any) -> Quantity | None:
    return count_quantity(value, "FLOP") if isinstance(value, int | str) else None


def _seconds(value: Any) -> str:
    return format_time(float(value)) if isinstance(value, int | float) else ""


def _percent(part: int, whole: int) -> float:
    return max(0.0, min(100.0, 100.0 * part / whole)) if whole > 0 else 0.0


# ----- suggestions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SuggestionCard:
    kind: str
    title: str
    targets: tuple[str, ...]
    saves: Quantity | None
    new_peak: Quantity | None
    extra_flops: Quantity | None
    extra_time: str
    snippet: str
    note: str
    saves_percent: float  # of the current peak: the card's bar


def suggestion_cards(report: Mapping[str, Any], peak_probe: int) -> tuple[SuggestionCard, ...]:
    cards = []
    for item in report.get("suggestions") or ():
        if not isinstance(item, Mapping):
            continue
        saves = _size(item.get("saves_bytes"))
        targets = item.get("targets") or ()
        cards.append(SuggestionCard(
            kind=str(item.get("kind") or ""),
            title=printable_text(item.get("title") or item.get("kind") or "suggestion"),
            targets=tuple(printable(t) for t in (targets if isinstance(targets, list)
                                                 else [targets])),
            saves=saves,
            new_peak=_size(item.get("new_peak_bytes")),
            extra_flops=_flops(item.get("extra_flops")),
            extra_time=_seconds(item.get("extra_time_s")),
            snippet=printable_text(item.get("snippet") or "", SNIPPET_MAX_CHARS, multiline=True),
            note=printable_text(item.get("note") or ""),
            saves_percent=_percent(saves.probe, peak_probe) if saves else 0.0,
        ))
    return tuple(cards)


# ----- charts: checkpointing trade-off, batch sweep -------------------------------------------


@dataclass(frozen=True)
class CurveRow:
    peak: Quantity
    extra_flops: Quantity | None
    modules: str


@dataclass(frozen=True)
class CheckpointCurve:
    chart: XYChart
    rows: tuple[CurveRow, ...]


def checkpoint_curve(report: Mapping[str, Any]) -> CheckpointCurve | None:
    points = [p for p in report.get("checkpoint_curve") or ()
              if isinstance(p, Mapping) and isinstance(p.get("peak_bytes"), int)]
    if not points:
        return None
    rows = tuple(CurveRow(bytes_quantity(p["peak_bytes"]), _flops(p.get("extra_flops", 0)),
                          printable_text(", ".join(printable(m) for m in p.get("modules") or ()))
                          or "none")
                 for p in points)
    extra = [r.extra_flops.probe if r.extra_flops else 0 for r in rows]
    chart = xy_chart(
        extra, [r.peak.probe for r in rows],
        [f"recompute {format_si(x, 'FLOP')} -> peak {r.peak.text}: {r.modules}"
         for x, r in zip(extra, rows, strict=True)],
        x_label="extra FLOPs (recomputation)", y_label="peak memory",
        x_format=lambda v: format_si(v, "FLOP"),
    )
    return CheckpointCurve(chart, rows)


@dataclass(frozen=True)
class SweepRow:
    value: int
    peak: Quantity
    fits: bool | None
    latency: str
    throughput: str


@dataclass(frozen=True)
class SweepView:
    dim: str
    chart: XYChart
    rows: tuple[SweepRow, ...]
    max_batch: int | None
    saturates_at: int | None
    saturation_percent: int = round(100 * SATURATION_SHARE)  # what "saturates" means


# A sweep is read against the GPU's line: keep it in view up to 10x the largest peak (the
# curve still spans a tenth of the chart); above that the legend says where it is.
_SWEEP_LIMIT_MAX_RATIO = 10.0


def sweep_view(report: Mapping[str, Any]) -> SweepView | None:
    sweep = report.get("sweep")
    if not isinstance(sweep, Mapping):
        return None
    points = [p for p in sweep.get("points") or ()
              if isinstance(p, Mapping) and isinstance(p.get("value"), int)
              and isinstance(p.get("peak_bytes"), int)]
    if not points:
        return None
    gpu = report.get("gpu") or {}
    usable = gpu.get("usable_bytes") if isinstance(gpu.get("usable_bytes"), int) else None
    max_batch = gpu.get("max_batch") if isinstance(gpu.get("max_batch"), int) else None
    dim = printable(sweep.get("dim") or "batch")
    rows = tuple(SweepRow(
        value=p["value"], peak=bytes_quantity(p["peak_bytes"]), fits=p.get("fits"),
        latency=_seconds(p.get("est_latency_s")),
        throughput=(f"{p['est_throughput_per_s']:,.1f}/s"
                    if isinstance(p.get("est_throughput_per_s"), int | float) else ""),
    ) for p in points)
    values = [r.value for r in rows]
    marker = None
    if max_batch and dim == "batch" and min(values) <= max_batch <= max(values):
        marker = (float(max_batch), f"max batch {max_batch:,}")
    chart = xy_chart(
        values, [r.peak.probe for r in rows],
        [f"{dim}={r.value:,}: peak {r.peak.text}"
         + {True: ", fits", False: ", does not fit", None: ""}[r.fits]
         + (f", {r.latency}" if r.latency else "") for r in rows],
        x_label=dim, y_label="peak memory", x_format=lambda v: f"{v:,.0f}",
        limit_bytes=usable, limit_label="GPU usable",
        marked=[r.fits is False for r in rows], marker=marker,
        limit_max_ratio=_SWEEP_LIMIT_MAX_RATIO,
    )
    saturates = sweep.get("saturates_at")
    return SweepView(dim, chart, rows, max_batch, saturates if isinstance(saturates, int) else None)


# ----- runtime: what the device holds beyond the tensors --------------------------------------


@dataclass(frozen=True)
class RuntimePart:
    key: str  # css class
    label: str
    size: Quantity
    percent: float  # of the bar's scale: max(capacity, total)


@dataclass(frozen=True)
class RuntimeView:
    name: str
    parts: tuple[RuntimePart, ...]
    total: Quantity | None
    capacity: Quantity | None
    capacity_percent: float  # where the capacity rule sits on the bar
    fits: bool | None
    counts: str = ""  # what the runtime's own peak counts (runtime_peak_bytes)
    peak: Quantity | None = None  # runtime_peak_bytes
    notes: tuple[str, ...] = ()


_RUNTIME_PARTS = (
    ("tensors", "tensors at peak", "tensors_at_peak_bytes"),
    ("runtime-weights", "weights in the runtime's pool", "runtime_weights_bytes"),
    ("resident", "weights + inputs", "resident_bytes"),
    ("allocator", "allocator overhead", "allocator_overhead_bytes"),
    ("context", "context + workspaces", "context_workspaces_bytes"),
)


_OPTIONAL_PARTS = ("runtime-weights", "resident")  # shown only when not zero


def runtime_view(memory: Mapping[str, Any]) -> RuntimeView | None:
    runtime = memory.get("runtime")
    if not isinstance(runtime, Mapping):
        return None
    sizes = [(key, label, _size(runtime.get(field))) for key, label, field in _RUNTIME_PARTS]
    present = [(key, label, size) for key, label, size in sizes
               if size is not None and (size.probe > 0 or key not in _OPTIONAL_PARTS)]
    if not present:
        return None
    total = _size(runtime.get("total_device_bytes"))
    capacity = _size(runtime.get("capacity_bytes"))
    total_probe = total.probe if total else sum(size.probe for _, _, size in present)
    scale = max(total_probe, capacity.probe if capacity else 0, 1)
    fits = None if capacity is None else total_probe <= capacity.probe
    return RuntimeView(
        name=str(runtime.get("name") or ""),
        parts=tuple(RuntimePart(k, lbl, s, _percent(s.probe, scale)) for k, lbl, s in present),
        total=total,
        capacity=capacity,
        capacity_percent=_percent(capacity.probe, scale) if capacity else 0.0,
        fits=fits,
        counts=str(runtime.get("counts") or ""),
        peak=_size(runtime.get("runtime_peak_bytes")),
        notes=tuple(printable_text(n) for n in runtime.get("notes") or ()),
    )


# ----- tables of whatever shape the field has (per rank, per strategy, KV cache) -------------


@dataclass(frozen=True)
class Cell:
    text: str
    sort: str  # a number for numeric cells, else the text
    exact: str = ""  # tooltip


@dataclass(frozen=True)
class GenericTable:
    title: str
    columns: tuple[str, ...]
    numeric: tuple[bool, ...]
    rows: tuple[tuple[Cell, ...], ...]


def _cell(key: str, value: Any) -> Cell:
    if value is None:
        return Cell(DASH, "")
    if isinstance(value, bool):
        return Cell("yes" if value else "no", str(int(value)))
    if key.endswith("_bytes") and isinstance(value, int | str):
        size = bytes_quantity(value)
        return Cell(size.text, str(size.probe), f"{size.exact_text} bytes")
    if key.endswith("_s") and isinstance(value, int | float):
        return Cell(format_time(float(value)), repr(float(value)))
    if isinstance(value, int):
        return Cell(f"{value:,}", str(value))
    if isinstance(value, float):
        return Cell(f"{value:.4g}", repr(value))
    if isinstance(value, Mapping | list | tuple):
        if not value:
            return Cell(DASH, "")
        return Cell(printable_text(json.dumps(value, separators=(", ", ": "))), "")
    text = printable_text(value)
    return Cell(text, text)


def _label(key: str) -> str:
    return key.removesuffix("_bytes").removesuffix("_s").replace("_", " ")


def generic_table(title: str, value: Any, first_column: str = "name") -> GenericTable | None:
    """A list of records, a mapping of name -> record, or a mapping of name -> value."""
    if isinstance(value, Mapping) and value and all(isinstance(v, Mapping) for v in value.values()):
        records = [{first_column: name, **record} for name, record in value.items()]
    elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        records = list(value)
    elif isinstance(value, Mapping) and value:
        rows = tuple((Cell(_label(k), _label(k)), _cell(k, v)) for k, v in value.items())
        return GenericTable(title, ("field", "value"), (False, True), rows)
    else:
        return None
    keys = list(dict.fromkeys(k for record in records for k in record))
    rows = tuple(tuple(_cell(k, record.get(k)) for k in keys) for record in records)
    numeric = tuple(all(_is_number(record.get(k), k) for record in records) for k in keys)
    return GenericTable(title, tuple(_label(k) for k in keys), numeric, rows)


def _is_number(value: Any, key: str) -> bool:
    if value is None or isinstance(value, bool):
        return value is None
    return isinstance(value, int | float) or (key.endswith("_bytes") and isinstance(value, str))


@dataclass(frozen=True)
class Extras:
    suggestions: tuple[SuggestionCard, ...]
    checkpoint_curve: CheckpointCurve | None
    sweep: SweepView | None
    runtime: RuntimeView | None
    tables: tuple[GenericTable, ...]  # fields of a shape the views below do not read
    per_gpu: PerGpuView | None = None
    kv_cache: KvCacheView | None = None

    @property
    def any(self) -> bool:
        return bool(self.suggestions or self.checkpoint_curve or self.sweep or self.runtime
                    or self.tables or self.per_gpu or self.kv_cache)

    @property
    def more_memory(self) -> bool:
        """The "Per GPU and caches" section has something to show."""
        return bool(self.tables or self.per_gpu or self.kv_cache)


_TABLE_FIELDS = (
    ("per_rank", "Memory per GPU (rank)", "rank"),
    ("fit_by_strategy", "Fit by parallelism strategy", "strategy"),
    ("kv_cache", "KV cache", "name"),
)


def extras(report: Mapping[str, Any], peak_probe: int) -> Extras:
    memory = report.get("memory") or {}
    per_gpu, kv_cache = per_gpu_view(memory), kv_cache_view(memory)
    read = {"per_rank", "fit_by_strategy"} if per_gpu else set()
    read |= {"kv_cache"} if kv_cache else set()
    tables = tuple(t for field, title, first in _TABLE_FIELDS if field not in read
                   and (t := generic_table(title, memory.get(field), first)) is not None)
    return Extras(
        suggestions=suggestion_cards(report, peak_probe),
        checkpoint_curve=checkpoint_curve(report),
        sweep=sweep_view(report),
        runtime=runtime_view(memory),
        tables=tables,
        per_gpu=per_gpu,
        kv_cache=kv_cache,
    )

