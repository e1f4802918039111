"""How many times an ONNX Loop or Scan runs its body, read from the graph.

Loop (onnx Operators.md): inputs `M` (max trip count, optional), `cond`, then the loop-carried
values; the body runs min(M, until cond is false) times. graphmem counts M iterations when M is
known: a constant, or a dim of a tensor (`Shape(x)` -> `Gather(i)`, through Squeeze/Unsqueeze/
Cast/Reshape/Identity: how exporters write `for i in range(x.size(0))`), a formula in that dim
when it is symbolic. Without M (or with M computed from data) one iteration is counted and said.
Scan (opset 9+): the last `num_scan_inputs` inputs are sliced along `scan_input_axes` (default
0), one slice per iteration: the trip count is that axis' length (opset 8: axis 1, after the
batch axis).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

from graphmem.core.ir import Graph, Value
from graphmem.core.symbolic import SymInt
from graphmem.frontends.onnx.fold import _constant_node_value, _constant_values
from graphmem.ops.control_flow import ControlFlowNode

UNKNOWN_TRIPS = "trip count unknown: 1 iteration counted"
# ops a trip count passes through unchanged on its way from Shape to Loop's M
_PASS_THROUGH = frozenset({"Squeeze", "Unsqueeze", "Cast", "Reshape", "Identity"})


class TripCounter:
    """Trip counts of the Loop and Scan nodes of one (sub)graph."""

    def __init__(self, graph: onnx.GraphProto, values: Mapping[str, Value], opset: int) -> None:
        self.producers = {out: node for node in graph.node for out in node.output if out}
        self.constants = _constant_values(graph)
        for node in graph.node:
            if node.op_type == "Constant" and node.output:
                value = _constant_node_value(node)
                if value is not None:
                    self.constants[node.output[0]] = value
        self.values = values
        self.opset = opset

    def trips(self, proto: onnx.NodeProto) -> tuple[SymInt | None, str]:
        """(iterations, how they were found); (None, why not) when the data decides."""
        if proto.op_type == "Scan":
            return self._scan_length(proto)
        if proto.op_type != "Loop":
            return None, ""
        m_name = proto.input[0] if proto.input else ""
        if not m_name:
            return None, f"{UNKNOWN_TRIPS} (no M input: `cond` decides)"
        trips = self._scalar(m_name)
        if trips is None:
            return None, f"{UNKNOWN_TRIPS} (M '{m_name}' is computed from data)"
        return trips, f"M = {trips}"

    def _scalar(self, name: str) -> SymInt | None:
        constant = self.constants.get(name)
        if constant is not None:
            return _one_int(constant)
        node = self.producers.get(name)
        if node is None:
            return None
        if node.op_type in _PASS_THROUGH and node.input:
            return self._scalar(node.input[0])
        if node.op_type == "Gather" and len(node.input) == 2:
            return self._shape_dim(node.input[0], node.input[1])
        return None

    def _shape_dim(self, shape_name: str, index_name: str) -> SymInt | None:
        """`Gather(Shape(x), i)`: dim i of x (Shape's `start` shifts the index)."""
        shape_node = self.producers.get(shape_name)
        index = self.constants.get(index_name)
        if shape_node is None or shape_node.op_type != "Shape" or index is None:
            return None
        start = next((a.i for a in shape_node.attribute if a.name == "start"), 0)
        position = _one_int(index)
        source = self.values.get(shape_node.input[0])
        if position is None or not position.is_constant or source is None:
            return None
        return _dim(source, int(position) + int(start))

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


def _one_int(array: np.ndarray) -> SymInt | None:
    if array.size != 1 or not np.issubdtype(array.dtype, np.integer):
        return None
    return SymInt.const(max(int(array.reshape(-1)[0]), 0))


def _dim(value: Value, axis: int) -> SymInt | None:
    shape = value.shape
    if shape is None or not -len(shape) <= axis < len(shape):
        return None
    return shape[axis]
