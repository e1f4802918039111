"""A Loop's scan outputs sized by its trip count, for both shape inference engines.

ONNX Loop (onnx Operators.md): inputs `M` (max trip count, optional), `cond` (optional), then
the loop-carried values; body outputs `cond`, the carried values, then the scan outputs, each
iteration's value stacked along a new first axis: a scan output's shape is [iterations, *the
body's per-iteration shape]. The body runs min(M, until cond is false) times. Where M's value
is known (a constant, or a dim, possibly symbolic, that the engine's data propagation computes)
and cond cannot stop the loop early, the first dim is M. cond cannot stop it when the body's
cond output is, through Identity/Cast, either a constant true or the body's cond input with an
initial cond that is a constant true or absent. Where M is data (a graph input's value, or
computed from one: no value the engine can work out) and cond cannot stop the loop early, the
first dim is the trip count's own dim (`data_trip_dim`, the one control_flow.py counts the
iterations in). Otherwise the dim is left as the engine gives it (onnxruntime: a new symbol no
input binds; onnx: unknown): at most M, the maximum (passes/extent_bounds.py bounds it so).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from graphmem.core.symbolic import SymInt, parse_size, product
from graphmem.frontends.onnx.fold import _constant_node_value, _small_known

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


def scan_first_dim(node: onnx.NodeProto, value_of: ValueOf) -> Any:
    """The first dim of the Loop's scan outputs where the loop runs all its trips: M's value
    (`trip_count`), else, M being data, its own dim (`data_trip_dim`); None where cond may
    stop the loop early or there is no M (the engine's dim kept, at most M)."""
    trips = trip_count(node, value_of)
    if trips is not None or node.op_type != "Loop" or not node.input or not node.input[0]:
        return trips
    if value_of(node.input[0]) is not None or not runs_all_trips(node, value_of):
        return None  # a value that is not one number, or cond may stop the loop early
    return data_trip_dim(node.input[0])


def data_trip_dim(m_name: str) -> str:
    """The dim that stands for a Loop's trip count where its M is data (a graph input, or
    computed from one): M's name as a dim of the grammar (core/dim_name.py), `_trips` after
    it (`trip_count` -> `trip_count_trips`), one dim for every Loop that reads that M."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", m_name)
    return f"{name if name[:1].isalpha() or name[:1] == '_' else 'M_' + name}_trips"


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
    """onnxruntime's Loop rule, then the scan outputs' first dim set to `scan_first_dim`
    (the engine names a new symbol for it, which no input binds). M's value: the engine's
    own data propagation, else `GraphScalars` over the engine's shapes (the importer's reader:
    the engine computes no ReduceProd of opset 18, whose axes are an input)."""
    made: list[GraphScalars] = []  # the reader of the engine's graph, made at its first use

    def value_of(name: str) -> Any:
        if name in engine.sympy_data_:
            return engine.sympy_data_[name]
        if name in engine.initializers_:
            return numpy_helper.to_array(engine.initializers_[name])
        if not made:
            made.append(GraphScalars(engine.out_mp_.graph,
                                     lambda value: onnx_dims(engine.known_vi_.get(value))))
        found = made[0](name)
        if isinstance(found, SymInt):  # a number, else a formula the engine keeps as a name
            return np.int64(int(found)) if found.is_constant else found.formula()
        return found

    def run(node: onnx.NodeProto) -> None:
        engine._infer_Loop(node)
        trips = scan_first_dim(node, value_of)
        if trips is None:
            return
        if not isinstance(trips, str) and not module.is_literal(trips):
            engine._update_computed_dims([trips])
        dim = trips if isinstance(trips, str) else module.get_shape_from_sympy_shape([trips])[0]
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
    value_of = GraphScalars(graph, lambda name: onnx_dims(types.get(name)))
    renamed: dict[str, int | str] = {}
    for node in loops:
        trips = scan_first_dim(node, value_of)
        if trips is None:
            continue
        dim = _onnx_dim(trips)
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


def _onnx_dim(trips: Any) -> int | str:
    """A trip count as a dim of onnx's value infos: a number, else its formula."""
    if isinstance(trips, SymInt):
        return int(trips) if trips.is_constant else trips.formula()
    return trips if isinstance(trips, str) else int(trips)


# a value's dims by name (each a SymInt, None where unknown), None where it has no shape
DimsOf = Callable[[str], Sequence[SymInt | None] | None]


class GraphScalars:
    """The small integer values a Loop's M is made of, read from one graph and its values'
    shapes (`dims_of`: the shape engine's, symbolic in batch etc.): a constant; a dim of a
    shape, `Gather(Shape(x), k)`; an element count, `Size(x)` or `ReduceProd(Shape(x))`; a
    product of those (`Mul`); through Identity/Cast/Squeeze/Unsqueeze/Reshape. A SymInt,
    or the constant's array where it is not one integer (a cond); None where not known (the
    data's). The one trip-count reader of onnx's engine and of the importer (control_flow.py)."""

    def __init__(self, graph: onnx.GraphProto, dims_of: DimsOf) -> None:
        self.producers = {out: n for n in graph.node for out in n.output if out}
        self.initializers = {t.name: t for t in graph.initializer}
        self.dims_of = dims_of

    def __call__(self, name: str) -> Any:
        constant = self.constant(name)
        if constant is not None:
            count = _one_int(constant)
            return constant if count is None else count
        node = self.producers.get(name)
        if node is None or not node.input:
            return None
        if node.op_type in _PASS_THROUGH:
            return self(node.input[0])
        if node.op_type == "Gather" and len(node.input) == 2:
            return self._shape_dim(node)
        if node.op_type == "Size" or (node.op_type == "ReduceProd" and len(node.input) == 1):
            return self._element_count(node)
        if node.op_type == "Mul" and len(node.input) == 2:
            left, right = self(node.input[0]), self(node.input[1])
            both = isinstance(left, SymInt) and isinstance(right, SymInt)
            return left * right if both else None
        return None

    def constant(self, name: str) -> np.ndarray | None:
        tensor = self.initializers.get(name)
        if tensor is not None:  # a data-less (external) one is unknown, never read
            return numpy_helper.to_array(tensor) if _small_known(tensor) else None
        node = self.producers.get(name)
        if node is not None and node.op_type == "Constant":
            return _constant_node_value(node)
        return None

    def _shape_dims(self, name: str) -> Sequence[SymInt | None] | None:
        """`Shape(x)` (its start and end applied): x's dims; None for any other value."""
        shape = self.producers.get(name)
        if shape is None or shape.op_type != "Shape":
            return None
        dims = self.dims_of(shape.input[0])
        if dims is None:
            return None
        start = next((a.i for a in shape.attribute if a.name == "start"), 0)
        end = next((a.i for a in shape.attribute if a.name == "end"), len(dims))
        return dims[start:end]

    def _shape_dim(self, gather: onnx.NodeProto) -> SymInt | None:
        """Gather(Shape(x), k) with k a scalar constant: x's dim k, where typed."""
        dims = self._shape_dims(gather.input[0])
        index = self.constant(gather.input[1])
        position = _one_int(index) if index is not None else None
        if dims is None or position is None or not -len(dims) <= int(position) < len(dims):
            return None
        return dims[int(position)]

    def _element_count(self, node: onnx.NodeProto) -> SymInt | None:
        """Size(x) or ReduceProd(Shape(x)) (no axes: every dim): the product of x's dims."""
        if node.op_type == "Size":
            dims = self.dims_of(node.input[0])
        else:
            dims = self._shape_dims(node.input[0])
        known = [d for d in dims if d is not None] if dims is not None else []
        return product(known) if dims is not None and len(known) == len(dims) else None


def _one_int(array: np.ndarray) -> SymInt | None:
    """A one-element integer array as a count (a negative one: 0 iterations)."""
    if np.size(array) != 1 or not np.issubdtype(np.asarray(array).dtype, np.integer):
        return None
    return SymInt.const(max(int(np.asarray(array).reshape(-1)[0]), 0))


def onnx_dims(info: onnx.ValueInfoProto | None) -> list[SymInt | None] | None:
    """A value info's dims as SymInts (a name or formula parsed, None where unknown); None
    where it has no shape."""
    if info is None or not info.type.HasField("tensor_type") \
            or not info.type.tensor_type.HasField("shape"):
        return None
    return [SymInt.const(d.dim_value) if d.HasField("dim_value")
            else parse_size(d.dim_param) if d.dim_param else None
            for d in info.type.tensor_type.shape.dim]
