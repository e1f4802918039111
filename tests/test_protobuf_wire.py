"""The one varint encoder (graphmem/frontends/onnx/protobuf_wire.py) against protobuf's own."""

from __future__ import annotations

import pytest
from google.protobuf.internal.encoder import _VarintBytes  # protobuf's encoder, as reference

from graphmem.frontends.onnx.protobuf_wire import varint


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16_383, 16_384, 2**31 - 1, 2**63 - 1])
def test_varint_is_protobufs(value: int) -> None:
    # 300 = 0b10_0101100: the low 7 bits 0x2c with the high bit set (0xac), then 0b10 (0x02)
    assert varint(value) == _VarintBytes(value)
    assert varint(300) == b"\xac\x02"
