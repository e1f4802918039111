"""symbolic.product remembers its results by factors: the passes ask for the element count of
the same few shapes tens of thousands of times on a decoder."""

from __future__ import annotations

import pytest

from graphmem.core import symbolic
from graphmem.core.symbolic import SymInt, product


def test_product_is_remembered_and_equal_to_the_multiplication() -> None:
    batch, seq = SymInt.symbol("batch"), SymInt.symbol("seq")
    shape = (batch, seq, SymInt.const(64), SymInt.const(128))
    first = product(shape)
    assert first == batch * seq * 8192
    assert product(iter(shape)) is first  # the same factors: the same (immutable) result
    assert product((seq, batch, SymInt.const(8192))) == first
    assert product(()) == SymInt.const(1)
    assert product((SymInt.const(3), SymInt.const(5))) == SymInt.const(15)


def test_the_remembered_products_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(symbolic, "_PRODUCTS", {})
    monkeypatch.setattr(symbolic, "_MAX_CACHED_PRODUCTS", 4)
    seq = SymInt.symbol("seq")
    for size in range(10):
        assert product((seq, SymInt.const(size + 1))) == seq * (size + 1)
    assert len(symbolic._PRODUCTS) <= 4
