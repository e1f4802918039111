"""A Loop's scan outputs sized by its trip count, for both shape inference engines.

ONNX Loop (onnx Operators.md): inputs `M` (max trip count, optional), `cond` (optional), then
the loop-carried values; body outputs `cond`, the carried values, then the scan outputs, each
iteration's value stacked along a new first axis: a scan output's shape is [iterations, *the
body's per-iteration shape]. The body runs min(M, until cond is false) times. Where M's value
is known (a constant, or a dim, possibly symbolic, that the engine's data propagation computes)
and cond cannot stop the loop early, the first dim is M. cond cannot stop it when the body's
cond output is, through Identity/Cast, either a constant true or the body's cond input with an
initial cond that is a constant true or absent. Otherwise the dim is left as the engine gives it
(onnxruntime: a new symbol no input binds; onnx: unknown).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from graphmem.frontends.onnx.fold import _constant_node_value

# ops that pass cond (or a trip count) through unchanged
_PASS_THROUGH = frozenset({"Identity", "Cast", "Squeeze", "Unsqueeze", "Reshape"})

# a value by name, numpy or a sympy expression; None where unknown
ValueOf = Callable[[str], Any]


def runs_all_trips(node: onnx.NodeProto, value_of: ValueOf) -> bool:
    """Whether `node`'s body can never stop the loop before M iterations (module docstring);
    `value_of` reads values of the outer scope."""
    body = _body(node)
    if body is None or len(body.input) < 2 or not body.output:
        return False
    producers = {out: n for n in body.node for out in n.output if out}
    local = {t.name: numpy_helper.to_array(t) for t in body.initializer}
    name = body.output[0].name
    while name in producers and producers[name].op_type in _PASS_THROUGH:
        name = producers[name].input[0]
    if name == body.input[1].name:  # the loop's own cond, passed through
        return len(node.input) < 2 or not node.input[1] or _is_true(value_of(node.input[1]))
    made = producers.get(name)
    if made is not None:
        return made.op_type == "Constant" and _is_true(_constant_node_value(made))
    return _is_true(local[name] if name in local else value_of(name))


def trip_count(node: onnx.NodeProto, value_of: ValueOf) -> Any:
    """M's value as one number or expression, where the loop runs exactly M times; else None."""
    if node.op_type != "Loop" or not node.input or not node.input[0]:
        return None
    value = value_of(node.input[0])
    if value is None or np.size(value) != 1 or not runs_all_trips(node, value_of):
        return None
    trips = np.asarray(value).reshape(-1)[0] if isinstance(value, np.ndarray | list) else value
    # a negative M runs no iteration (as graphmem's trip count, control_flow.py)
    return max(int(trips), 0) if isinstance(trips, int | np.integer) else trips


def scan_output_names(node: onnx.NodeProto) -> list[str]:
    """The Loop's outputs after its loop-carried values (inputs past M and cond)."""
    carried = max(len(node.input) - 2, 0)
    return [name for name in node.output[carried:] if name]


def _body(node: onnx.NodeProto) -> onnx.GraphProto | None:
    for attribute in node.attribute:
        if attribute.name == "body" and attribute.type == onnx.AttributeProto.GRAPH:
            return attribute.g
    return None


def _is_true(value: Any) -> bool:
    if value is None:
        return False
    array = np.asarray(value)
    if array.size != 1 or array.dtype == object:
        return False
    return bool(array.reshape(-1)[0])


def ort_loop_rule(engine: Any, module: Any) -> Callable[[onnx.NodeProto], None]:
    """onnxruntime's Loop rule, then the scan outputs' first dim set to M where known (the
    engine names a new symbol for it, which no input binds)."""
    def value_of(name: str) -> Any:
        if name in engine.sympy_data_:
            return engine.sympy_data_[name]
        if name in engine.initializers_:
            return numpy_helper.to_array(engine.initializers_[name])
        return None

    def run(node: onnx.NodeProto) -> None:
        engine._infer_Loop(node)
        trips = trip_count(node, value_of)
        if trips is None:
            return
        if not module.is_literal(trips):
            engine._update_computed_dims([trips])
        dim = module.get_shape_from_sympy_shape([trips])[0]
        for name in scan_output_names(node):
            _set_first_dim(engine.known_vi_[name], dim)

    return run


def _set_first_dim(info: onnx.ValueInfoProto, dim: int | str) -> None:
    if info.type.WhichOneof("value") != "tensor_type":
        return
    dims = info.type.tensor_type.shape.dim
    if not dims:
        return
    _set_dim(dims[0], dim)


def _set_dim(dim: onnx.TensorShapeProto.Dimension, size: int | str) -> None:
    dim.Clear()
    if isinstance(size, str):
        dim.dim_param = size
    else:
        dim.dim_value = int(size)


def onnx_loop_scans(model: onnx.ModelProto) -> None:
    """onnx's inference leaves a Loop's scan outputs' first dim unknown (a fresh `unk__N`, or
    none): set it to M where M is a constant or a dim of a typed value (`Shape` -> `Gather`,
    through reshaping ops) and the loop runs all its trips; a fresh name is replaced wherever
    onnx carried it on (the top graph's loops; in place)."""
    graph = model.graph
    loops = [node for node in graph.node if node.op_type == "Loop"]
    if not loops:
        return
    infos = [*graph.input, *graph.value_info, *graph.output]
    types = {v.name: v for v in infos}
    value_of = _OnnxValues(graph, types)
    renamed: dict[str, int | str] = {}
    for node in loops:
        trips = trip_count(node, value_of)
        if trips is None:
            continue
        dim = trips if isinstance(trips, str) else int(trips)
        for name in scan_output_names(node):
            unknown = _unknown_first_dim(types[name]) if name in types else None
            if unknown is not None:
                renamed[unknown] = dim
                _set_first_dim(types[name], dim)
    for info in infos if any(renamed) else ():
        for d in info.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in renamed:
                _set_dim(d, renamed[d.dim_param])


def _unknown_first_dim(info: onnx.ValueInfoProto) -> str | None:
    """"" for a first dim without size or name, its name where onnx made it up; else None."""
    dims = info.type.tensor_type.shape.dim if info.type.HasField("tensor_type") else []
    if not dims or dims[0].HasField("dim_value"):
        return None
    name = dims[0].dim_param
    return name if not name or name.startswith("unk__") else None


class _OnnxValues:
    """The small values M and cond are made of, read from an onnx-inferred graph: constants,
    and one dim of a Shape (a number, or its dim_param)."""

    def __init__(self, graph: onnx.GraphProto, types: dict[str, onnx.ValueInfoProto]) -> None:
        self.producers = {out: n for n in graph.node for out in n.output if out}
        self.initializers = {t.name: t for t in graph.initializer}
        self.types = types

    def __call__(self, name: str) -> Any:
        if name in self.initializers:
            return numpy_helper.to_array(self.initializers[name])
        node = self.producers.get(name)
        if node is None:
            return None
        if node.op_type == "Constant":
            return _constant_node_value(node)
        if node.op_type in _PASS_THROUGH and node.op_type != "Cast":
            return self(node.input[0])
        if node.op_type == "Gather" and len(node.input) == 2:
            return self._shape_dim(node)
        return None

    def _shape_dim(self, gather: onnx.NodeProto) -> Any:
        """Gather(Shape(x), k) with k a scalar constant: x's dim k, where typed."""
        shape = self.producers.get(gather.input[0])
        index = self(gather.input[1])
        if shape is None or shape.op_type != "Shape" or index is None or np.size(index) != 1:
            return None
        info = self.types.get(shape.input[0])
        if info is None or not info.type.tensor_type.HasField("shape"):
            return None
        dims = list(info.type.tensor_type.shape.dim)
        start = next((a.i for a in shape.attribute if a.name == "start"), 0)
        end = next((a.i for a in shape.attribute if a.name == "end"), len(dims))
        dims = dims[start:end] if (start, end) != (0, len(dims)) else dims
        position = int(np.asarray(index).reshape(-1)[0])
        if not -len(dims) <= position < len(dims):
            return None
        dim = dims[position]
        if dim.HasField("dim_value"):
            return np.int64(dim.dim_value)
        return dim.dim_param or None
