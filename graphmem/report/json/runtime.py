"""JSON for `--runtime`: `memory.runtime`, `memory.runtime_peak_bytes`, `memory.device_total_bytes`
and its parts (graphmem/runtime_models/select.py). Render only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphmem.report.out_of_memory import out_of_memory_json
from graphmem.report.words import counts_text, runtime_notes

if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis
    from graphmem.runtime_models.base import RuntimeEstimate


def runtime_memory(analysis: Analysis) -> dict[str, Any]:
    """The runtime keys of `memory` (none without a runtime model)."""
    estimate = getattr(analysis, "runtime", None)
    note = getattr(analysis, "runtime_note", "")
    if estimate is None:
        return {"runtime": {"note": note}} if note else {}
    capacity = analysis.fit.capacity_bytes if analysis.fit else None
    return {
        "runtime": runtime_json(estimate, capacity),
        "runtime_peak_bytes": estimate.runtime_peak_bytes,
        "device_total_bytes": estimate.device_total_bytes,
        "device_total_parts": device_total_parts(estimate),
    }


def device_total_parts(estimate: RuntimeEstimate) -> dict[str, int]:
    """The lines that add up to device_total_bytes."""
    return {
        "tensors_at_peak_bytes": estimate.tensors_at_peak_bytes,
        "runtime_weights_bytes": estimate.runtime_weights_bytes,
        "resident_bytes": estimate.resident_bytes,
        "allocator_overhead_bytes": estimate.allocator_overhead_bytes,
        "context_bytes": estimate.context_bytes,
        "workspace_bytes": estimate.workspace_bytes,
    }


def runtime_json(estimate: RuntimeEstimate, capacity_bytes: int | None) -> dict[str, Any]:
    return {
        "name": estimate.runtime,
        "runtime_peak_bytes": estimate.runtime_peak_bytes,
        "counts": counts_text(estimate),  # words
        **device_total_parts(estimate),
        "context_workspaces_bytes": estimate.context_bytes + estimate.workspace_bytes,
        "total_device_bytes": estimate.device_total_bytes,
        "arena_held_bytes": estimate.arena_held_bytes,
        "capacity_bytes": capacity_bytes,
        # bounded by the GPU: every allocation made (else the one that failed)
        "satisfied": estimate.satisfied,
        "failure": estimate.failure or None,
        "out_of_memory": out_of_memory_json(estimate.out_of_memory),
        "notes": list(runtime_notes(estimate)),
    }
