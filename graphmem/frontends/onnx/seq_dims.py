"""The dims onnxruntime's symbolic rules give a decoder's sequence-length tensors, written for
onnx's second pass so that it follows what they feed at C++ speed (infer.py's `_second_pass`).

A decoder computes its positions as `Range(0, seq, 1)` and slices its rotary tables as
`cos[:seq]` (`Slice(table, 0, seq, axes, 1)`), `seq` read from a tensor's shape
(`Gather(Shape(x), i)` with a scalar i as exporters write it, `Slice(Shape(x), [i], [i + 1])`
or `Shape(x, start=i, end=i + 1)` as a graph written by hand may, possibly through integer
Casts, Unsqueeze and Squeeze: the ops whose rules pass the value on; Identity's does not).
onnx's inference has no symbolic arithmetic and types both lengths as unknown, and every tensor
they reach with them (the rotary `cos[:seq][position_ids]` takes its length from the
positions). On an 80-layer Llama-3-70B graph typing them takes 2,092 of the 4,667 nodes onnx
leaves unknown off onnxruntime's rules (about 80 us each; most of the rest follow a grouped-
query Expand whose shape is a Where, which onnx's data propagation does not follow). Given the
lengths those rules compute, onnx follows the rest:

- Range: the rules compute `Max(ceiling((limit - start) / delta), 0)`; with start 0, delta 1
  and limit the symbol `s` of a declared input dim (a nonnegative integer symbol to sympy)
  that is `s`, written as the same dim name. onnx names x's dim `s` only where it is the
  declared dim, and the rules read x's type as onnx gave it (unknown_part's inputs).
- Slice of an axis of literal length `n`, start 0, step 1, end `s` as above: the rules keep
  `e = Min(s, n)` (handle_negative_index leaves a nonnegative `s` alone; a symbolic end
  against a literal length is min'ed) and the length `(e - 0 + 1 - 1) // 1`, simplified:
  `Min(n, s)` (0 for n = 0, refused), which sympy prints numbers first, exactly this name.
  That name is no symbol the rules could read back: infer.py's `unknown_part` puts the
  producer of any value carrying it into the part whenever a node of the part reads it, so
  the rules compute it there as before.

Anything else (another start or step, a negative or constant end, an end whose dim onnx did
not name after a declared input dim) is left to the rules, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import onnx

from graphmem.frontends.onnx.graph_index import GraphIndex
from graphmem.frontends.onnx.value_types import constant_tensor, dim_known, int_values

# Ops whose rules pass a value on (`_pass_on_sympy_data`) from Gather(Shape(x), i) to an end
# or a limit (Identity's rule passes only the type: the rules name its output afresh)
_PASS_THROUGH = frozenset({"Cast", "Unsqueeze", "Squeeze"})
_INTEGER_TYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32})


class SeqDims:
    """Reads the graph's constants and scalar chains for `sequence_dims` and the slices."""

    def __init__(self, graph: onnx.GraphProto, types: Mapping[str, onnx.ValueInfoProto],
                 index: GraphIndex | None = None) -> None:
        index = index or GraphIndex(graph)  # the callers' one walk, else one of its own
        self.index = index
        self._producer = index.producer
        self._initializers = index.initializer
        self.types = types
        self._declared = {d.dim_param for v in graph.input
                          for d in v.type.tensor_type.shape.dim if d.dim_param}
        # answers by value name (the graph is not changed while it is read): a decoder's
        # slices read the same few starts, ends and steps once a layer
        self._constants: dict[tuple[str, bool], list[int] | None] = {}
        self._dims: dict[str, str | None] = {}

    def range_dim(self, node: onnx.NodeProto) -> str | None:
        """The rules' length of `Range(0, s, 1)` (the name of a declared dim), else None."""
        if len(node.input) != 3 or self.constant(node.input[0]) != [0] \
                or self.constant(node.input[2]) != [1]:
            return None
        return self.declared_dim(node.input[1])

    def slice_dim(self, node: onnx.NodeProto, length: int) -> str | None:
        """The rules' name for the length of `node`'s only sliced axis, of literal `length`:
        `Min(length, s)` for start 0, step 1 and end a declared dim `s`; else None."""
        if length < 1 or len(node.input) < 4 or self.constant(node.input[1]) != [0]:
            return None  # sympy simplifies Min(0, s) to 0
        if len(node.input) > 4 and node.input[4] and self.constant(node.input[4]) != [1]:
            return None
        end = self.declared_dim(node.input[2])
        return None if end is None else f"Min({length}, {end})"

    def declared_dim(self, name: str) -> str | None:
        """The declared dim name `s` a scalar (or one-element) value equals: x's dim i named
        `s` by onnx's inference, read as Gather(Shape(x), i), Slice(Shape(x), [i], [i + 1]) or
        Shape(x, start=i, end=i + 1), through pass-through ops. However a graph writes it (an
        exporter's Gather, a hand-written Slice), the rules compute the same symbol."""
        if name not in self._dims:
            self._dims[name] = self._declared_dim(name)
        return self._dims[name]

    def _declared_dim(self, name: str) -> str | None:
        node = self._producer.get(name)
        while node is not None and node.domain in ("", "ai.onnx") and node.input \
                and (node.op_type in _PASS_THROUGH or self._vector_of_one(node)):
            if node.op_type == "Cast" and not _casts_to_integer(node):
                return None
            node = self._producer.get(node.input[0])
        if node is None or node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "Shape":  # Shape(x, start=i, end=i + 1): one dim
            start, end = _shape_range(node)
            return self._dim_name(node.input[0], start) if start >= 0 and end == start + 1 \
                else None
        if node.op_type == "Gather" and len(node.input) == 2 \
                and not any(a.name == "axis" and a.i != 0 for a in node.attribute):
            index = self.constant(node.input[1], scalar=True)
        elif node.op_type == "Slice" and _slices_one(node, self.constant):
            index = self.constant(node.input[1])
        else:
            return None
        return None if index is None else self._shape_element(node.input[0], index[0])

    def _vector_of_one(self, node: onnx.NodeProto) -> bool:
        """A Reshape to [-1] or [1] (the dynamo exporter's scalar dim made a vector): its one
        value is its input's."""
        return node.op_type == "Reshape" and len(node.input) == 2 \
            and self.constant(node.input[1]) in ([-1], [1])

    def _shape_element(self, name: str, index: int) -> str | None:
        """The declared dim that element `index` of the shape vector `name` is, if any."""
        shape = self._producer.get(name)
        if shape is None or shape.op_type != "Shape" or shape.domain not in ("", "ai.onnx"):
            return None
        start, end = _shape_range(shape)
        if start < 0 or (end is not None and end < 0) or (index < 0 and shape.attribute):
            return None  # negative bounds count from a rank only the engines check
        return self._dim_name(shape.input[0], start + index)

    def _dim_name(self, name: str, index: int) -> str | None:
        info = self.types.get(name)
        if info is None or not info.type.tensor_type.HasField("shape"):
            return None
        dims = info.type.tensor_type.shape.dim
        if not -len(dims) <= index < len(dims):
            return None
        param = dims[index].dim_param
        return param if param in self._declared else None

    def constant(self, name: str, scalar: bool = False) -> list[int] | None:
        """An integer Constant node's or initializer's one value (of a scalar, or with
        `scalar` False of a one-element vector) as a list (not to be changed), else None."""
        key = (name, scalar)
        if key not in self._constants:
            self._constants[key] = self._constant(name, scalar)
        return self._constants[key]

    def _constant(self, name: str, scalar: bool) -> list[int] | None:
        tensor = self._initializers.get(name)
        node = self._producer.get(name)
        if tensor is None and node is not None:
            tensor = constant_tensor(node)  # value, or value_ints as the dynamo exporter writes
        if tensor is None or tensor.data_type not in _INTEGER_TYPES \
                or len(tensor.dims) > (0 if scalar else 1) \
                or (tensor.dims and tensor.dims[0] != 1) \
                or tensor.data_location == onnx.TensorProto.EXTERNAL:
            return None
        return int_values(tensor)  # None: data of the wrong size, the engines will say so


def sequence_dims(seq: SeqDims) -> list[onnx.ValueInfoProto]:
    """Each Range output onnx left unknown (by `seq`'s types: a node's output is never a graph
    input, validation.py), typed `[s]` where the rules give it that length."""
    result = []
    for node in seq.index.nodes("Range"):
        if node.domain not in ("", "ai.onnx"):
            continue
        info = seq.types.get(node.output[0])
        dims = info.type.tensor_type.shape.dim if info is not None else []
        if info is None or len(dims) != 1 or dims[0].HasField("dim_value") \
                or not dims[0].dim_param.startswith("unk__"):
            continue
        dim = seq.range_dim(node)
        if dim is not None:
            typed = onnx.ValueInfoProto()
            typed.CopyFrom(info)
            typed.type.tensor_type.shape.dim[0].dim_param = dim
            result.append(typed)
    return result


# elementwise ops whose output is the broadcast of their inputs
_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div"})


def for_onnx_pass(graph: onnx.GraphProto, typed: list[onnx.ValueInfoProto],
                  index: GraphIndex | None = None) -> list[onnx.ValueInfoProto]:
    """`typed` as onnx's next pass is given them: a rotary slice's `Min(n, s)` written `s`
    where an Add, Sub, Mul or Div reads the slice. A table cut to the sequence and applied to
    the sequence without positions gathered from it (a hand-written rotary embedding: `x *
    cos[:seq]`) broadcasts `Min(n, s)` against `s`: the model runs only where the two are
    equal, which onnx cannot know, so it types the product, and all that follows (a decoder's
    every later layer), unknown. onnxruntime's rules merge the two into `s` at the broadcast,
    the slice included; typed `s`, onnx follows it in the same pass. A slice read otherwise
    (an exporter's `cos[:seq][positions]`) keeps `Min(n, s)`. `index`: `graph`'s, where the
    caller has it: the readers of the slices alone are looked at."""
    result = []
    broadcast: Callable[[str], bool] | None = None  # made for the first slice named so
    for info in typed:
        dims = info.type.tensor_type.shape.dim
        if any(_min_symbol(d.dim_param) for d in dims):
            if broadcast is None:
                broadcast = _broadcast_readers(graph, index)
            if broadcast(info.name):
                info = _copy(info)
                for dim in info.type.tensor_type.shape.dim:
                    symbol = _min_symbol(dim.dim_param)
                    if symbol:
                        dim.dim_param = symbol
        result.append(info)
    return result


def _broadcast_readers(graph: onnx.GraphProto,
                       index: GraphIndex | None) -> Callable[[str], bool]:
    """Whether an Add, Sub, Mul or Div of `graph` reads a value: through `index`'s readers
    where given, else from the set of every such node's inputs (a walk over the nodes)."""
    if index is None:
        read = {name for node in graph.node if _broadcasts(node) for name in node.input}
        return read.__contains__
    consumers, nodes = index.consumers, graph.node
    return lambda name: any(_broadcasts(nodes[p]) for p in consumers.get(name, ()))


def _broadcasts(node: onnx.NodeProto) -> bool:
    return node.op_type in _BROADCASTING and node.domain in ("", "ai.onnx")


def _min_symbol(name: str) -> str | None:
    """`s` for `Min(n, s)` (SeqDims.slice_dim's name), else None."""
    if not name.startswith("Min("):
        return None
    literal, comma, rest = name[len("Min("):].partition(", ")
    return rest[:-1] if comma and literal.isdigit() and rest.endswith(")") else None


def _copy(info: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(info)
    return copy


def is_expression(dim: onnx.TensorShapeProto.Dimension) -> bool:
    """A dim named by an expression (`Min(n, s)` above), not by a symbol."""
    return dim.WhichOneof("value") == "dim_param" and not dim.dim_param.isidentifier()


def _shape_range(node: onnx.NodeProto) -> tuple[int, int | None]:
    """Shape's `start` and `end` attributes (opset 15): the dims it gives, x.shape[start:end]."""
    start, end = 0, None
    for attribute in node.attribute:
        if attribute.name == "start":
            start = attribute.i
        elif attribute.name == "end":
            end = attribute.i
    return start, end


def _slices_one(node: onnx.NodeProto, constant: Callable[[str], list[int] | None]) -> bool:
    """Slice(v, [i], [i + 1]) of a vector, axes [0] and steps [1] where given: element i as a
    one-element vector (i >= 0)."""
    if len(node.input) < 3:
        return False
    starts, ends = constant(node.input[1]), constant(node.input[2])
    optional = [constant(name) for name in node.input[3:5] if name]
    return (starts is not None and ends is not None and starts[0] >= 0
            and ends[0] == starts[0] + 1 and all(value == [0] if i == 0 else value == [1]
                                                 for i, value in enumerate(optional)))


def _casts_to_integer(node: onnx.NodeProto) -> bool:
    return any(a.name == "to" and a.i in _INTEGER_TYPES for a in node.attribute)


def kept_dims(source: onnx.ValueInfoProto, axes: list[int]) -> onnx.ValueInfoProto | None:
    """`source`'s type with the dims on `axes` cleared: what a Slice along them keeps. A dim
    onnx's first pass did not know (`unk__N`) is left unset too: written down, that name would
    stand in the next pass for the dim it may then know (a later layer of a decoder)."""
    tensor_type = source.type.tensor_type
    if source.type.WhichOneof("value") != "tensor_type" or not tensor_type.HasField("shape"):
        return None
    rank = len(tensor_type.shape.dim)
    sliced = {a + rank if a < 0 else a for a in axes}
    if len(sliced) != len(axes) or not all(0 <= a < rank for a in sliced):
        return None  # a repeated or out-of-range axis: a broken model, left to the engines
    kept = onnx.ValueInfoProto()
    kept.type.tensor_type.elem_type = tensor_type.elem_type
    shape = kept.type.tensor_type.shape
    for axis, dim in enumerate(tensor_type.shape.dim):
        copy = shape.dim.add()
        if axis not in sliced and dim_known(dim):
            copy.CopyFrom(dim)
    return kept
