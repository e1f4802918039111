"""Where a hostile ONNX file can hide bulk, and what it can declare without holding it (issue 26,
cause 10 and item 4): one builder per carrier, shared by tests/test_hostile_carriers.py and
benchmarks/hostile_scaling.py.

- *Bulk* (`SPARSE_CARRIERS`): a model whose one bulky field (a Constant's `value`,
  `value_floats`, `value_ints` or `value_strings`, a tensor attribute of another op, a
  Constant in an If body or in a local function, a training_info initializer) is `length`
  zero bytes written as a hole: a 2 GB file takes a few KB of disk. Each builder makes the
  model with a short marker in the bulky field; `write_sparse` grows that field to `length`
  bytes, re-encoding the length of every message around it.
- *Declared* (`DECLARED`): a few-hundred-byte model whose values of `elements` elements
  (10**12: 4 TB of floats) exist only as shapes: ConstantOfShape, Expand, Range, Tile, Resize, a
  sparse initializer or Constant `sparse_value` (densified by onnxruntime), a graph input.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphmem.frontends.onnx.lean_read import _read_varint
from tests.hostile_models import _cond, _varint, info, model

# 16 bytes that occur nowhere else in a small model; as float32 they are 4 numbers
MARKER = b"\x7fHOSTILE-BULK!!\x7f"
_MARKER_FLOATS = np.frombuffer(MARKER, np.float32).tolist()
_MARKER_INTS = [2**62 + 7919, 2**62 + 104729]
_FLOATS, _INTS = 7, 8  # AttributeProto.floats, .ints: proto2 writes them one field a number
# the marker numbers as written unpacked, and the head of the packed field a hole continues
_FLOATS_WRITTEN = b"".join(_varint(_FLOATS << 3 | 5) + np.float32(v).tobytes()
                           for v in _MARKER_FLOATS)
_INTS_WRITTEN = b"".join(_varint(_INTS << 3) + _varint(v) for v in _MARKER_INTS)
_FLOAT_DATA, _INT64_DATA = 4, 7  # TensorProto.float_data, .int64_data: packed as written
_FLOAT_DATA_WRITTEN = _varint(_FLOAT_DATA << 3 | 2) + _varint(len(MARKER)) + MARKER
_INT64_DATA_WRITTEN = _varint(_INT64_DATA << 3 | 2) + _varint(
    len(MARKER_INTS_BYTES := b"".join(_varint(v) for v in _MARKER_INTS))) + MARKER_INTS_BYTES


# ----- writing a field as a hole -----------------------------------------------------------------
def write_sparse(path: Path, built: onnx.ModelProto, length: int, span: bytes = MARKER,
                 packed: int | None = None) -> None:
    """`built` written to `path` with the bytes `span` (exactly once in its serialization: a
    field's whole value, or whole fields) replaced by `length` zero bytes, left as a hole in
    the file: the value of a bytes field, or (`packed`: the field number) a packed repeated
    field of numbers (protobuf reads packed and unpacked alike), every enclosing message's
    length re-encoded."""
    data = built.SerializeToString()
    at = data.find(span)
    if at < 0 or data.find(span, at + 1) >= 0:
        raise ValueError("the span must occur exactly once")
    head = b"" if packed is None else _varint(packed << 3 | 2) + _varint(length)
    head, hole, tail = _spliced(data, at, len(span), (head, length, b""))
    with path.open("wb") as file:
        file.write(head)
        file.seek(hole, 1)
        file.write(tail)
        file.truncate()


Pieces = tuple[bytes, int, bytes]  # bytes, a hole of that many zero bytes, bytes


def _spliced(data: bytes, at: int, old: int, new: Pieces) -> Pieces:
    """The message `data` with data[at:at + old] (whole fields of it or of a message nested
    in it, or the whole value of one of its fields) replaced by `new`."""
    if at == 0 and old == len(data):
        return new
    position = 0
    while position < len(data):
        if position == at:
            return data[:at] + new[0], new[1], new[2] + data[at + old:]
        key, position = _read_varint(data, position)
        wire = key & 7
        if wire == 0:
            position = _read_varint(data, position)[1]
        elif wire in (1, 5):
            position += 8 if wire == 1 else 4
        else:
            length, value_start = _read_varint(data, position)
            end = value_start + length
            if value_start <= at and at + old <= end:  # inside this field: splice there
                head, hole, tail = _spliced(data[value_start:end], at - value_start, old, new)
                size = len(head) + hole + len(tail)
                return data[:position] + _varint(size) + head, hole, tail + data[end:]
            position = end
    raise ValueError("the span is not whole fields of a message")


# ----- bulk: one field of `length` bytes ---------------------------------------------------------
def _marker_tensor(name: str = "") -> TensorProto:
    """A float tensor whose raw_data is the marker, its dims left for the caller (the hole's
    size / 4)."""
    return helper.make_tensor(name, TensorProto.FLOAT, [len(MARKER) // 4], MARKER, raw=True)


def _with_dims(tensor: TensorProto, length: int) -> TensorProto:
    del tensor.dims[:]
    tensor.dims.append(length // 4)
    return tensor


def _constant_graph(constant: onnx.NodeProto) -> onnx.ModelProto:
    """y = Relu(x); s = Shape(w) of the bulky constant w: the constant is a value of the graph."""
    nodes = [constant, helper.make_node("Shape", ["w"], ["s"]),
             helper.make_node("Relu", ["x"], ["y"])]
    return model(nodes, [info("x")], [info("y", None), info("s", None, TensorProto.INT64)])


def constant_value(length: int) -> onnx.ModelProto:
    value = _with_dims(_marker_tensor(), length)
    return _constant_graph(helper.make_node("Constant", [], ["w"], value=value))


def constant_floats(length: int) -> onnx.ModelProto:
    del length  # written packed by write_sparse: `length` / 4 zeros
    return _constant_graph(helper.make_node("Constant", [], ["w"], value_floats=_MARKER_FLOATS))


def constant_ints(length: int) -> onnx.ModelProto:
    del length  # written packed by write_sparse: every zero byte is one 0
    return _constant_graph(helper.make_node("Constant", [], ["w"], value_ints=_MARKER_INTS))


def constant_strings(length: int) -> onnx.ModelProto:
    del length  # grown by write_sparse: one string of `length` zero bytes
    return _constant_graph(helper.make_node("Constant", [], ["w"], value_strings=[MARKER]))


def tensor_attribute(length: int) -> onnx.ModelProto:
    """A ConstantOfShape whose `value` attribute (one element, says the standard) is the bulk."""
    shape = numpy_helper.from_array(np.array([2], np.int64), "shape")
    value = _with_dims(_marker_tensor(), length)
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["w"], value=value),
             helper.make_node("Add", ["x", "w"], ["y"])]
    return model(nodes, [info("x", ("batch", 2))], [info("y", None)], [shape])


def body_constant(length: int) -> onnx.ModelProto:
    """An If whose branch holds the bulky Constant."""
    value = _with_dims(_marker_tensor(), length)
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["w"], value=value),
         helper.make_node("Shape", ["w"], ["t"])], "branch", [],
        [info("t", None, TensorProto.INT64)])
    other = helper.make_graph([helper.make_node("Shape", ["x"], ["t2"])], "other", [],
                              [info("t2", None, TensorProto.INT64)])
    nodes = [helper.make_node("If", ["cond"], ["s"], then_branch=branch, else_branch=other),
             helper.make_node("Relu", ["x"], ["y"])]
    return model(nodes, [info("x"), _cond()],
                 [info("y", None), info("s", None, TensorProto.INT64)])


def function_constant(length: int) -> onnx.ModelProto:
    """A local function whose body holds the bulky Constant, called once."""
    value = _with_dims(_marker_tensor(), length)
    function = helper.make_function(
        "local", "Bulky", ["a"], ["b"],
        [helper.make_node("Constant", [], ["w"], value=value),
         helper.make_node("Shape", ["w"], ["n"]),
         helper.make_node("Cast", ["n"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("ReduceSum", ["f"], ["r"], keepdims=0),
         helper.make_node("Add", ["a", "r"], ["b"])],
        [helper.make_opsetid("", 17)])
    call = helper.make_node("Bulky", ["x"], ["y"], domain="local")
    return model([call], [info("x")], [info("y", None)], functions=[function])


def training_initializer(length: int) -> onnx.ModelProto:
    """A training_info whose initialization graph holds the bulky initializer."""
    built = model([helper.make_node("Relu", ["x"], ["y"])], [info("x")], [info("y", None)])
    weight = _with_dims(_marker_tensor("w_init"), length)
    initialization = helper.make_graph([], "init", [], [], initializer=[weight])
    training = built.training_info.add()
    training.initialization.CopyFrom(initialization)
    training.algorithm.CopyFrom(helper.make_graph([], "algorithm", [], []))
    return built


def typed_initializer(length: int, dtype: int = TensorProto.INT64) -> onnx.ModelProto:
    """An initializer whose data is a typed field (int64_data: a number a byte of the hole),
    not raw_data."""
    weight = TensorProto(name="w", data_type=dtype)
    if dtype == TensorProto.INT64:
        weight.dims.append(length)
        weight.int64_data.extend(_MARKER_INTS)
    else:
        weight.dims.append(length // 4)
        weight.float_data.extend(_MARKER_FLOATS)
    nodes = [helper.make_node("Shape", ["w"], ["s"]), helper.make_node("Relu", ["x"], ["y"])]
    return model(nodes, [info("x")], [info("y", None), info("s", None, TensorProto.INT64)],
                 [weight])


def op_list_attribute(length: int) -> onnx.ModelProto:
    """An ai.onnx.ml LinearRegressor whose `coefficients` (floats) is the bulk: an op's list
    attribute, which graphmem reads (its cost is a function of the list's length)."""
    del length  # written packed by write_sparse: `length` / 4 floats
    node = helper.make_node("LinearRegressor", ["x"], ["y"], domain="ai.onnx.ml",
                            coefficients=_MARKER_FLOATS, targets=1)
    built = model([node], [info("x", ("batch", 4))], [info("y", None)])
    built.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    return built


def float_data_initializer(length: int) -> onnx.ModelProto:
    return typed_initializer(length, TensorProto.FLOAT)


# builder, the span its bulk replaces, and the packed field the hole is (None: a bytes value)
SPARSE_CARRIERS: dict[str, tuple[Callable[[int], onnx.ModelProto], bytes, int | None]] = {
    "constant-value": (constant_value, MARKER, None),
    "constant-value-floats": (constant_floats, _FLOATS_WRITTEN, _FLOATS),
    "constant-value-ints": (constant_ints, _INTS_WRITTEN, _INTS),
    "constant-value-strings": (constant_strings, MARKER, None),
    "tensor-attribute": (tensor_attribute, MARKER, None),
    "if-body-constant": (body_constant, MARKER, None),
    "function-constant": (function_constant, MARKER, None),
    "training-info-initializer": (training_initializer, MARKER, None),
    "initializer-int64-data": (typed_initializer, _INT64_DATA_WRITTEN, _INT64_DATA),
    "initializer-float-data": (float_data_initializer, _FLOAT_DATA_WRITTEN, _FLOAT_DATA),
    "op-list-attribute": (op_list_attribute, _FLOATS_WRITTEN, _FLOATS),
}
# how analyze ends for each (others: 0): more list entries than graphmem reads is refused
REFUSED = frozenset({"op-list-attribute"})


def write_carrier(path: Path, name: str, length: int) -> None:
    """The carrier `name`'s model, its bulk `length` zero bytes as a hole (divisible by 4)."""
    build, span, packed = SPARSE_CARRIERS[name]
    write_sparse(path, build(length), length, span, packed)


# ----- declared: shapes of `elements` elements, no values --------------------------------------
def _i64(name: str, values: list[int]) -> TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _reduced(nodes: list[onnx.NodeProto], initializers: list[TensorProto]) -> onnx.ModelProto:
    """y = x + sum(big): the declared value `big` is reduced to one number."""
    nodes = [*nodes, helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"])]
    return model(nodes, [info("x")], [info("y", None)], initializers)


def _two_dims(elements: int) -> list[int]:
    return [1000, max(elements // 1000, 1)]


def declared_expand(elements: int) -> onnx.ModelProto:
    one = numpy_helper.from_array(np.ones((1, 1), np.float32), "one")
    return _reduced([helper.make_node("Expand", ["one", "shape"], ["big"])],
                    [one, _i64("shape", _two_dims(elements))])


def declared_range(elements: int) -> onnx.ModelProto:
    ends = [numpy_helper.from_array(np.array(v, np.float32), n)
            for n, v in (("start", 0.0), ("limit", float(elements)), ("delta", 1.0))]
    return _reduced([helper.make_node("Range", ["start", "limit", "delta"], ["big"])], ends)


def declared_tile(elements: int) -> onnx.ModelProto:
    one = numpy_helper.from_array(np.ones((1, 1), np.float32), "one")
    return _reduced([helper.make_node("Tile", ["one", "repeats"], ["big"])],
                    [one, _i64("repeats", _two_dims(elements))])


def declared_resize(elements: int) -> onnx.ModelProto:
    one = numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "one")
    side = float(max(int(elements**0.5), 1))
    scales = numpy_helper.from_array(np.array([1, 1, side, side], np.float32), "scales")
    return _reduced([helper.make_node("Resize", ["one", "", "scales"], ["big"])],
                    [one, scales])


def declared_constant_of_shape(elements: int) -> onnx.ModelProto:
    return _reduced([helper.make_node("ConstantOfShape", ["shape"], ["big"])],
                    [_i64("shape", _two_dims(elements))])


def _sparse(elements: int) -> onnx.SparseTensorProto:
    """One nonzero float among `elements` (two dims)."""
    values = numpy_helper.from_array(np.ones(1, np.float32), "big")
    indices = numpy_helper.from_array(np.zeros(1, np.int64), "big_indices")
    return helper.make_sparse_tensor(values, indices, _two_dims(elements))


def declared_sparse_initializer(elements: int) -> onnx.ModelProto:
    built = _reduced([], [])
    built.graph.sparse_initializer.append(_sparse(elements))
    return built


def declared_sparse_constant(elements: int) -> onnx.ModelProto:
    return _reduced([helper.make_node("Constant", [], ["big"], sparse_value=_sparse(elements))],
                    [])


def declared_input(elements: int) -> onnx.ModelProto:
    """A graph input of `batch` x `elements` floats, reduced to one number."""
    nodes = [helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0)]
    return model(nodes, [info("big", ("batch", *_two_dims(elements)))], [info("s", None)])


DECLARED: dict[str, Callable[[int], onnx.ModelProto]] = {
    "constant-of-shape": declared_constant_of_shape,
    "expand": declared_expand,
    "range": declared_range,
    "tile": declared_tile,
    "resize": declared_resize,
    "sparse-initializer": declared_sparse_initializer,
    "sparse-constant": declared_sparse_constant,
    "input": declared_input,
}
