"""How many times an ONNX Loop or Scan runs its body, read from the graph.

Loop (onnx Operators.md): inputs `M` (max trip count, optional), `cond`, then the loop-carried
values; the body runs min(M, until cond is false) times. graphmem counts M iterations when M is
known: a constant, or a dim of a tensor (`Shape(x)` -> `Gather(i)`, through Squeeze/Unsqueeze/
Cast/Reshape/Identity: how exporters write `for i in range(x.size(0))`), a formula in that dim
when it is symbolic. With M the data's (a graph input's value, or computed from one) the trip
count is a dim of its own (`data_trip_dim`), free until `--dim` binds it, as any dim the model
leaves free: costs and the runtime models' iterations are formulas in it. Without M (`cond`
decides) one iteration is counted and said.
Scan (opset 9+): the last `num_scan_inputs` inputs are sliced along `scan_input_axes` (default
0), one slice per iteration: the trip count is that axis' length (opset 8: axis 1, after the
batch axis).
"""

from __future__ import annotations

import re
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
        trips = self._scalar(m_name)
        if trips is None:  # the data's: a dim of its own, bound as any free dim is
            dim = data_trip_dim(m_name)
            self.data_dims |= {dim}
            return SymInt.symbol(dim), f"M '{m_name}' is data: the dim {dim} (--dim {dim}=N)"
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


def data_trip_dim(m_name: str) -> str:
    """The dim that stands for a Loop's trip count where its M is data (a graph input, or
    computed from one): M's name as a dim of the grammar (core/dim_name.py), `_trips` after
    it (`trip_count` -> `trip_count_trips`), one dim for every Loop that reads that M."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", m_name)
    return f"{name if name[:1].isalpha() or name[:1] == '_' else 'M_' + name}_trips"


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
