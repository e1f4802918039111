"""SymInt: exact sizes in dynamic dims."""

from fractions import Fraction

from graphmem.core.symbolic import SymInt, parse_dim, symint_max

BATCH = SymInt.symbol("batch")
SEQ = SymInt.symbol("seq")


def test_arithmetic_is_exact_polynomial_algebra() -> None:
    # (3*batch + 10) * (2*batch*seq) = 6*batch^2*seq + 20*batch*seq
    size = (BATCH * 3 + 10) * (BATCH * SEQ * 2)
    assert size == BATCH * BATCH * SEQ * 6 + BATCH * SEQ * 20
    # batch=2, seq=5: 6*4*5 + 20*2*5 = 120 + 200 = 320
    assert size.evaluate({"batch": 2, "seq": 5}) == 320
    assert size.free_symbols() == {"batch", "seq"}


def test_subtraction_cancels_terms() -> None:
    assert (BATCH * 4 + 7) - (BATCH * 4) == 7
    assert ((BATCH * 4 + 7) - (BATCH * 4)).is_constant


def test_bind_substitutes_only_given_dims() -> None:
    # 2*batch*seq with seq=128 -> 256*batch
    assert (BATCH * SEQ * 2).bind({"seq": 128}) == BATCH * 256


def test_parse_dim_handles_expressions_from_shape_inference() -> None:
    assert SymInt.from_sympy(parse_dim("2*batch*seq")) == BATCH * SEQ * 2
    assert SymInt.from_sympy(parse_dim("seq + 1")) == SEQ + 1
    # floor(seq/2) is kept whole and evaluated when bound: floor(7/2) = 3, times batch=3 -> 9
    half = SymInt.from_sympy(parse_dim("floor(seq/2)")) * BATCH
    assert half.evaluate({"seq": 7, "batch": 3}) == 9


def test_parse_dim_keeps_odd_names_as_one_symbol() -> None:
    assert SymInt.from_sympy(parse_dim("N.1")).free_symbols() == {"N.1"}


def test_sub_byte_sizes_round_up_only_when_concrete() -> None:
    # 7 int4 elements = 28 bits = 3.5 bytes -> 4 bytes
    assert int(SymInt.const(7).scaled(4, 8)) == 4
    assert SymInt.const(7).scaled(4, 8).constant_term == Fraction(7, 2)


def test_dominance_and_max_keep_only_undominated_candidates() -> None:
    a, b, c = BATCH * 2 + 1, BATCH + 5, BATCH * 2 + 3
    assert c.dominates(a)
    assert not a.dominates(b) and not b.dominates(a)
    # 2b+3 dominates 2b+1; b+5 and 2b+3 cross at b=2: both stay
    assert set(symint_max([a, b, c])) == {b, c}
    assert symint_max([SymInt.const(3), SymInt.const(9)]) == [SymInt.const(9)]
