"""What the device holds beyond the live tensors (--runtime): the runtime model's labelled parts
on one bar against the GPU's capacity, from graphmem/runtime_models (RuntimeEstimate)."""

from __future__ import annotations

from dataclasses import dataclass

from graphmem.core.safe_text import printable_text
from graphmem.passes.fit import GpuFit
from graphmem.report.html.quantity import Quantity, bytes_quantity, percent
from graphmem.runtime_models.base import RuntimeEstimate


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
    parts = [
        ("tensors", "tensors at peak", estimate.tensors_at_peak_bytes),
        ("runtime-weights", "weights in the runtime's pool", estimate.runtime_weights_bytes),
        ("resident", "weights + inputs", estimate.resident_bytes),
        ("allocator", "allocator overhead", estimate.allocator_overhead_bytes),
        ("context", "context + workspaces", estimate.context_bytes + estimate.workspace_bytes),
    ]
    # the runtime's weight pool and the residents line exist only in some runtime models
    present = [(k, label, size) for k, label, size in parts
               if size > 0 or k not in ("runtime-weights", "resident")]
    capacity = fit.capacity_bytes if fit else None
    total = estimate.device_total_bytes
    scale = max(total, capacity or 0, 1)
    return RuntimeView(
        name=str(estimate.runtime),
        parts=tuple(RuntimePart(k, label, bytes_quantity(size), _clamped(size, scale))
                    for k, label, size in present),
        total=bytes_quantity(total),
        capacity=None if capacity is None else bytes_quantity(capacity),
        capacity_percent=0.0 if capacity is None else _clamped(capacity, scale),
        fits=None if capacity is None else total <= capacity,
        counts=printable_text(estimate.counts),
        peak=bytes_quantity(estimate.runtime_peak_bytes),
        notes=tuple(map(printable_text, estimate.notes)),
    )


def _clamped(part: int, whole: int) -> float:
    return max(0.0, min(100.0, percent(part, whole)))
