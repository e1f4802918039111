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


def _printed_each_time(value: SymInt) -> list[str]:
    # the order before the monomials' texts were remembered: sympy prints every key, every sort
    terms = sorted(value.terms().items(),
                   key=lambda item: (sum(p for _, p in item[0]), str(item[0])))
    return [str(monomial) for monomial, _ in terms]


def test_terms_are_written_in_the_same_order_with_each_monomial_printed_once() -> None:
    import sympy

    batch, seq = SymInt.symbol("batch"), SymInt.symbol("seq")
    rotary = SymInt.from_sympy(sympy.Min(4096, sympy.Symbol("seq", integer=True, positive=True)))
    # a decoder's sizes: 8192*batch*seq + 128*batch*Min(4096, seq) + batch**2*seq + 16
    value = batch * seq * 8192 + batch * rotary * 128 + batch * batch * seq + 16
    symbolic._monomial_order.cache_clear()
    for _ in range(3):  # a report sorts the same sizes over and over
        ordered = sorted(value.terms().items(), key=symbolic._term_order)
        assert [str(m) for m, _ in ordered] == _printed_each_time(value)
    assert symbolic._monomial_order.cache_info().misses == len(value.terms())
    # and the texts are sympy's own: Min(4096, seq) parenthesized when raised to a power
    # degree 0, then degree 2 by text ("((Min(...), 1), (batch, 1))" < "((batch, 1), (seq, 1))",
    # factors sorted by name: capitals first), then degree 3
    assert value.formula() == "16 + 128*Min(4096, seq)*batch + 8192*batch*seq + batch**2*seq"
    squared = rotary * rotary
    assert squared.formula() == "(Min(4096, seq))**2"
