"""Costs of control-flow nodes (ONNX If, Loop, Scan): their bodies priced op by op.

- If runs one branch: the node costs the branch that needs more memory (its own peak, see
  graphmem/ops/control_flow.py; FLOPs break a tie), and both branches are listed.
- Loop and Scan run the body once per iteration: body x trip count, a formula where the count
  is a dim (`M = n`: n x the body's FLOPs). With no known count one iteration is counted and
  the node's note says so.
Memory: the bodies' intermediates are one transient output of the node (the importer adds it),
reused by every iteration; what a Scan or Loop concatenates over its iterations is the node's
outputs, sized by shape inference.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from graphmem.core.conventions import PROBE_DIM_VALUE
from graphmem.core.ir import Graph
from graphmem.core.symbolic import SymInt, sum_sizes
from graphmem.ops.control_flow import ControlFlowNode, body_peak_bytes


@dataclass(frozen=True)
class BodyTotals:
    """What one run of a body costs, from the costs pass over the body's graph."""

    macs: SymInt
    flops: SymInt
    bytes_read: SymInt
    bytes_written: SymInt
    uncosted: tuple[str, ...]  # body nodes without a cost (no rule, unknown shape, ...)


@dataclass(frozen=True)
class BranchCost:
    name: str  # the ONNX attribute: then_branch, else_branch, body
    node_count: int
    macs: SymInt  # one run of the body
    flops: SymInt
    bytes_read: SymInt
    bytes_written: SymInt
    peak_bytes: SymInt  # the body's own intermediates at their peak
    counted: bool  # the branch whose cost is the node's (If: the larger; Loop/Scan: the body)


@dataclass(frozen=True)
class ControlFlowCost:
    macs: SymInt
    flops: SymInt
    bytes_read: SymInt
    bytes_written: SymInt
    branches: tuple[BranchCost, ...]
    complete: bool  # every body node has a cost
    note: str


CostBody = Callable[[Graph, Mapping[str, int]], BodyTotals]


def control_flow_cost(node: ControlFlowNode, dims: Mapping[str, int],
                      cost_body: CostBody) -> ControlFlowCost:
    """The node's cost from its bodies (`cost_body`: the costs pass, recursive for nesting)."""
    totals = [(name, body, cost_body(body, dims)) for name, body in node.bodies]
    peaks = [body_peak_bytes(body).bind(dims) for _, body, _ in totals]
    chosen = _larger_branch(totals, peaks) if node.is_branch else None
    branches = tuple(
        BranchCost(name, len(body.nodes), t.macs, t.flops, t.bytes_read, t.bytes_written,
                   peak, chosen is None or index == chosen)
        for index, ((name, body, t), peak) in enumerate(zip(totals, peaks, strict=True))
    )
    counted = [b for b in branches if b.counted]
    times = node.trip_count.bind(dims) if node.trip_count is not None else SymInt.const(1)
    uncosted = sorted({op for _, _, t in totals for op in t.uncosted})
    return ControlFlowCost(
        macs=sum_sizes(b.macs for b in counted) * times,
        flops=sum_sizes(b.flops for b in counted) * times,
        bytes_read=sum_sizes(b.bytes_read for b in counted) * times,
        bytes_written=sum_sizes(b.bytes_written for b in counted) * times,
        branches=branches,
        complete=not uncosted,
        note=_note(node, branches, times, uncosted),
    )


def _larger_branch(totals: list[tuple[str, Graph, BodyTotals]], peaks: list[SymInt]) -> int:
    """The branch with the larger peak (at the probe value where it is a formula); FLOPs
    break a tie, then the first (then_branch)."""
    probe = {n: PROBE_DIM_VALUE for p in peaks for n in p.free_symbols()}
    probe |= {n: PROBE_DIM_VALUE for _, _, t in totals for n in t.flops.free_symbols()}
    keys = [(peak.evaluate(probe), t.flops.evaluate(probe), -index)
            for index, ((_, _, t), peak) in enumerate(zip(totals, peaks, strict=True))]
    return keys.index(max(keys))


def _note(node: ControlFlowNode, branches: tuple[BranchCost, ...], times: SymInt,
          uncosted: list[str]) -> str:
    parts: list[str] = []
    if node.is_branch:
        counted = next((b.name for b in branches if b.counted), "")
        parts.append(f"{node.op_type}: the larger branch counted ({counted})")
    else:
        parts.append(f"{node.op_type}: body x {times} iterations"
                     + (f" ({node.trip_note})" if node.trip_note else ""))
    if uncosted:
        parts.append("body nodes without a cost: " + ", ".join(uncosted))
    parts.extend(node.notes)
    return "; ".join(parts)
