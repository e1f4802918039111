"""The tensor shapes onnxruntime's allocation planner sees, read from an ONNX file.

onnxruntime plans buffer reuse once, when the session is created, from the shapes its own
graph resolution infers: the file's `value_info` merged with onnx's per-op shape inference,
with the graph inputs' dims as the file spells them (`batch`, or unnamed), and data
propagation only from a Shape of numeric dims read directly (`_shapes_through_shape_ops`).
Its planner reuses a buffer only where two such shapes are equal dim by dim: the same
number, or the same named dim_param (`SameShape` in
onnxruntime/core/framework/allocation_planner.cc). graphmem's own shapes are sharper
(symbolic inference, data propagation), so they cannot stand in for these.

A plan shape is a tuple of dims: an int (a known size), a str (a named dim_param), or None
(a dim nobody named: never equal to anything). None for the whole shape: rank unknown.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from graphmem.core.ort_view import PlanShape
from graphmem.frontends.onnx.importer import read_model
from graphmem.frontends.onnx.plan_layers import layered_shapes


def ort_plan_shapes(source: str | Path | onnx.ModelProto) -> dict[str, PlanShape | None]:
    """The shape onnxruntime's planner sees of each graph input and output and each tensor a
    node makes, by value name. `source`: the model as read_model returns it (external data cut
    off), or its path, read the same way (only the model file itself is opened).
    The initializers' own dims are not read (an initializer the file also declares keeps
    that declaration's shape, others have no entry): the planner never places nor reuses
    them (their buffers are the session's), so no plan reads their shapes (a decoder's
    11,531 were 8 ms to read)."""
    model = source if isinstance(source, onnx.ModelProto) else read_model(Path(source))
    return _shapes_through_shape_ops(model, _dim_params(model.graph))


def _inferred_shapes(model: onnx.ModelProto, named: frozenset[str], data_prop: bool
                     ) -> dict[str, PlanShape | None]:
    return _read_shapes(_inferred_infos(model, data_prop), named)


def _shapes_and_types(model: onnx.ModelProto, named: frozenset[str]
                      ) -> tuple[dict[str, PlanShape | None],
                                 dict[str, onnx.ValueInfoProto]] | None:
    """The plan shapes onnx's inference (without data propagation) gives, and its types by
    name (plan_layers.py compares them); None where the inference fails (the whole model's
    answer is then the file's own value_info, which a cut model's does not show)."""
    inferred = _inference(model, False)
    if inferred is None:
        return None
    infos = _infos(inferred)
    return _read_shapes(infos, named), {info.name: info for info in infos}


def _inferred_infos(model: onnx.ModelProto, data_prop: bool) -> list[onnx.ValueInfoProto]:
    # where the inference fails, the file's own value_info is all there is
    return _infos(_inference(model, data_prop) or model)


def _inference(model: onnx.ModelProto, data_prop: bool) -> onnx.ModelProto | None:
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=data_prop)
    except Exception:  # noqa: BLE001 - the callers say what stands in for it
        return None


def _infos(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    graph = model.graph
    return [*graph.input, *graph.value_info, *graph.output]


def _read_shapes(infos: Sequence[onnx.ValueInfoProto], named: frozenset[str]
                 ) -> dict[str, PlanShape | None]:
    shapes: dict[str, PlanShape | None] = {}
    # a decoder's layers repeat a few hundred types: each is read once, by its bytes
    by_type: dict[bytes, PlanShape | None] = {}
    # ... and those differing only in the names onnx makes up (`_generated_names_cut`)
    by_pattern: dict[bytes, PlanShape | None] | None = {}
    if any(_GENERATED in name.encode() for name in named):
        by_pattern = None  # the file names a dim as onnx would: read every type
    for info in infos:
        type_proto = info.type
        key = type_proto.SerializeToString()
        shape = by_type.get(key, _UNREAD)
        if shape is _UNREAD:
            shape = by_type[key] = _read_type(type_proto, key, named, by_pattern)
        shapes[info.name] = shape
    return shapes


_UNREAD = ("not read",)  # by_type's answer for a type not read yet (None: rank unknown)
_GENERATED = b"unk__"  # onnx's inference names each dim it cannot size `unk__N`, N counting
# a dim_param field (tag 0x12) holding such a name, its length byte that of the name, and no
# digit after it: the field alone (a digit after it would be another field's tag, `2`)
_GENERATED_FIELD = re.compile(
    rb"\x12(?:\x06unk__[0-9]|\x07unk__[0-9]{2}|\x08unk__[0-9]{3}|\x09unk__[0-9]{4}"
    rb"|\x0aunk__[0-9]{5}|\x0bunk__[0-9]{6}|\x0cunk__[0-9]{7})(?![0-9])")


def _read_type(type_proto: onnx.TypeProto, key: bytes, named: frozenset[str],
               by_pattern: dict[bytes, PlanShape | None] | None) -> PlanShape | None:
    """The plan shape of a type not read yet (its bytes `key`): read once per pattern of
    `_generated_names_cut`, where `by_pattern` is kept."""
    if by_pattern is None or _GENERATED not in key:
        return _plan_shape(type_proto, named)
    cut = _generated_names_cut(key)
    shape = by_pattern.get(cut, _UNREAD)
    if shape is _UNREAD:
        shape = by_pattern[cut] = _plan_shape(type_proto, named)
    return shape


def _generated_names_cut(key: bytes) -> bytes:
    """A type's bytes with each name onnx made up for a dim written `unk__`: the planner sees
    none of those names (onnxruntime leaves such dims unnamed: None, equal to nothing), so
    types equal but for them have the same plan shape. Only whole dim_param fields are cut
    (tag, the name's own length, the name), every other byte kept, lengths included: two
    types whose cut bytes are equal differ only in such names, of the same lengths."""
    return _GENERATED_FIELD.sub(b"\x12\x05unk__", key)


def _shapes_through_shape_ops(model: onnx.ModelProto, named: frozenset[str]
                              ) -> dict[str, PlanShape | None]:
    """onnx's inference without data propagation, except that a Shape whose input's dims are
    all numbers is read as those numbers, as onnxruntime 1.31 does while it resolves the graph
    (measured: its planner knows Reshape(x, Shape(z)), not a target a Gather, Slice or Concat
    makes of a Shape and a constant: those values do not propagate). Each round turns such
    Shapes into constants and infers again, for the Shapes whose input that made known.
    A graph of repeated layers is inferred for its first layers only (plan_layers.py)."""
    shapes = layered_shapes(model, named, lambda cut: _shapes_and_types(cut, named))
    if shapes is None:
        shapes = _inferred_shapes(model, named, data_prop=False)
    shape_nodes = [node for node in model.graph.node if node.op_type == "Shape"]
    if not shape_nodes:  # nothing to read as numbers (10^5 Adds): no rounds, no readers
        return shapes
    readers: dict[str, list[onnx.NodeProto]] | None = None
    done: dict[str, list[int]] = {}
    for _ in range(SHAPE_ROUNDS):
        known = [(node.output[0], dims) for node in shape_nodes
                 if node.output and node.output[0] not in done
                 and (dims := _shape_value(node, shapes)) is not None]
        if not known:  # no Shape of numeric dims (a decoder's dims are named): no readers
            break
        readers = readers if readers is not None else _readers(model.graph)
        found = {name: dims for name, dims in known
                 if _feeds_an_unknown(readers.get(name, []), shapes)}
        if not found:
            break
        done |= found
        shapes = _inferred_shapes(_with_shapes_as_constants(model, done), named, False)
    return shapes


SHAPE_ROUNDS = 8  # Shape -> Reshape -> Shape... chains: one round per link


def _readers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """The nodes reading each value, by name (a walk over every node's inputs: 0.03 s at
    22,000 nodes, made only where a Shape's value is known)."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers


def _shape_value(node: onnx.NodeProto, shapes: dict[str, PlanShape | None]) -> list[int] | None:
    """The value of a Shape node (its start and end applied) when its input's dims are all
    numbers; None otherwise."""
    if node.op_type != "Shape" or node.domain not in ("", "ai.onnx") or not node.input:
        return None
    shape = shapes.get(node.input[0])
    dims = [d for d in shape if isinstance(d, int)] if shape is not None else []
    if shape is None or len(dims) != len(shape):
        return None
    attrs = {a.name: a.i for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", len(dims))
    return dims[start:end]  # negative bounds count from the rank


def _feeds_an_unknown(readers: list[onnx.NodeProto],
                      shapes: dict[str, PlanShape | None]) -> bool:
    """Whether one of the nodes reading a value has an output with a dim not a number."""
    return any((shape := shapes.get(out)) is None or not all(isinstance(d, int) for d in shape)
               for node in readers for out in node.output)


def _with_shapes_as_constants(model: onnx.ModelProto, values: dict[str, list[int]]
                              ) -> onnx.ModelProto:
    """The model, each Shape output in `values` made a constant of that value; the initializers
    other than small integer ones as graph inputs of their type (inference reads no others)."""
    graph = model.graph
    nodes = [onnx.helper.make_node("Constant", [], [node.output[0]],
                                   value=onnx.numpy_helper.from_array(
                                       np.array(values[node.output[0]], np.int64)))
             if node.op_type == "Shape" and node.output and node.output[0] in values else node
             for node in graph.node]
    small = [t for t in graph.initializer if t.data_type in _INDEX_TYPES
             and _count(t.dims) <= SMALL_INTEGER_ELEMENTS]
    kept = {t.name for t in small}
    declared = {i.name for i in graph.input}
    inputs = [i for i in graph.input if i.name not in kept]
    inputs += [onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
               for t in graph.initializer if t.name not in kept and t.name not in declared]
    copy = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import,
                           functions=model.functions)
    copy.graph.CopyFrom(onnx.helper.make_graph(nodes, graph.name, inputs, graph.output,
                                               small, value_info=graph.value_info))
    return copy


_INDEX_TYPES = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
SMALL_INTEGER_ELEMENTS = 4096  # what inference reads: axes, targets, pads, all small


def _count(dims: Sequence[int]) -> int:
    total = 1
    for d in dims:
        total *= d
    return total


def _dim_params(graph: onnx.GraphProto) -> frozenset[str]:
    """The dim names the file spells; onnx's Python inference invents `unk__N` names for
    dims it cannot name, where onnxruntime's leaves them unnamed."""
    names = set()
    seen: set[bytes] = set()  # each distinct type read once, by its bytes (one C call)
    for info in [*graph.input, *graph.value_info, *graph.output]:
        type_proto = info.type
        key = type_proto.SerializeToString()
        if key not in seen:
            seen.add(key)
            if type_proto.HasField("tensor_type"):
                names |= {d.dim_param for d in type_proto.tensor_type.shape.dim if d.dim_param}
    return frozenset(names)


def _plan_shape(type_proto: onnx.TypeProto, named: frozenset[str]) -> PlanShape | None:
    if not type_proto.HasField("tensor_type"):
        return None
    tensor_type = type_proto.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return tuple(_plan_dim(d, named) for d in tensor_type.shape.dim)


def _plan_dim(dim: onnx.TensorShapeProto.Dimension, named: frozenset[str]) -> int | str | None:
    if dim.HasField("dim_value"):
        return int(dim.dim_value)
    return dim.dim_param if dim.dim_param in named else None
