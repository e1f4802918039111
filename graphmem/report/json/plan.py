"""JSON fields of the planning results (schedule, arena, roofline, max batch, sweep).

`json_report.to_dict` merges these into `memory`, `gpu`, `nodes` and `sweep`; the schema is
in the README.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from graphmem.core.symbolic import SymInt
from graphmem.report.json.rows import TextRows, text
from graphmem.report.json.runtime import device_total_parts
from graphmem.report.precision import unaccelerated_json

if TYPE_CHECKING:
    from graphmem.passes.arena import Placement
    from graphmem.passes.roofline import RooflineResult
    from graphmem.passes.sweep import SweepResult
    from graphmem.pipeline.analysis import Analysis


def _quantity(value: SymInt) -> int | str:
    return int(value) if value.is_constant else value.formula()


def plan_memory(analysis: Analysis, lazy_rows: bool = False) -> dict[str, Any]:
    """`memory.best_order_peak_bytes`, `arena_bytes`, `no_reuse_bytes` and their details;
    `lazy_rows`: the arena's placements as rows the writer asks for as text (`_Placements`)."""
    schedule, arena = analysis.schedule, analysis.arena
    fields: dict[str, Any] = {"best_order_peak_bytes": None, "arena_bytes": None,
                              "no_reuse_bytes": None}
    if schedule is not None:
        fields["best_order_peak_bytes"] = _quantity(schedule.best_order_peak_bytes)
        fields["planned_at_dims"] = schedule.chosen_at_dims
        fields["schedule"] = {
            "method": schedule.method,
            "proven_optimal": schedule.proven_optimal,
            "proof": schedule.proof,
            "model_order_peak_bytes": _quantity(schedule.model_order_peak_bytes),
            "best_order_peak_bytes": _quantity(schedule.best_order_peak_bytes),
            "best_order_peak_candidates": [
                _quantity(c) for c in schedule.best_order_peak_candidates],
            "lower_bound_bytes": _quantity(schedule.lower_bound_bytes),
            "moved_count": schedule.moved_count,
            "moved": [{"name": m.name, "model_step": m.model_step, "best_step": m.best_step}
                      for m in schedule.moved],
            "best_order": list(schedule.order),
        }
    if arena is not None:
        fields["arena_bytes"] = arena.arena_bytes
        fields["no_reuse_bytes"] = arena.no_reuse_bytes
        fields["arena"] = {
            "live_activation_peak_bytes": arena.live_activation_peak_bytes,
            "fragmentation": arena.fragmentation,
            "alignment": arena.alignment,
            "method": "greedy by size, best fit (TFLite ArenaPlanner, XLA heap simulator)",
            "placements": (_Placements(arena.placements) if lazy_rows
                           else list(map(_placement, arena.placements))),
        }
    return fields


class _Placements(TextRows):
    """The arena's placements, one dict a buffer (a decoder places one buffer a node); as
    text, one f-string a row: its numbers are ints (Placement), which the encoder writes as
    `str` does."""

    def __init__(self, placements: tuple[Placement, ...]) -> None:
        self.placements = placements

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return map(_placement, self.placements)

    def texts(self) -> Iterator[str]:
        return (f'{{"name": {text(p.name)}, "offset": {p.offset}, "bytes": {p.nbytes},'
                f' "first_step": {p.first_step}, "last_step": {p.last_step}}}'
                for p in self.placements)


def _placement(placement: Placement) -> dict[str, Any]:
    return {"name": placement.name, "offset": placement.offset, "bytes": placement.nbytes,
            "first_step": placement.first_step, "last_step": placement.last_step}


def _at_max_runtime(analysis: Analysis) -> dict[str, Any] | None:
    estimate = analysis.runtime_at_max_batch
    if estimate is None:
        return None
    return {"name": estimate.runtime, "device_total_bytes": estimate.device_total_bytes,
            **device_total_parts(estimate)}


def plan_gpu(analysis: Analysis) -> dict[str, Any]:
    """`gpu.est_latency_s`, `gpu.est_throughput_per_s`, `gpu.max_batch` and details."""
    roofline, max_batch = analysis.roofline, analysis.max_batch
    fields: dict[str, Any] = {
        "est_latency_s": roofline.est_latency_s if roofline else None,
        "est_throughput_per_s": roofline.est_throughput_per_s if roofline else None,
        "max_batch": max_batch.max_batch if max_batch else None,
        "max_batch_reason": max_batch.reason if max_batch else None,
    }
    if roofline is not None:
        fields["roofline"] = {
            "note": "lower bound from datasheet peaks (FLOP/s, bandwidth), not a benchmark",
            "compute_bound_time_s": roofline.compute_bound_time_s,
            "memory_bound_time_s": roofline.memory_bound_time_s,
            "nodes_without_flops": roofline.nodes_without_flops,
            "unaccelerated_flops": unaccelerated_json(roofline),
            "top_nodes": [{"name": t.name, "est_time_s": t.est_time_s, "bound": t.bound}
                          for t in roofline.top],
        }
    elif analysis.fit is not None:
        fields["roofline"] = {"note": "bind every dim (--batch / --dim) to estimate latency"}
    if max_batch is not None:
        fields["max_batch_detail"] = {
            "batch_dim": max_batch.batch_dim,
            "basis": max_batch.basis,  # what at_max/at_next are, held against limit_bytes
            "at_max_bytes": max_batch.peak_at_max_bytes,
            "at_next_bytes": max_batch.peak_at_next_bytes,
            "limit_bytes": max_batch.limit_bytes,
            "bound_analyses": max_batch.probes,
            # the batch free: the runtime model at max_batch, whose total is at_max_bytes
            "at_max_runtime": _at_max_runtime(analysis),
        }
    return fields


def with_node_times(nodes: list[dict[str, Any]],
                    roofline: RooflineResult | None) -> list[dict[str, Any]]:
    """Adds `est_time_s` and `bound` to each node row (null without a roofline)."""
    times = roofline.nodes if roofline is not None else [None] * len(nodes)
    for row, time in zip(nodes, times, strict=True):
        row["est_time_s"] = time.est_time_s if time else None
        row["bound"] = time.bound if time else None
        row["intensity_flops_per_byte"] = time.intensity_flops_per_byte if time else None
    return nodes


def sweep_json(sweep: SweepResult | None) -> dict[str, Any] | None:
    if sweep is None:
        return None
    return {
        "dim": sweep.dim,
        "saturates_at": sweep.saturates_at,
        "points": [{"value": p.value, "peak_bytes": p.peak_bytes,
                    "device_total_bytes": p.device_total_bytes, "fits": p.fits,
                    "est_latency_s": p.est_latency_s,
                    "est_throughput_per_s": p.est_throughput_per_s} for p in sweep.points],
    }
