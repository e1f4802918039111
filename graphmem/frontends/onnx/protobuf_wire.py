"""Protocol buffers' wire format, the one piece graphmem writes by hand: a varint (the lean
read's rewritten fields, lean_read.py; the planner's and the importer's layer cuts' keys,
plan_layers.py and layer_types.py)."""

from __future__ import annotations


def varint(value: int) -> bytes:
    """`value` (>= 0) as a base-128 varint, low group first, the high bit set on all but the
    last byte: 300 -> b"\\xac\\x02"."""
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_ONE_BYTE = [bytes((n,)) for n in range(0x80)]
