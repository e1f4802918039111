"""What the device holds beyond the live tensors (--runtime): the runtime model's labelled parts
on one bar against the GPU's capacity, from graphmem/runtime_models (RuntimeEstimate)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from graphmem.core.safe_text import printable_text
from graphmem.report.html.quantity import Quantity, bytes_quantity, percent
from graphmem.report.words import counts_text, part_label, runtime_notes

if TYPE_CHECKING:  # a GPU's verdict and runtime model: imported where the analysis has one
    from graphmem.passes.fit import GpuFit
    from graphmem.runtime_models.base import RuntimeEstimate


class RuntimePart(NamedTuple):
    key: str  # css class: the part's code
    label: str
    size: Quantity
    percent: float  # of the bar's scale: max(capacity, total)


class RuntimeView(NamedTuple):
    name: str
    parts: tuple[RuntimePart, ...]
    total: Quantity
    capacity: Quantity | None
    capacity_percent: float  # where the capacity rule sits on the bar
    fits: bool | None
    counts: str  # what the runtime's own peak counts (runtime_peak_bytes)
    peak: Quantity
    notes: tuple[str, ...] = ()


def runtime_view(estimate: RuntimeEstimate | None, fit: GpuFit | None) -> RuntimeView | None:
    if estimate is None:
        return None
    from graphmem.pipeline.device_total import runtime_parts

    capacity = fit.capacity_bytes if fit else None
    total = estimate.device_total_bytes
    scale = max(total, capacity or 0, 1)
    return RuntimeView(
        name=str(estimate.runtime),
        parts=tuple(RuntimePart(part.key.replace("_", "-"), part_label(part),
                                bytes_quantity(part.size_bytes),
                                _clamped(int(part.size_bytes), scale))
                    for part in runtime_parts(estimate)),
        total=bytes_quantity(total),
        capacity=None if capacity is None else bytes_quantity(capacity),
        capacity_percent=0.0 if capacity is None else _clamped(capacity, scale),
        fits=None if capacity is None else total <= capacity,
        counts=counts_text(estimate),
        peak=bytes_quantity(estimate.runtime_peak_bytes),
        notes=tuple(map(printable_text, runtime_notes(estimate))),
    )


def _clamped(part: int, whole: int) -> float:
    return max(0.0, min(100.0, percent(part, whole)))
