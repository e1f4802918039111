"""What onnx's shape inference knows of a value's type: every dim (a number, or a dim name
the model declares: `unk__N` is onnx's name for a size it could not infer), how many dims, and
whether the tensor is small enough to be a shape vector or a scalar."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

import onnx
from onnx import TensorProto, helper, numpy_helper

# A tensor with at most this many elements may be a shape vector or a scalar whose value
# onnxruntime's rules read (fold.py's bound for the same tensors).
MAX_VALUE_ELEMENTS = 64
# onnxruntime's symbolic rules name a dim they cannot compute after the node and output
# (`AffineGrid_0_o0__d1`: symbolic_shape_infer.py `_new_symbolic_dim_from_output`), for an op
# they have no rule for or a data-dependent size: a placeholder, as onnx's `unk__N` is
ORT_INVENTED_DIM = re.compile(r"_o\d+__d\d+$")


def fully_known_names(infos: Iterable[onnx.ValueInfoProto]) -> set[str]:
    """The names of `infos` that are fully_known, each distinct type judged once (a
    decoder's layers repeat a few hundred types)."""
    return judged_infos(infos).known


class JudgedInfos(NamedTuple):
    """What one walk over value infos finds: the fully known names (fully_known_names), each
    name's type as its bytes (the last info of a name wins) and each distinct type, first
    seen, by its bytes: what build.py's `type_keys` reads of the same infos."""

    known: set[str]
    keys: dict[str, bytes]
    types: dict[bytes, onnx.TypeProto]


def judged_infos(infos: Iterable[onnx.ValueInfoProto]) -> JudgedInfos:
    """fully_known_names, and the infos' type keys with it (JudgedInfos): each type is
    serialized once for both (22,336 value infos of a decoder: about 0.012 CPU s a walk)."""
    # KnownTypes inlined: a call and a lookup per value were 0.04 of 0.05 CPU s over a
    # decoder's 22,336 value infos (23 distinct types); the key is the same type's bytes
    verdicts: dict[bytes, bool] = {}
    names: set[str] = set()
    keys: dict[str, bytes] = {}
    types: dict[bytes, onnx.TypeProto] = {}
    for info in infos:
        type_proto, name = info.type, info.name  # each read once (a new string a read)
        key = keys[name] = type_proto.SerializeToString()
        verdict = verdicts.get(key)
        if verdict is None:
            verdict = verdicts[key] = fully_known(info)
            types[key] = type_proto
        if verdict:
            names.add(name)
    return JudgedInfos(names, keys, types)


class KnownTypes:
    """fully_known, each distinct type judged once (by its bytes): the second pass's rules ask
    of the same few hundred types thousands of times (each Reshape's input and output, each
    Slice's output, on both passes)."""

    def __init__(self) -> None:
        self._verdicts: dict[bytes, bool] = {}

    def __call__(self, info: onnx.ValueInfoProto | None) -> bool:
        if info is None:
            return False
        key = info.type.SerializeToString()
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdicts[key] = fully_known(info)
        return verdict


def fully_known(info: onnx.ValueInfoProto | None) -> bool:
    """A tensor of known rank with every dim known (dim_known, inlined: the reshapes' rules
    judge thousands of distinct types a decoder, and a call per dim was a quarter of it)."""
    if info is None:
        return False
    type_proto = info.type
    if type_proto.WhichOneof("value") != "tensor_type":
        return False
    tensor_type = type_proto.tensor_type
    if not tensor_type.HasField("shape"):
        return False
    for dim in tensor_type.shape.dim:
        kind = dim.WhichOneof("value")
        if kind != "dim_value" and (kind != "dim_param" or dim.dim_param.startswith("unk__")):
            return False
    return True


def dim_known(dim: onnx.TensorShapeProto.Dimension) -> bool:
    """A number, or a name other than onnx's `unk__N` for a size it could not infer."""
    kind = dim.WhichOneof("value")
    return kind == "dim_value" or (kind == "dim_param" and not dim.dim_param.startswith("unk__"))


def small_value(info: onnx.ValueInfoProto | None) -> bool:
    """A tensor small enough to be a shape vector or a scalar (rules may read its value);
    unknown shapes count as small (the tensor's producer is in the part anyway)."""
    if info is None or info.type.WhichOneof("value") != "tensor_type":
        return True
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return True
    count = 1
    for dim in tensor_type.shape.dim:
        if dim.WhichOneof("value") != "dim_value":
            return False
        count *= dim.dim_value
    return count <= MAX_VALUE_ELEMENTS


def initializer_types(initializers: Mapping[str, onnx.TensorProto],
                      names: set[str]) -> dict[str, onnx.ValueInfoProto]:
    """The types of the initializers named in `names` (`initializers`: a graph's by name):
    onnx's inference writes no value info for an initializer (a table written as one, not as
    a Constant node)."""
    found = [initializers[name] for name in names if name in initializers]
    return {t.name: onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
            for t in found}


def known_dims(info: onnx.ValueInfoProto) -> int:
    """How much of a shape is known: -1 without a rank, else the count of known dims."""
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return -1
    return sum(
        1 for d in tensor_type.shape.dim
        if d.HasField("dim_value") or (d.dim_param and not d.dim_param.startswith("unk__")
                                       and not ORT_INVENTED_DIM.search(d.dim_param))
    )


# Attributes whose default onnx's inference reads otherwise than the spec and its reference
# runtime: STFT's `onesided` is 1 by default (a real signal's spectrum of n points has
# n/2 + 1 bins), onnx 1.23's rule takes 0 and doubles the output. Written out, the value is
# the same and both engines size the output right.
_MISREAD_DEFAULTS: dict[str, tuple[str, int]] = {"STFT": ("onesided", 1)}
MISREAD_OPS = frozenset(_MISREAD_DEFAULTS)


def write_misread_defaults(graph: onnx.GraphProto) -> None:
    for node in graph.node:
        default = _MISREAD_DEFAULTS.get(node.op_type)
        if default is None or node.domain not in ("", "ai.onnx"):
            continue
        if all(a.name != default[0] for a in node.attribute):
            node.attribute.append(onnx.helper.make_attribute(*default))


def typed_by_onnx(graph: onnx.GraphProto, declared_inputs: Iterable[onnx.ValueInfoProto],
                  made: set[str] | None = None,
                  known_infos: set[str] | None = None) -> bool:
    """True when onnx's inference left onnxruntime's rules nothing to add: every node's outputs
    fully known, and every graph output's dims numbers or the declared inputs' dim names. The
    rules would then run on the outputs' producers alone (infer.py `unknown_part`), from the
    same input types, and write the same types; their module (and sympy) need not load.
    `made`: the names `graph`'s nodes other than Constant nodes make, where the caller has
    them (graph_index.py), else read from the nodes. `known_infos`:
    `fully_known_names(graph.value_info)` where the caller has it (infer.py: unknown_part
    reads it too)."""
    declared: set[str] = set()
    read: set[bytes] = set()  # the inputs' distinct types (10^5 inputs: a few types)
    for value in declared_inputs:
        key = value.type.SerializeToString()
        if key not in read:
            read.add(key)
            declared.update(d.dim_param for d in value.type.tensor_type.shape.dim
                            if d.WhichOneof("value") == "dim_param")
    judged: set[bytes] = set()  # the outputs' distinct types (10^5 outputs: a few types)
    known: set[str] = set()  # an output judged here is fully known: one walk over them
    for output in graph.output:
        key = output.type.SerializeToString()
        if key not in judged:
            if not fully_known(output) or any(
                    d.WhichOneof("value") != "dim_value" and d.dim_param not in declared
                    for d in output.type.tensor_type.shape.dim):
                return False
            judged.add(key)
        known.add(output.name)
    known |= fully_known_names(graph.value_info) if known_infos is None else known_infos
    if made is not None:
        return known.issuperset(made)
    walked: list[str] = []
    for node in graph.node:
        if node.op_type != "Constant":
            walked.extend(node.output)
    return known.issuperset(name for name in walked if name)


def int_values(tensor: onnx.TensorProto) -> list[int] | None:
    """`[int(v) for v in numpy_helper.to_array(tensor).flat]` for an inline int64 or int32
    tensor; None where its data is of the wrong size (to_array's ValueError). Remembered by
    the fields to_array reads of such a tensor (type, dims, raw or typed data; the name is
    not one of them): a decoder's slices and reshapes read the same few constants, each under
    its own name, once a layer (about 10 us a decode)."""
    if tensor.data_type not in _DECODED_TYPES or tensor.HasField("segment") \
            or tensor.data_location == TensorProto.EXTERNAL:
        return _decoded(tensor)
    key = (tensor.data_type, tuple(tensor.dims), tensor.HasField("raw_data"), tensor.raw_data,
           tuple(tensor.int64_data), tuple(tensor.int32_data))
    if key not in _INT_VALUES:
        if len(_INT_VALUES) >= _MAX_INT_VALUES:
            _INT_VALUES.clear()
        _INT_VALUES[key] = _decoded(tensor)
    values = _INT_VALUES[key]
    return None if values is None else list(values)


def _decoded(tensor: onnx.TensorProto) -> list[int] | None:
    try:
        return [int(v) for v in numpy_helper.to_array(tensor).flat]
    except ValueError:  # data of the wrong size: the engines will say so
        return None


_DECODED_TYPES = frozenset({TensorProto.INT64, TensorProto.INT32})
_INT_VALUES: dict[tuple[object, ...], list[int] | None] = {}
_MAX_INT_VALUES = 4096


def constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor of a Constant node (`value`, or `value_int(s)`, `value_float(s)` as the
    spec defines them: onnxruntime's rule reads `value` alone, and a dynamo export's slice
    bounds are `value_ints`), else None."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return None
    if len(node.attribute) != 1:
        return None
    attribute = node.attribute[0]
    if attribute.name == "value":
        return attribute.t
    kind = _LISTED_CONSTANTS.get(attribute.name)
    if kind is None:
        return None
    values = helper.get_attribute_value(attribute)
    return helper.make_tensor("", kind, [len(values)] if isinstance(values, list) else [],
                              values if isinstance(values, list) else [values])


# Constant's list and scalar attributes: an int64 or float tensor, 1-D for a list
_LISTED_CONSTANTS = {"value_int": TensorProto.INT64, "value_ints": TensorProto.INT64,
                     "value_float": TensorProto.FLOAT, "value_floats": TensorProto.FLOAT}
