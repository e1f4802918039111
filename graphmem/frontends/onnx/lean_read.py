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
tensor attributes), doc strings and fields ONNX does not define. A Constant node's
`value_floats`, `value_ints` or `value_strings` above KEEP_BYTES becomes the `value` tensor of
the same dtype and count without its data (what read.py makes of a parsed one: onnxruntime turns
either into the same initializer). The pages left out are never
touched, so they never count in the process's memory.

Fields of one tag written one after another (a tensor's `int64_data` one field a number, a
Constant's `value_ints` as proto2 writes it, 40 million empty nodes) are measured as one run by
lean_runs.py, not walked a field at a time: a run of data is left out as above, one of a field
ONNX does not define dropped, and one kept as written refused past MAX_ATTRIBUTE_ENTRIES
entries (protobuf would hold each), so a real 80 MB file of two-byte fields is never parsed
whole.

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
from typing import TYPE_CHECKING, NamedTuple, TypeAlias

import numpy as np
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError
from onnx import AttributeProto, ModelProto, NodeProto, TensorProto
from onnx.external_data_helper import uses_external_data

from graphmem.errors import GraphmemError
from graphmem.frontends.onnx.lean_runs import Run, measure_run
from graphmem.frontends.onnx.protobuf_wire import varint
from graphmem.frontends.onnx.untrusted import check_regular_file, has_data_of_size, quoted

if TYPE_CHECKING:  # protobuf's C implementation (upb) has its own descriptor classes
    from google._upb._message import Descriptor as UpbDescriptor

# a message's descriptor, from the pure-Python protobuf or from upb
MessageDescriptor: TypeAlias = "Descriptor | UpbDescriptor"

KEEP_BYTES = 64 * 1024  # read.py's _KEEP_INITIALIZER_BYTES: larger payloads are dropped
_TENSOR_RAW_DATA, _TENSOR_DATA_LOCATION = 9, 14
# fields read before giving up (the file is then parsed whole): a 70B decoder's walk reads
# about 10**5; a run of fields of one tag (lean_runs.py) counts as one
MAX_WALKED_FIELDS = 2_000_000
# a run is measured by lean_runs.py once this many small fields of one tag came in a row; each
# time one is not found, twice as many (a file cannot make the walk measure in vain often)
_RUN_AFTER = 16
_RUN_FIELD_BYTES = 1 << 14  # a field this long or longer ends a run (lean_runs.py)
# a tensor's typed data fields (float, int32, string, int64, double, uint64), how each entry is
# written when packed (strings: one field each)
_FIXED32_ENTRIES, _FIXED64_ENTRIES, _VARINT_ENTRIES, _BYTES_ENTRIES = 4, 8, 0, -1
_TYPED_DATA_FIELDS = {4: _FIXED32_ENTRIES, 5: _VARINT_ENTRIES, 6: _BYTES_ENTRIES,
                      7: _VARINT_ENTRIES, 10: _FIXED64_ENTRIES, 11: _VARINT_ENTRIES}
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_NODE_NAME, _NODE_OP_TYPE, _NODE_DOMAIN, _ATTRIBUTE_NAME = 3, 4, 7, 1
# entries of one list attribute (floats, ints, strings) of an op other than Constant, whose
# lists become a data-less tensor: graphmem reads attributes into Python, 30-odd bytes an entry;
# and of any field kept (not left out) written as a run of one tag (a tensor's dims, a graph's
# nodes): protobuf would hold each entry
MAX_ATTRIBUTE_ENTRIES = 2**22
# a Constant's list attributes: field number, its name, the tensor dtype it makes, entries
_CONSTANT_LISTS = {7: ("value_floats", TensorProto.FLOAT, _FIXED32_ENTRIES),
                   8: ("value_ints", TensorProto.INT64, _VARINT_ENTRIES),
                   9: ("value_strings", TensorProto.STRING, _BYTES_ENTRIES)}
_ATTRIBUTE_TYPE = 20
_CHUNK_BYTES = 1 << 20  # packed varints are counted a chunk at a time, read with pread


class _WireError(ValueError):
    """Not the wire format this reader follows: the caller parses the file whole."""


class Field(NamedTuple):
    """A field in the file, or a run of fields of one tag (`repeats` of them: lean_runs.py)."""

    number: int
    wire: int
    start: int
    value_start: int  # a run's: its start
    end: int
    repeats: int = 1
    value_bytes: int = 0  # the bytes of its value, or of its fields' values

    @staticmethod
    def of_run(key: int, start: int, run: Run) -> Field:
        wire, count = key & 7, run.count
        held = {_VARINT: run.end - start - count, _FIXED32: 4 * count,
                _FIXED64: 8 * count}.get(wire, run.value_bytes)
        return Field(key >> 3, wire, start, start, run.end, count, held)


def read_lean_model_bytes(path: Path, keep_tensors: bool = False) -> bytes | None:
    """The model file's bytes less its bulk (with `keep_tensors`, doc strings and unknown
    fields only: verify runs the weights), or None where this reader does not apply (then
    read the file whole)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(descriptor, "rb") as file:
        check_regular_file(path, os.fstat(file.fileno()))
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as view:
            walk = _Walk(view, file.fileno(), keep_tensors)
            try:
                return b"".join(walk.message(ModelProto.DESCRIPTOR, 0, len(view))[0])
            except (_WireError, IndexError, DecodeError):
                return None


class _Walk:
    """The message's fields in order, every unknown field left out and each large field
    (above KEEP_BYTES) looked into: a doc string left out, a tensor's raw_data left out
    (`_lean_tensor`), a message rebuilt from its own lean fields; the fields between copied
    as one piece. A small known field is copied whole: it cannot hold bulk. At most
    MAX_WALKED_FIELDS fields are read (beyond: the caller parses the file whole)."""

    def __init__(self, view: mmap.mmap, descriptor: int, keep_tensors: bool) -> None:
        self.view = view
        self.descriptor = descriptor  # the file's, for pread
        self.keep_tensors = keep_tensors
        self.fields_left = MAX_WALKED_FIELDS
        self.run_after = _RUN_AFTER

    def _fields(self, start: int, end: int) -> Iterator[Field]:
        """The fields of view[start:end], each counted against MAX_WALKED_FIELDS; a run of
        small fields of one one-byte tag as one Field, measured by lean_runs.py."""
        view, position, same, previous = self.view, start, 0, -1
        while position < end:
            self.fields_left -= 1
            if self.fields_left < 0:
                raise _WireError("too many fields to walk")
            key = view[position]
            same = same + 1 if key == previous else 0
            if same >= self.run_after:
                same, run = 0, measure_run(self.descriptor, position, end, key, key & 7)
                if run is None or run.count < self.run_after:
                    self.run_after *= 2  # measured in vain: look less often
                if run is not None:
                    yield Field.of_run(key, position, run)
                    position, previous = run.end, -1
                    continue
            number, wire, value_start, field_end = _field_at(view, position, end)
            previous = key if key < 0x80 and field_end - value_start < _RUN_FIELD_BYTES else -1
            yield Field(number, wire, position, value_start, field_end, 1,
                        field_end - value_start)
            position = field_end

    def _check_run(self, descriptor: MessageDescriptor, field: Field) -> None:
        """Refuse a run kept as written (protobuf would hold each entry) above
        MAX_ATTRIBUTE_ENTRIES."""
        if field.repeats > MAX_ATTRIBUTE_ENTRIES:
            name = descriptor.fields_by_number[field.number].name
            raise GraphmemError(
                f"the model's {descriptor.name}.{name} is written {field.repeats:,} times in a"
                f" row, above graphmem's limit of {MAX_ATTRIBUTE_ENTRIES:,} (a broken or"
                " hostile file): re-export it")

    def message(self, descriptor: MessageDescriptor, start: int, end: int
                ) -> tuple[list[bytes], bool]:
        """The message's lean pieces, and whether anything was left out."""
        view, pieces = self.view, []
        kept_from, changed = start, False
        for field in self._fields(start, end):
            known = field.number in descriptor.fields_by_number
            if known and field.repeats > 1:
                self._check_run(descriptor, field)
                continue
            if known and field.value_bytes <= KEEP_BYTES:
                continue
            replacement = b"" if field.repeats > 1 else self._lean_field(
                descriptor, field.number, field.wire, field.value_start, field.end,
                (start, end))
            if replacement is None:
                continue
            if kept_from < field.start:
                pieces.append(view[kept_from:field.start])
            if replacement:
                pieces.append(replacement)
            kept_from, changed = field.end, True
        pieces.append(view[kept_from:end])
        return pieces, changed

    def _lean_field(self, descriptor: MessageDescriptor, number: int, wire: int, start: int,
                    end: int, outer: tuple[int, int]) -> bytes | None:
        """A large field's replacement (b"": left out), or None: keep it as written. `outer`:
        the bounds of the message holding it."""
        field = descriptor.fields_by_number.get(number)
        if field is None or field.name == "doc_string":
            return b""  # unknown to ONNX, or prose: never read
        if (wire != _LENGTH or field.type != FieldDescriptor.TYPE_MESSAGE
                or field.message_type is None):
            return None
        if field.message_type is TensorProto.DESCRIPTOR:
            lean = None if self.keep_tensors else self._lean_tensor(start, end)
            if lean is None:
                return None
        else:
            node = outer if descriptor is NodeProto.DESCRIPTOR else None
            lean = self._lean_message(field.message_type, start, end, node)
            if lean is None:
                return None
        return _tag(number, _LENGTH) + varint(len(lean)) + lean

    def _lean_message(self, descriptor: MessageDescriptor, start: int, end: int,
                      node: tuple[int, int] | None) -> bytes | None:
        """A message field's lean bytes, or None where nothing was left out. `node`: the
        bounds of the node holding it, where it is an attribute."""
        if descriptor is AttributeProto.DESCRIPTOR and node is not None \
                and not self.keep_tensors:
            name, op_type, domain = self._node_names(*node)
            if op_type == b"Constant" and domain in (b"", b"ai.onnx"):
                lean = self._constant_list(start, end)
                if lean is not None:
                    return lean
            else:
                self._check_list(start, end, name, op_type)
        pieces, changed = self.message(descriptor, start, end)
        return b"".join(pieces) if changed else None

    def _node_names(self, start: int, end: int) -> tuple[bytes, bytes, bytes]:
        """The name, op type and domain of the node in view[start:end]."""
        names = {_NODE_NAME: b"", _NODE_OP_TYPE: b"", _NODE_DOMAIN: b""}
        for field in self._fields(start, end):
            if field.number in names:
                if field.repeats > 1:
                    raise _WireError("a node's name written again and again")
                names[field.number] = self.view[field.value_start:field.end]
        return names[_NODE_NAME], names[_NODE_OP_TYPE], names[_NODE_DOMAIN]

    def _check_list(self, start: int, end: int, node: bytes, op_type: bytes) -> None:
        """Refuse a list attribute (floats, ints, strings) of more than
        MAX_ATTRIBUTE_ENTRIES entries on a node other than a Constant: graphmem reads every
        attribute into Python (a 2 GB hole of packed floats took 3.5 GB at 200 MB)."""
        name, count = b"", 0
        for field in self._fields(start, end):
            if field.number == _ATTRIBUTE_NAME and field.repeats == 1:
                name = self.view[field.value_start:field.end]
            elif field.number in _CONSTANT_LISTS:
                count += self._entries(_CONSTANT_LISTS[field.number][2], field)
        if count > MAX_ATTRIBUTE_ENTRIES:
            op = quoted(op_type.decode(errors="backslashreplace"))
            label = f"a {op} node" if not node else (
                f"node {quoted(node.decode(errors='backslashreplace'))} ({op})")
            raise GraphmemError(
                f"{label}: attribute {quoted(name.decode(errors='backslashreplace'))} holds"
                f" {count:,} values, above graphmem's limit of"
                f" {MAX_ATTRIBUTE_ENTRIES:,} for an attribute (it reads every attribute):"
                " store large values in an initializer")

    def _constant_list(self, start: int, end: int) -> bytes | None:
        """A Constant's `value_floats`, `value_ints` or `value_strings` attribute in
        view[start:end], above KEEP_BYTES, as a `value` attribute holding a tensor of its dtype
        and count without data; None: keep it as written (another attribute, or not as the
        standard writes it)."""
        name, lists, count, held = b"", set(), 0, 0
        for field in self._fields(start, end):
            if field.number == _ATTRIBUTE_NAME and field.repeats == 1:
                name = self.view[field.value_start:field.end]
            elif field.number in _CONSTANT_LISTS:
                lists.add(field.number)
                count += self._entries(_CONSTANT_LISTS[field.number][2], field)
                held += field.end - field.start  # as written: ByteSize, as in dense_forms
            elif field.number != _ATTRIBUTE_TYPE:
                return None
        if len(lists) != 1 or held <= KEEP_BYTES:
            return None
        list_name, dtype, _ = _CONSTANT_LISTS[lists.pop()]
        if name != list_name.encode():
            return None
        tensor = TensorProto(dims=[count], data_type=dtype, data_location=TensorProto.DEFAULT)
        return AttributeProto(name="value", type=AttributeProto.TENSOR,
                              t=tensor).SerializeToString()

    def _entries(self, written: int, field: Field) -> int:
        """How many numbers or strings a field (or run) of a repeated field holds: `written`,
        the bytes of a packed fixed-size number, or _VARINT_ENTRIES, or _BYTES_ENTRIES. A
        run of packed fields is counted as a whole (its tags and lengths, one varint each,
        taken off)."""
        if written == _BYTES_ENTRIES or field.wire != _LENGTH:
            return field.repeats  # strings, or numbers written unpacked
        if written != _VARINT_ENTRIES:
            if field.value_bytes % written:
                raise _WireError("packed numbers of a length not a multiple of their size")
            return field.value_bytes // written
        # packed varints: one ends at each byte below 0x80 (read in chunks: never mapped)
        start, end = field.value_start, field.end
        if end > start and self.view[end - 1] >= 0x80:
            raise _WireError("packed varints end inside a number")
        count = 0
        for offset in range(start, end, _CHUNK_BYTES):
            chunk = os.pread(self.descriptor, min(_CHUNK_BYTES, end - offset), offset)
            count += int(np.count_nonzero(np.frombuffer(chunk, np.uint8) < 0x80))
        return count - 2 * field.repeats if field.repeats > 1 else count

    def _lean_tensor(self, start: int, end: int) -> bytes | None:
        """The tensor's bytes without its data (raw_data, or one typed field such as
        int64_data), where leaving it out loses nothing (module docstring); None: keep the
        tensor as written."""
        rest: list[bytes] = []
        raw_bytes: int | None = None
        typed: dict[int, int] = {}  # typed data field -> its entries
        typed_bytes, longest = 0, 0
        has_location = False
        for field in self._fields(start, end):
            number = field.number
            if number in _TYPED_DATA_FIELDS:
                typed[number] = typed.get(number, 0) + self._entries(
                    _TYPED_DATA_FIELDS[number], field)
                typed_bytes += field.end - field.start  # as written, tags included
                longest = max(longest, field.repeats)
            elif number == _TENSOR_RAW_DATA:
                if field.wire != _LENGTH or raw_bytes is not None or field.repeats > 1:
                    return None  # protobuf's last-one-wins: keep as written
                raw_bytes = field.value_bytes
            else:
                has_location = has_location or number == _TENSOR_DATA_LOCATION
                self._check_run(TensorProto.DESCRIPTOR, field)
                rest.append(self.view[field.start:field.end])
        if (raw_bytes is None) == (not typed) or len(typed) > 1 \
                or max(raw_bytes or 0, typed_bytes) <= KEEP_BYTES:
            self._kept_whole(typed, longest)  # no data, both kinds, or small
            return None
        if not has_location:  # as read.py's clear_tensor_data leaves it: data_location DEFAULT
            rest.append(_tag(_TENSOR_DATA_LOCATION, _VARINT) + varint(TensorProto.DEFAULT))
        lean = b"".join(rest)
        tensor = TensorProto.FromString(lean)
        if uses_external_data(tensor):
            return lean
        if raw_bytes is not None:
            held, name = raw_bytes, "raw_data"
        else:
            (number, held), = typed.items()
            name = TensorProto.DESCRIPTOR.fields_by_number[number].name
        if not has_data_of_size(tensor, name, held):
            self._kept_whole(typed, longest)  # validate_graph names the mismatch
            return None
        return lean

    def _kept_whole(self, typed: dict[int, int], longest: int) -> None:
        """A tensor kept as written: refused where a run of its typed data is above
        _check_run's limit (protobuf would hold each entry)."""
        for number in typed:
            self._check_run(TensorProto.DESCRIPTOR, Field(number, 0, 0, 0, 0, longest))


def _field_at(view: mmap.mmap, position: int, end: int) -> tuple[int, int, int, int]:
    """(number, wire type, value start, field end) of the field at view[position], within
    view[:end]; a length-delimited value is skipped, never read."""
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
    return number, wire, value_start, field_end


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




def _tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)
