"""How many times an ONNX Loop or Scan runs its body, read from the graph.

Loop (onnx Operators.md): inputs `M` (max trip count, optional), `cond`, then the loop-carried
values; the body runs min(M, until cond is false) times. graphmem counts M iterations when M is
known: a constant, a dim of a tensor (`Shape(x)` -> `Gather(i)`, through Squeeze/Unsqueeze/
Cast/Reshape/Identity: how exporters write `for i in range(x.size(0))`) or an element count
(`Size(x)`, `ReduceProd(Shape(x))`, products), a formula in those dims when they are symbolic,
read by loop_scans.py `GraphScalars` from the shape engine's shapes (as onnx's engine reads
them). With M the data's (a graph input's value, or computed from one) the trip
count is a dim of its own (`data_trip_dim`), free until `--dim` binds it, as any dim the model
leaves free: costs and the runtime models' iterations are formulas in it. Without M (`cond`
decides) one iteration is counted and said.
Scan (opset 9+): the last `num_scan_inputs` inputs are sliced along `scan_input_axes` (default
0), one slice per iteration: the trip count is that axis' length (opset 8: axis 1, after the
batch axis).
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx

from graphmem.core.ir import Graph, Value
from graphmem.core.symbolic import SymInt
from graphmem.frontends.onnx.loop_scans import GraphScalars, data_trip_dim
from graphmem.ops.control_flow import ControlFlowNode

UNKNOWN_TRIPS = "trip count unknown: 1 iteration counted"
__all__ = ["UNKNOWN_TRIPS", "TripCounter", "control_flow_warnings", "data_trip_dim"]


class TripCounter:
    """Trip counts of the Loop and Scan nodes of one (sub)graph."""

    def __init__(self, graph: onnx.GraphProto, values: Mapping[str, Value], opset: int) -> None:
        self.scalars = GraphScalars(graph, lambda name: _shape(values.get(name)))
        self.values = values
        self.opset = opset
        self.data_dims: frozenset[str] = frozenset()  # the dims made for data trip counts

    def trips(self, proto: onnx.NodeProto) -> tuple[SymInt | None, str]:
        """(iterations, how they were found); (None, why not) when the data decides."""
        if proto.op_type == "Scan":
            return self._scan_length(proto)
        if proto.op_type != "Loop":
            return None, ""
        m_name = proto.input[0] if proto.input else ""
        if not m_name:
            return None, f"{UNKNOWN_TRIPS} (no M input: `cond` decides)"
        trips = self.scalars(m_name)  # the shape engine's dims (symbolic in batch etc.)
        if not isinstance(trips, SymInt):  # the data's: a dim of its own, bound as any free dim
            dim = data_trip_dim(m_name)
            self.data_dims |= {dim}
            return SymInt.symbol(dim), f"M '{m_name}' is data: the dim {dim} (--dim {dim}=N)"
        return trips, f"M = {trips}"

    def _scan_length(self, proto: onnx.NodeProto) -> tuple[SymInt | None, str]:
        count = next((a.i for a in proto.attribute if a.name == "num_scan_inputs"), 0)
        if count < 1 or count > len(proto.input):
            return None, f"{UNKNOWN_TRIPS} (num_scan_inputs={count} does not match the inputs)"
        first = proto.input[len(proto.input) - count]
        axes = next((list(a.ints) for a in proto.attribute if a.name == "scan_input_axes"), [])
        axis = axes[0] if axes else (1 if self.opset < 9 else 0)
        value = self.values.get(first)
        length = _dim(value, axis) if value is not None else None
        if length is None:
            return None, f"{UNKNOWN_TRIPS} (the scan axis of '{first}' has no known length)"
        return length, f"axis {axis} of '{first}' = {length}"


def control_flow_warnings(graph: Graph) -> list[str]:
    """One line per Loop/Scan (nested ones too) whose trip count is unknown: the importer's
    warnings, as the report shows them."""
    lines: list[str] = []
    for node in graph.nodes:
        if not isinstance(node, ControlFlowNode):
            continue
        if node.bodies and not node.is_branch and node.trip_count is None:
            lines.append(f"{node.describe()}: {node.trip_note}")
        for _, body in node.bodies:
            lines.extend(control_flow_warnings(body))
    return lines


def _shape(value: Value | None) -> tuple[SymInt | None, ...] | None:
    return value.shape if value is not None else None


def _dim(value: Value, axis: int) -> SymInt | None:
    shape = value.shape
    if shape is None or not -len(shape) <= axis < len(shape):
        return None
    return shape[axis]
