"""lean_runs._hop with its field reads inlined (read5) against the field-by-field walk it
replaced (`_field_bytes` and `_header_bytes` a field): the same hops, held bytes, stop and
verdict on random runs of length-delimited fields, cut anywhere, of lengths of one, two and
three bytes, with foreign tags among them."""

from __future__ import annotations

import random

from graphmem.frontends.onnx import lean_runs
from graphmem.frontends.onnx.lean_runs import _field_bytes, _header_bytes, _hop


def _hop_field_by_field(raw: bytes, tag: int) -> tuple[int, int, int, bool]:
    size, offset, hops, held = len(raw), 0, 0, 0
    while offset < size and raw[offset] == tag:
        if (hops == lean_runs._HOPPED_FIELDS
                and offset < lean_runs._HOPPED_FIELDS * lean_runs._SMALL_FIELD_BYTES):
            return hops, held, offset, True
        length = _field_bytes(raw, offset)
        if not length or offset + length > size:
            break
        hops, held = hops + 1, held + length - _header_bytes(raw, offset)
        offset += length
    return hops, held, offset, False


def _field(rng: random.Random, tag: int) -> bytes:
    length = (rng.choice([0, 1, 127, 128, 300, 16383, 16384]) if rng.random() < 0.3
              else rng.randint(0, 60))
    if length < 0x80:
        header = bytes([length])
    elif length < 1 << 14:
        header = bytes([(length & 0x7F) | 0x80, length >> 7])
    else:  # three bytes: the run ends there
        header = bytes([(length & 0x7F) | 0x80, ((length >> 7) & 0x7F) | 0x80, length >> 14])
    first = tag if rng.random() < 0.95 else rng.randrange(256)
    body = rng.randbytes(length) if length < 64 else bytes(length)
    return bytes([first]) + header + body


def test_hop_matches_the_field_by_field_walk() -> None:
    rng = random.Random(5)
    for _ in range(1500):
        tag = rng.choice([0x0A, 0x12, 0x3A])
        raw = b"".join(_field(rng, tag) for _ in range(rng.randint(0, 40)))
        if raw and rng.random() < 0.4:  # a chunk ends anywhere, inside a header too
            raw = raw[: rng.randrange(len(raw))]
        assert _hop(raw, tag) == _hop_field_by_field(raw, tag), raw[:16]
    # 32 tiny fields hopped hand the rest over to numpy's ranking
    tiny = bytes([0x0A, 1, 0]) * 40  # 40 fields of 3 bytes: stops at 32, for numpy
    assert _hop(tiny, 0x0A) == _hop_field_by_field(tiny, 0x0A) == (32, 32, 96, True)
