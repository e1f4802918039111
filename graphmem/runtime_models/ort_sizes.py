"""A size for every tensor onnxruntime plans, where shape inference left one unknown.

A tensor whose size is not a number at the bound dims would count 0 bytes in the arena's
replay: the peak silently low (a Swin export by the TorchScript exporter came out 11.4% low
at batch 8 when the optimized graph's Pad of computed pads lost its shape, and 276 tensors
after it). So each such tensor gets a size, in this order:

1. the same tensor of the graph as written, where it has a size there: onnxruntime keeps the
   name of every output of a node it does not fuse away, and a tensor's shape does not depend
   on the level the graph was optimized at;
2. an estimate: the largest input of the node making it (exact for the elementwise,
   normalization, reshape and transpose ops most tensors come from; the node's output may be
   larger, a MatMul's or a Concat's);
3. none, where the node has no input of known size either (a tensor made from nothing sized).

The estimate's note says how many were sized each way, the bytes estimated and the ops that
made them: about how far the peak may be off, and which way (low where an output outgrows its
inputs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from graphmem.core.ir import Graph
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes
from graphmem.runtime_models.value_sizes import ValueSizes


@dataclass(frozen=True)
class SizeFill:
    """The sizes with the unknown ones filled, and how each was found."""

    sizes: Mapping[str, SymInt | None]  # the caller's own where nothing was filled
    from_written: int  # sized as the same tensor of the graph as written
    estimated: int  # sized as the largest input of their node
    estimated_bytes: int
    unknown: int  # left without a size: count 0 bytes (ort_cpu's notes name their ops)
    estimated_ops: tuple[str, ...] = ()  # the op types making the estimated ones

    def note(self) -> str:
        """One line for the estimate's notes; empty where every size was known."""
        parts = []
        if self.from_written:
            parts.append(f"{self.from_written} sized as the same tensor of the graph as"
                         " written")
        if self.estimated:
            ops = ", ".join(self.estimated_ops[:4]) + (
                ", ..." if len(self.estimated_ops) > 4 else "")
            parts.append(f"{self.estimated} estimated at their node's largest input"
                         f" ({format_bytes(self.estimated_bytes)} in all, made by {ops}: the"
                         " runtime peak may be off by about that, low where an output"
                         " outgrows its inputs: Pad, Concat, Expand, Tile, MatMul)")
        if not parts:
            return ""
        total = self.from_written + self.estimated
        plural = "s" if total != 1 else ""
        return f"{total} tensor{plural} of unknown size in the graph onnxruntime runs: " + (
            "; ".join(parts))


Sizes = Mapping[str, SymInt | None]


def fill_unknown_sizes(graph: Graph, sizes: Sizes,
                       written_sizes: Sizes | Callable[[], Sizes] | None = None) -> SizeFill:
    """Every node output of `graph` whose size in `sizes` is not a number, sized from
    `written_sizes` (the graph as written at the same dims, or what makes them: asked only
    where a size is missing) by name, else estimated; nodes in topological order, so an
    estimate feeds the next. Where every size is a number, `sizes` itself (read-only)."""
    if isinstance(sizes, ValueSizes) and sizes.table.of(graph) and sizes.outputs_are_numbers():
        return SizeFill(sizes, 0, 0, 0, 0)  # a probe's sizes: its distinct ones checked
    if callable(written_sizes):
        missing = any(not _is_number(sizes.get(v.name)) for n in graph.nodes for v in n.outputs)
        written_sizes = written_sizes() if missing else None
    from_written = estimated = estimated_bytes = unknown = 0
    estimated_ops: set[str] = set()
    filled: dict[str, SymInt | None] | None = None  # copied at the first size to fill
    get = sizes.get  # every probe of a largest-batch search walks every output
    for node in graph.nodes:
        for value in node.outputs:
            if (size := get(value.name)) is not None and size.is_constant:
                continue
            if filled is None:
                filled = dict(sizes)
                get = filled.get
            same = written_sizes.get(value.name) if written_sizes is not None else None
            if same is not None and same.is_constant:
                filled[value.name] = same
                from_written += 1
                continue
            inputs = [int(size) for v in node.present_inputs
                      if (size := get(v.name)) is not None and size.is_constant]
            if not inputs:
                unknown += 1
                continue
            filled[value.name] = SymInt.const(max(inputs))
            estimated += 1
            estimated_bytes += max(inputs)
            estimated_ops.add(node.op_type)
    return SizeFill(sizes if filled is None else filled, from_written, estimated,
                    estimated_bytes, unknown, tuple(sorted(estimated_ops)))


def _is_number(size: SymInt | None) -> bool:
    return size is not None and size.is_constant
