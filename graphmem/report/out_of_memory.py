"""Where the runtime's allocator, bounded by the GPU, first fails: one wording for the
terminal, the HTML and the JSON (graphmem/passes/fit.py `OutOfMemoryAt`).

The device total beside it is the demand (what the run holds on a GPU large enough), so "over
by" is what the step lacks; this line says where, on this GPU, the run would stop.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from graphmem.core.units import format_bytes

if TYPE_CHECKING:  # a GPU's verdict and runtime model: imported where the analysis has one
    from graphmem.passes.fit import OutOfMemoryAt


def out_of_memory_text(oom: OutOfMemoryAt) -> str:
    """`first out of memory at node /conv1/Conv (Conv), step 1 of 122: ...`."""
    held = (f"{format_bytes(oom.request_bytes)} asked for with {format_bytes(oom.held_bytes)}"
            f" held and {format_bytes(max(oom.free_bytes, 0))} left on the GPU")
    if oom.node:
        return (f"first out of memory at node {oom.node} ({oom.op_type}), step {oom.step} of"
                f" {oom.step_count:,}: {held}")
    if oom.tensor:
        return f"first out of memory before the first node, for {oom.tensor}: {held}"
    return f"first out of memory before the first node, for the weights and inputs: {held}"


def out_of_memory_json(oom: OutOfMemoryAt | None) -> dict[str, Any] | None:
    """The typed fact, numbers and names as they are, and its line."""
    if oom is None:
        return None
    return {**asdict(oom), "text": out_of_memory_text(oom)}
