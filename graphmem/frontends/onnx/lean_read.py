"""A large ONNX file's bytes without its bulk, read from a memory map.

An ONNX file with its weights inside is mostly the `raw_data` of the main graph's
initializers, which graphmem never reads (read.py drops every payload above 64 KiB after
parsing). Reading the file and parsing it holds the weights twice (the bytes, then the parsed
copy): a 343 MB ViT-B/16 took 1.8 GB of RAM. A hostile file puts its bulk elsewhere, where
each copy the importer makes copies it again (a 1.9 GB doc string took 13.7 GB). Here the
protobuf wire format is walked on a memory map instead, by ONNX's own schema, into every
field above KEEP_BYTES (ModelProto.graph -> GraphProto.node -> NodeProto.attribute ->
AttributeProto.g -> ... , functions too), and the bytes handed to protobuf are the file less
the bulk: a tensor's `raw_data` (initializers of the main graph and of bodies, Constant values,
tensor attributes), doc strings and fields ONNX does not define. The pages left out are never
touched, so they never count in the process's memory.

Only what read.py would drop is left out, and only when nothing is lost by leaving it out: a
tensor whose `raw_data` is above KEEP_BYTES, holding no typed data besides, with exactly the
bytes its dims and dtype need (or external data, which is cut off anyway). Any other tensor
keeps its bytes, so validate_graph (untrusted.py) judges it as before; any wire-format
surprise returns None and read.py parses the file whole, as before.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError
from onnx import ModelProto, TensorProto
from onnx.external_data_helper import uses_external_data

from graphmem.frontends.onnx.untrusted import check_regular_file

if TYPE_CHECKING:  # protobuf's C implementation (upb) has its own descriptor classes
    from google._upb._message import Descriptor as UpbDescriptor

# a message's descriptor, from the pure-Python protobuf or from upb
MessageDescriptor: TypeAlias = "Descriptor | UpbDescriptor"

KEEP_BYTES = 64 * 1024  # read.py's _KEEP_INITIALIZER_BYTES: larger payloads are dropped
_TENSOR_RAW_DATA, _TENSOR_DATA_LOCATION = 9, 14
# fields read before giving up (the file is then parsed whole): a 70B decoder's walk reads
# about 10**5, forty million two-byte fields in one node would take a minute of Python
MAX_WALKED_FIELDS = 2_000_000
_TYPED_DATA_FIELDS = frozenset({4, 5, 6, 7, 10, 11})  # float, int32, string, int64, double, uint64
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
# bytes per element of the dtypes weights are stored in; any other dtype keeps its bytes
_ITEM_BYTES: dict[int, int] = {
    TensorProto.FLOAT: 4, TensorProto.FLOAT16: 2, TensorProto.BFLOAT16: 2,
    TensorProto.DOUBLE: 8, TensorProto.INT8: 1, TensorProto.UINT8: 1, TensorProto.INT16: 2,
    TensorProto.UINT16: 2, TensorProto.INT32: 4, TensorProto.UINT32: 4, TensorProto.INT64: 8,
    TensorProto.UINT64: 8, TensorProto.BOOL: 1,
}


class _WireError(ValueError):
    """Not the wire format this reader follows: the caller parses the file whole."""


def read_lean_model_bytes(path: Path, keep_tensors: bool = False) -> bytes | None:
    """The model file's bytes less its bulk (with `keep_tensors`, doc strings and unknown
    fields only: verify runs the weights), or None where this reader does not apply (then
    read the file whole)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(descriptor, "rb") as file:
        check_regular_file(path, os.fstat(file.fileno()))
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as view:
            try:
                return b"".join(_Walk(view, keep_tensors).message(ModelProto.DESCRIPTOR, 0,
                                                                  len(view))[0])
            except (_WireError, IndexError, DecodeError):
                return None


class _Walk:
    """The message's fields in order, every unknown field left out and each large field
    (above KEEP_BYTES) looked into: a doc string left out, a tensor's raw_data left out
    (`_lean_tensor`), a message rebuilt from its own lean fields; the fields between copied
    as one piece. A small known field is copied whole: it cannot hold bulk. At most
    MAX_WALKED_FIELDS fields are read (beyond: the caller parses the file whole)."""

    def __init__(self, view: mmap.mmap, keep_tensors: bool) -> None:
        self.view = view
        self.keep_tensors = keep_tensors
        self.fields_left = MAX_WALKED_FIELDS

    def message(self, descriptor: MessageDescriptor, start: int, end: int
                ) -> tuple[list[bytes], bool]:
        """The message's lean pieces, and whether anything was left out."""
        view, pieces = self.view, []
        kept_from, changed = start, False
        for number, wire, field_start, value_start, field_end in _fields(view, start, end):
            self.fields_left -= 1
            if self.fields_left < 0:
                raise _WireError("too many fields to walk")
            known = number in descriptor.fields_by_number
            if known and field_end - value_start <= KEEP_BYTES:
                continue
            replacement = self._lean_field(descriptor, number, wire, value_start, field_end)
            if replacement is None:
                continue
            if kept_from < field_start:
                pieces.append(view[kept_from:field_start])
            if replacement:
                pieces.append(replacement)
            kept_from, changed = field_end, True
        pieces.append(view[kept_from:end])
        return pieces, changed

    def _lean_field(self, descriptor: MessageDescriptor, number: int, wire: int, start: int,
                    end: int) -> bytes | None:
        """A large field's replacement (b"": left out), or None: keep it as written."""
        field = descriptor.fields_by_number.get(number)
        if field is None or field.name == "doc_string":
            return b""  # unknown to ONNX, or prose: never read
        if (wire != _LENGTH or field.type != FieldDescriptor.TYPE_MESSAGE
                or field.message_type is None):
            return None
        if field.message_type is TensorProto.DESCRIPTOR:
            lean = None if self.keep_tensors else _lean_tensor(self.view, start, end)
            if lean is None:
                return None
        else:
            pieces, changed = self.message(field.message_type, start, end)
            if not changed:
                return None
            lean = b"".join(pieces)
        return _tag(number, _LENGTH) + _varint(len(lean)) + lean


def _lean_tensor(view: mmap.mmap, start: int, end: int) -> bytes | None:
    """The tensor's bytes without its raw_data, where leaving it out loses nothing (module
    docstring); None: keep the tensor as written."""
    rest: list[bytes] = []
    raw_bytes = None
    has_location = False
    for number, wire, field_start, value_start, field_end in _fields(view, start, end):
        if number in _TYPED_DATA_FIELDS:
            return None
        if number == _TENSOR_RAW_DATA:
            if wire != _LENGTH or raw_bytes is not None:  # protobuf's last-one-wins: keep
                return None
            raw_bytes = field_end - value_start
        else:
            has_location = has_location or number == _TENSOR_DATA_LOCATION
            rest.append(view[field_start:field_end])
    if raw_bytes is None or raw_bytes <= KEEP_BYTES:
        return None
    if not has_location:  # as read.py's clear_tensor_data leaves it: data_location DEFAULT
        rest.append(_tag(_TENSOR_DATA_LOCATION, _VARINT) + _varint(TensorProto.DEFAULT))
    lean = b"".join(rest)
    tensor = TensorProto.FromString(lean)
    if not uses_external_data(tensor) and raw_bytes != _expected_bytes(tensor):
        return None  # validate_graph names the mismatch, as for any other file
    return lean


def _expected_bytes(tensor: TensorProto) -> int | None:
    """The raw_data bytes the tensor's dims and dtype need; None for other dtypes."""
    item_bytes = _ITEM_BYTES.get(tensor.data_type)
    if item_bytes is None or any(d < 0 for d in tensor.dims):
        return None
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count * item_bytes


def _fields(view: mmap.mmap, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(number, wire type, field start, value start, field end) of each field in
    view[start:end]; a length-delimited value is skipped, never read."""
    position = start
    while position < end:
        key, value_start = _read_varint(view, position)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _WireError("field number 0")
        if wire == _VARINT:
            _, field_end = _read_varint(view, value_start)
        elif wire == _FIXED64:
            field_end = value_start + 8
        elif wire == _FIXED32:
            field_end = value_start + 4
        elif wire == _LENGTH:
            length, value_start = _read_varint(view, value_start)
            field_end = value_start + length
        else:  # groups: not written by any ONNX exporter
            raise _WireError(f"wire type {wire}")
        if field_end > end:
            raise _WireError("a field runs past its message")
        yield number, wire, position, value_start, field_end
        position = field_end


def _read_varint(view: mmap.mmap, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = view[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise _WireError("varint longer than 10 bytes")


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)
