"""A Reshape's target computed from shapes, read as dims: what onnxruntime's rules know of it.

Exporters compute a reshape target from the tensor's own shape: the TorchScript exporter's
grouped-query repeat of a Llama writes `Reshape(Tile(x), Concat(Shape(t)[0:1], [-1],
Shape(t)[3:5]))`. onnx's data propagation follows such a vector but its Reshape rule has no
symbolic arithmetic for the -1 beside symbolic entries, so the output and every layer after it
went to onnxruntime's rules (about 80 us a node, and sympy's import). The rules read the
vector as sympy values: each entry a number or the symbol of the dim it was read from, and
the -1 the input's size over the product of the rest (repeat_dims.py `_reshaped`, the same
exact division). This module reads the vector the same way, through the ops that carry a
shape's values unchanged: Shape (with start and end), Slice along axis 0 with step 1, Gather
of constant indices, Concat along axis 0, Unsqueeze of a scalar at axis 0, Squeeze of a
one-element vector, integer Cast, Reshape to [-1] or [1], and int64/int32 constants. A dim
onnx could not name (`unk__N`) or named by an expression (seq_dims.py) ends the reading: the
target is left to the engines, as before.
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx
from onnx import numpy_helper

from graphmem.frontends.onnx.graph_index import GraphIndex
from graphmem.frontends.onnx.seq_dims import is_expression
from graphmem.frontends.onnx.value_types import constant_tensor, dim_known

Dim = int | str
# (entries, rank): rank 0 is a scalar (one entry), rank 1 a vector
Vector = tuple[list[Dim], int]
_MAX_ENTRIES = 16  # a reshape target's length; anything longer is no shape vector
_MAX_DEPTH = 24  # ops followed back from a target
_INTEGERS = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32})
_ONNX = frozenset({"", "ai.onnx"})


class ShapeVectors:
    """Reads shape vectors of `graph` (the nodes inference runs on) with the dims of `types`
    (onnx's inference of it); each value read once."""

    def __init__(self, graph: onnx.GraphProto, types: Mapping[str, onnx.ValueInfoProto],
                 index: GraphIndex | None = None) -> None:
        index = index or GraphIndex(graph)  # the callers' one walk, else one of its own
        self._producer = index.producer
        self._initializers = index.initializer
        self._types = types
        self._read: dict[str, Vector | None] = {}

    def target(self, name: str) -> list[Dim] | None:
        """The 1-D vector `name` as dims (numbers and dim names), else None."""
        vector = self._vector(name, 0)
        return vector[0] if vector is not None and vector[1] == 1 else None

    def _vector(self, name: str, depth: int) -> Vector | None:
        if name not in self._read:
            self._read[name] = None if depth > _MAX_DEPTH else self._compute(name, depth + 1)
        return self._read[name]

    def _compute(self, name: str, depth: int) -> Vector | None:
        node = self._producer.get(name)
        if node is None:
            tensor = self._initializers.get(name)
            return None if tensor is None else _constant(tensor)
        if node.domain not in _ONNX or len(node.output) != 1:
            return None
        if node.op_type == "Constant":
            tensor = constant_tensor(node)
            return None if tensor is None else _constant(tensor)
        if node.op_type == "Shape":
            return self._shape(node)
        inputs = [self._vector(n, depth) if n else None for n in node.input]
        return _RULES[node.op_type](node, inputs) if node.op_type in _RULES and inputs \
            and inputs[0] is not None else None

    def _shape(self, node: onnx.NodeProto) -> Vector | None:
        info = self._types.get(node.input[0]) if node.input else None
        if info is None or not info.type.tensor_type.HasField("shape"):
            return None
        dims: list[Dim] = []
        for dim in info.type.tensor_type.shape.dim:
            if not dim_known(dim) or is_expression(dim):
                return None
            dims.append(dim.dim_value if dim.HasField("dim_value") else dim.dim_param)
        start = next((a.i for a in node.attribute if a.name == "start"), 0)
        end = next((a.i for a in node.attribute if a.name == "end"), None)
        return dims[start:end], 1  # onnx clamps start and end as Python's slices do


def _constant(tensor: onnx.TensorProto) -> Vector | None:
    if tensor.data_type not in _INTEGERS or len(tensor.dims) > 1 \
            or (tensor.dims and not 0 < tensor.dims[0] <= _MAX_ENTRIES) \
            or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        values: list[Dim] = [int(v) for v in numpy_helper.to_array(tensor).reshape(-1)]
    except ValueError:  # data of the wrong size: the engines will say so
        return None
    return values, len(tensor.dims)


def _numbers(vector: Vector | None) -> list[int] | None:
    if vector is None or not all(isinstance(v, int) for v in vector[0]):
        return None
    return [int(v) for v in vector[0]]


def _attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def _slice(node: onnx.NodeProto, inputs: list[Vector | None]) -> Vector | None:
    source, bounds = inputs[0], [_numbers(v) for v in inputs[1:5]]
    if source is None or source[1] != 1 or len(bounds) < 2 or any(
            b is None or len(b) != 1 for b in bounds):
        return None
    starts, ends, *rest = (b[0] for b in bounds if b is not None)
    if (rest and rest[0] not in (0, -1)) or (len(rest) > 1 and rest[1] != 1):
        return None  # axis 0 of a vector, step 1
    return source[0][starts:ends], 1  # onnx clamps as Python's slices do


def _gather(node: onnx.NodeProto, inputs: list[Vector | None]) -> Vector | None:
    source = inputs[0]
    indices = inputs[1] if len(inputs) == 2 else None
    picks = _numbers(indices)
    if source is None or source[1] != 1 or indices is None or picks is None \
            or _attribute(node, "axis", 0) != 0:
        return None
    size = len(source[0])
    if any(not -size <= i < size for i in picks):
        return None
    return [source[0][i] for i in picks], indices[1]


def _concat(node: onnx.NodeProto, inputs: list[Vector | None]) -> Vector | None:
    if _attribute(node, "axis", 0) not in (0, -1) or any(v is None or v[1] != 1 for v in inputs):
        return None
    entries = [d for v in inputs if v is not None for d in v[0]]
    return (entries, 1) if len(entries) <= _MAX_ENTRIES else None


def _unsqueeze(node: onnx.NodeProto, inputs: list[Vector | None]) -> Vector | None:
    axes = _numbers(inputs[1]) if len(inputs) > 1 else [
        int(a) for attribute in node.attribute if attribute.name == "axes" for a in attribute.ints]
    source = inputs[0]
    return (source[0], 1) if source is not None and source[1] == 0 and axes in ([0], [-1]) \
        else None


def _squeeze(node: onnx.NodeProto, inputs: list[Vector | None]) -> Vector | None:
    source = inputs[0]
    return (source[0], 0) if source is not None and source[1] == 1 and len(source[0]) == 1 \
        else None


def _cast(node: onnx.NodeProto, inputs: list[Vector | None]) -> Vector | None:
    return inputs[0] if _attribute(node, "to", 0) in _INTEGERS else None


def _reshape(node: onnx.NodeProto, inputs: list[Vector | None]) -> Vector | None:
    source = inputs[0]
    target = _numbers(inputs[1]) if len(inputs) == 2 else None
    if source is None or len(source[0]) != 1 or target not in ([-1], [1]):
        return None
    return source[0], 1


_RULES = {"Slice": _slice, "Gather": _gather, "Concat": _concat, "Unsqueeze": _unsqueeze,
          "Squeeze": _squeeze, "Cast": _cast, "Reshape": _reshape}
