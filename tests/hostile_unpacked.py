"""Bulk written as millions of small fields, on disk for real (issue 26, cause 10): protobuf
reads a repeated number written one field a number ("unpacked": a tag, then the number) as it
reads a packed one, and proto2 writes an attribute's `floats`/`ints`/`strings` so, so a model
can hold 40 million two-byte fields in 80 MB. One builder per place such a run can be, shared
by tests/test_hostile_unpacked.py and benchmarks/hostile_scaling.py (`--unpacked`).

Each model is built with a short marker where the run goes (tests/hostile_carriers.py's
builders), and `write_unpacked` replaces the marker with `count` fields of one tag, every
enclosing message's length re-encoded.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from tests import hostile_carriers as carriers
from tests.hostile_models import _varint, info, model

_ZERO32, _ZERO64 = bytes(4), bytes(8)


def _field(number: int, wire: int, value: bytes) -> bytes:
    return _varint(number << 3 | wire) + value


def _empty_nodes(count: int) -> onnx.ModelProto:
    del count
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="MARKER-NODE")]
    return model(nodes, [info("x")], [info("y", None)])


def _with_unknown(count: int) -> onnx.ModelProto:
    del count
    built = model([helper.make_node("Relu", ["x"], ["y"])], [info("x")], [info("y", None)])
    built.producer_name = carriers.MARKER.decode("latin-1")
    return built


def _tensor_dims(count: int) -> onnx.ModelProto:
    """An initializer whose `dims` is the run (a rank of `count`: refused once read)."""
    del count
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**62 + 7919])
    nodes = [helper.make_node("Shape", ["w"], ["s"]), helper.make_node("Relu", ["x"], ["y"])]
    return model(nodes, [info("x")], [info("y", None), info("s", None, TensorProto.INT64)],
                 [weight])


_MARKER_DIM = _field(1, 0, _varint(2**62 + 7919))
_NODE_FIELD = _field(1, 2, _varint(len(b := helper.make_node(
    "Relu", ["x"], ["y"], name="MARKER-NODE").SerializeToString())) + b)
_PRODUCER = _field(2, 2, _varint(len(carriers.MARKER)) + carriers.MARKER)

# name: (builder of `count`, the span the run replaces, one field of the run, what analyze
# does: 0 or 2). The builders take the count in the unit of their carrier (bytes of float
# data for float_data_initializer, entries for typed_initializer).
UNPACKED: dict[str, tuple[Callable[[int], onnx.ModelProto], bytes, bytes, int, int]] = {
    # initializer int64_data, one varint field a number: 2 bytes each
    "initializer-int64-data": (carriers.typed_initializer, carriers._INT64_DATA_WRITTEN,
                               _field(7, 0, b"\x00"), 1, 0),
    # initializer float_data, one fixed32 field a number: 5 bytes each
    "initializer-float-data": (carriers.float_data_initializer,
                               carriers._FLOAT_DATA_WRITTEN, _field(4, 5, _ZERO32), 4, 0),
    # initializer double_data: 9 bytes each
    "initializer-double-data": (lambda n: _typed(n, TensorProto.DOUBLE),
                                _field(10, 2, _varint(8) + _ZERO64), _field(10, 1, _ZERO64),
                                1, 0),
    # a Constant's value_ints / value_floats / value_strings, as proto2 writes them
    "constant-value-ints": (carriers.constant_ints, carriers._INTS_WRITTEN,
                            _field(8, 0, b"\x00"), 1, 0),
    "constant-value-floats": (carriers.constant_floats, carriers._FLOATS_WRITTEN,
                              _field(7, 5, _ZERO32), 1, 0),
    "constant-value-strings": (carriers.constant_strings, _field(9, 2, _varint(16))
                               + carriers.MARKER, _field(9, 2, b"\x00"), 1, 0),
    # an ai.onnx.ml op's list attribute: graphmem reads it, so it is refused past its bound
    "op-list-attribute": (carriers.op_list_attribute, carriers._FLOATS_WRITTEN,
                          _field(7, 5, _ZERO32), 1, 2),
    # structure, not data: empty nodes, a tensor's dims, a field ONNX does not define
    "empty-nodes": (_empty_nodes, _NODE_FIELD, _field(1, 2, b"\x00"), 1, 2),
    "tensor-dims": (_tensor_dims, _MARKER_DIM, _field(1, 0, b"\x00"), 1, 2),
    "unknown-field": (_with_unknown, _PRODUCER, _field(15, 0, b"\x00"), 1, 0),
}


def _typed(count: int, dtype: int) -> onnx.ModelProto:
    weight = TensorProto(name="w", data_type=dtype, dims=[count], double_data=[0.0])
    nodes = [helper.make_node("Shape", ["w"], ["s"]), helper.make_node("Relu", ["x"], ["y"])]
    return model(nodes, [info("x")], [info("y", None), info("s", None, TensorProto.INT64)],
                 [weight])


def write_unpacked(path: Path, name: str, count: int) -> int:
    """The model `name` with `count` fields of its run written to `path`; the file's size."""
    build, span, field, unit, _ = UNPACKED[name]
    data = build(count * unit).SerializeToString()
    at = data.find(span)
    if at < 0 or data.find(span, at + 1) >= 0:
        raise ValueError(f"{name}: the span must occur exactly once")
    head, _, tail = carriers._spliced(data, at, len(span), (b"", 0, field * count))
    with path.open("wb") as file:
        file.write(head)
        file.write(tail)
    return len(head) + len(tail)
