"""Runs of fields of one tag, measured without a Python step per field (lean_read.py).

proto2 writes a repeated number one field a number unless the schema says packed (ONNX's
attribute `floats`/`ints` are so written), and protobuf reads fields of one number written
one after another as one repeated field, whatever the schema says (a tensor's `int64_data` as
40 million two-byte fields: 80 MB). Walking such a run a field at a time costs a microsecond or
more of Python each, so lean_read.py measures the whole run here, on the file read with
`pread` a chunk at a time (its pages never mapped), with numpy:
- a varint field (tag, then a number of 1-10 bytes): in a run every field holds exactly two
  bytes below 0x80, its one-byte tag and its number's last byte, so the fields are the pairs
  of such bytes, each pair's first byte the tag right after the previous pair;
- a fixed32 or fixed64 field: every 5th or 9th byte is the tag;
- a length-delimited field (tag, a length of one or two bytes, that many bytes): hopped one
  at a time where they are long; where they are tiny, each byte that could start a field
  points at where the next would start, and list ranking (pointer doubling) counts the
  fields from the chunk's first, and sums their lengths, in log2(chunk) passes. A field of
  16 KiB or more (a length of three bytes or more) ends the run: the walk looks at it itself
  (it may hold bulk).

Only a one-byte tag (field numbers 1-15: every data field of ONNX's schema) makes a run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_CHUNK_BYTES = 1 << 20
_LENGTH_CHUNK_BYTES = 1 << 16  # pointer doubling holds a few arrays of this many int32
# length-delimited fields are hopped in Python (0.25-0.5 us a field) unless this many average
# under this many bytes: ranking costs 60-200 ns a byte of the chunk (measured on runs of 2- to
# 48-byte fields: 2 bytes 201 ns/B ranked, 470 ns a field hopped; 8 bytes 77 ns/B, 266 ns;
# 32 bytes 97 ns/B, 241 ns), so only fields of a few bytes (empty nodes) rank faster; a
# decoder's 22,000 nodes of 42 bytes took 0.07 s ranked, 0.007 s hopped
_HOPPED_FIELDS, _SMALL_FIELD_BYTES = 32, 4
_FIXED_BYTES = {_FIXED32: 4, _FIXED64: 8}


@dataclass(frozen=True)
class Run:
    """Fields of one tag, one after another: how many, where the run ends, and (length-delimited
    fields) the sum of their values' lengths."""

    count: int
    end: int
    value_bytes: int = 0


def measure_run(descriptor: int, start: int, end: int, tag: int, wire: int) -> Run | None:
    """The run of fields of the one-byte `tag` (of wire type `wire`) from `start`, where the
    first field starts, to at most `end`; None where fewer than two fields make it."""
    if tag >= 0x80:
        return None
    if wire == _VARINT:
        run = _varint_run(descriptor, start, end, tag)
    elif wire in _FIXED_BYTES:
        run = _fixed_run(descriptor, start, end, tag, 1 + _FIXED_BYTES[wire])
    elif wire == _LENGTH:
        run = _length_run(descriptor, start, end, tag)
    else:
        return None
    return run if run.count > 1 else None


def _read(descriptor: int, start: int, end: int, chunk: int) -> np.ndarray:
    return np.frombuffer(os.pread(descriptor, min(chunk, end - start), start), np.uint8)


def _fixed_run(descriptor: int, start: int, end: int, tag: int, stride: int) -> Run:
    count, position = 0, start
    while True:
        data = _read(descriptor, position, end, _CHUNK_BYTES - _CHUNK_BYTES % stride)
        whole = len(data) // stride
        other = data[: whole * stride : stride] != tag
        good = int(np.argmax(other)) if other.any() else whole
        count += good
        position += good * stride
        if good < whole or whole == 0 or position >= end:
            return Run(count, position)


def _varint_run(descriptor: int, start: int, end: int, tag: int) -> Run:
    count, position = 0, start
    while True:
        data = _read(descriptor, position, end, _CHUNK_BYTES)
        stops = np.flatnonzero(data < 0x80)  # each field's tag and its number's last byte
        pairs = len(stops) // 2
        tags, lasts = stops[0 : 2 * pairs : 2], stops[1 : 2 * pairs : 2]
        follows = np.zeros(pairs, np.int64)  # where each field's tag must be
        follows[1:] = lasts[:-1] + 1
        ok = (tags == follows) & (data[tags] == tag) & (lasts - tags <= 10)
        good = int(np.argmin(ok)) if pairs and not ok.all() else pairs
        if good:
            count += good
            position += int(lasts[good - 1]) + 1
        if good < pairs or good == 0 or position >= end:
            return Run(count, position)


def _length_run(descriptor: int, start: int, end: int, tag: int) -> Run:
    count, value_bytes, position = 0, 0, start
    while position < end:
        raw = os.pread(descriptor, min(_LENGTH_CHUNK_BYTES, end - position), position)
        hops, held, offset, small = _hop(raw, tag)
        if small:  # tiny fields: ranked with numpy from where the hops stopped
            ranked, ranked_held, last = _rank(
                np.frombuffer(raw, np.uint8)[offset:].astype(np.int32), tag)
            hops, held, offset = hops + ranked, held + ranked_held, offset + last
        count, value_bytes = count + hops, value_bytes + held
        # raw[offset:] starts with a field that is not the run's, or does not end in raw
        length = _field_bytes(raw, offset) if offset < len(raw) and raw[offset] == tag else 0
        if offset == len(raw) or (length and offset + length == len(raw)):
            if offset < len(raw):  # it ends with the chunk: count it
                count += 1
                value_bytes += length - _header_bytes(raw, offset)
            position += len(raw)
        elif offset > 0 and position + len(raw) < end:  # it may end past the chunk: read on
            position += offset
        else:
            return Run(count, position + offset, value_bytes)
    return Run(count, position, value_bytes)


def _hop(raw: bytes, tag: int) -> tuple[int, int, int, bool]:
    """Fields of the run hopped one at a time from raw's start while they end inside it:
    how many, their values' bytes, where the hops stopped, and whether they stopped because
    the fields are tiny (_HOPPED_FIELDS of them in under _SMALL_FIELD_BYTES each on average:
    numpy ranks the rest faster)."""
    # _field_bytes and _header_bytes inlined: a decoder's 22,000 nodes are hopped here, two
    # calls a field were 0.011 of 0.018 CPU s
    size, offset, hops, held = len(raw), 0, 0, 0
    while offset < size and raw[offset] == tag:
        if hops == _HOPPED_FIELDS and offset < _HOPPED_FIELDS * _SMALL_FIELD_BYTES:
            return hops, held, offset, True
        if offset + 1 >= size:
            break
        first = raw[offset + 1]
        if first < 0x80:  # a one-byte length
            value, header = first, 2
        elif offset + 2 < size and raw[offset + 2] < 0x80:  # a two-byte length
            value, header = (first & 0x7F) | (raw[offset + 2] << 7), 3
        else:  # longer, or not inside raw
            break
        if offset + header + value > size:
            break
        hops, held = hops + 1, held + value
        offset += header + value
    return hops, held, offset, False


def _rank(data: np.ndarray, tag: int) -> tuple[int, int, int]:
    """List ranking from data[0]: the fields that lead to another inside data, their values'
    bytes, and the first field that does not."""
    hops, lengths, leads = _hops(data, tag)
    jump, steps, summed = hops, leads.astype(np.int32), np.where(leads, lengths, 0)
    while hops[jump[0]] != jump[0]:  # jump[i] is 2**k hops on from i (or the chain's end)
        steps, summed, jump = steps + steps[jump], summed + summed[jump], jump[jump]
    return int(steps[0]), int(summed[0]), int(jump[0])


def _header_bytes(data: bytes | np.ndarray, at: int) -> int:
    return 2 if data[at + 1] < 0x80 else 3


def _field_bytes(data: bytes | np.ndarray, at: int) -> int:
    """The bytes of the field at data[at] (its one-byte tag, a length of one or two bytes and
    its value), or 0 where its length is longer or not inside the data."""
    size = len(data)
    if at + 1 >= size:
        return 0
    if data[at + 1] < 0x80:
        return 2 + int(data[at + 1])
    if at + 2 >= size or data[at + 2] >= 0x80:
        return 0
    return 3 + int((data[at + 1] & 0x7F) | (data[at + 2] << 7))


def _hops(data: np.ndarray, tag: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every offset as a field's start: where the next field starts (itself where the
    field is not the run's or the next does not start inside the data: a chain ends there),
    its value's length, and whether it leads on."""
    size = len(data)
    index = np.arange(size, dtype=np.int32)
    first, second = np.zeros(size, np.int32), np.zeros(size, np.int32)
    first[:-1], second[:-2] = data[1:], data[2:]
    short = first < 0x80
    lengths = np.where(short, first, (first & 0x7F) | (second << 7))
    following = index + np.where(short, 2, 3) + lengths
    leads = (data == tag) & (short | (second < 0x80)) & (following < size)
    return np.where(leads, following, index), lengths, leads
