"""A size that is the largest of several polynomials in the free dims: the exact peak.

With dims left free, the liveness keeps every step total that no other dominates term by term
(`LivenessResult.peak_candidates`); the bound analysis's peak at any dim values is the largest
of them there. `Formula` is that maximum, exact, in three forms:
- to evaluate: `evaluate(dims)` in Python; `to_json()` for programs (each candidate's terms as
  coefficients and powers of dims);
- to read, for one free dim: the candidate that is largest on each range of values, with the
  crossovers computed exactly (`pieces`): "1.2 GiB + 127 KiB·seq up to seq=1,899; above that
  ... 36 B·seq² ...";
- to read, with several free dims: the candidate that is largest at the probe value, and how
  many there are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from math import lcm
from typing import Any

from graphmem.core.conventions import MAX_DIM_VALUE, PROBE_DIM_VALUE
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes

_SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


@dataclass(frozen=True)
class Piece:
    """Dim values `first` to `last` (inclusive), where `leader` is the largest candidate."""

    first: int
    last: int
    leader: SymInt


@dataclass(frozen=True)
class Formula:
    """A size in free dims: the largest of `terms`, each a polynomial in the dims."""

    terms: tuple[SymInt, ...]

    @property
    def free_dims(self) -> frozenset[str]:
        return frozenset().union(*(term.free_symbols() for term in self.terms))

    def evaluate(self, dims: Mapping[str, int]) -> int:
        """The exact size at `dims` (every free dim given): the largest candidate there."""
        return max(term.evaluate(dims) for term in self.terms)

    def leading(self, dims: Mapping[str, int]) -> SymInt:
        """The candidate that is the largest at `dims` (the first of equals)."""
        return max(self.terms, key=lambda term: term.evaluate(dims))

    @cached_property
    def pieces(self) -> tuple[Piece, ...] | None:
        """With one free dim (a plain name), the leading candidate on each range of its values
        1..MAX_DIM_VALUE, crossovers exact; None with several dims or opaque factors."""
        dims = self.free_dims
        if len(dims) != 1 or not all(_is_plain(term) for term in self.terms):
            return None
        return envelope(self.terms)

    def sympy_text(self) -> str:
        """sympy syntax a program can parse: `p` or `Max(p1, p2, ...)`."""
        texts = [term.formula() for term in self.terms]
        return texts[0] if len(texts) == 1 else f"Max({', '.join(texts)})"

    def display(self, format_number: Callable[[int | float], str] = format_bytes) -> str:
        """The readable form: per range for one free dim, else the leader at the probe."""
        if len(self.terms) == 1:
            return readable(self.terms[0], format_number)
        pieces = self.pieces
        if pieces is not None:
            return _pieces_text(pieces, next(iter(self.free_dims)), format_number)
        probe = dict.fromkeys(sorted(self.free_dims), PROBE_DIM_VALUE)
        at = ", ".join(f"{name}={value}" for name, value in probe.items())
        return (f"max of {len(self.terms)} step totals; at {at} the largest is"
                f" {readable(self.leading(probe), format_number)}")

    def to_json(self) -> dict[str, Any]:
        """`{"max": [{"terms": [{"coefficient": c, "dims": {"seq": 2}}, ...]}, ...], ...}`: the
        size is ceil(max over candidates of sum(coefficient / divisor * prod(dim ** power)))."""
        pieces = self.pieces
        dim = next(iter(self.free_dims)) if pieces is not None else None
        return {
            "max": [{"terms": terms_json(term)} for term in self.terms],
            "sympy": self.sympy_text(),
            "display": self.display(),
            "pieces": None if pieces is None else [
                {"dim": dim, "from": p.first, "to": p.last,
                 "candidate": self.terms.index(p.leader)} for p in pieces],
        }

    def __str__(self) -> str:
        if len(self.terms) == 1:
            return self.terms[0].formula()
        return f"max({', '.join(term.formula() for term in self.terms)})"


def terms_json(value: SymInt) -> list[dict[str, Any]]:
    """Each term of `value`: its coefficient (and divisor, for a fraction) and dim powers; an
    opaque factor such as floor(seq/2) is named by its text."""
    rows = []
    for monomial, coefficient in sorted(value.terms().items(), key=_term_key):
        number = Fraction(coefficient)
        row: dict[str, Any] = {"coefficient": number.numerator,
                               "dims": {str(factor): power for factor, power in monomial}}
        if number.denominator != 1:
            row["divisor"] = number.denominator
        rows.append(row)
    return rows


def readable(value: SymInt, format_number: Callable[[int | float], str] = format_bytes) -> str:
    """`1.2 GiB + 127.0 KiB·seq + 36 B·seq²`: constant first, coefficients formatted."""
    parts = []
    for monomial, coefficient in sorted(value.terms().items(), key=_term_key):
        number = coefficient if isinstance(coefficient, int) else float(coefficient)
        factors = "·".join(str(f) if p == 1 else f"{f}{str(p).translate(_SUPERSCRIPTS)}"
                           for f, p in monomial)
        text = format_number(number)
        parts.append(f"{text}·{factors}" if factors else text)
    return " + ".join(parts).replace("+ -", "- ") if parts else format_number(0)


def _pieces_text(pieces: tuple[Piece, ...], dim: str,
                 format_number: Callable[[int | float], str]) -> str:
    if len(pieces) == 1:
        return readable(pieces[0].leader, format_number)
    texts = [f"{readable(pieces[0].leader, format_number)} up to {dim}={pieces[0].last:,}"]
    for piece in pieces[1:-1]:
        texts.append(f"{readable(piece.leader, format_number)} from {dim}={piece.first:,}"
                     f" to {piece.last:,}")
    last = pieces[-1]
    texts.append(f"above that {readable(last.leader, format_number)}"
                 f" (from {dim}={last.first:,})")
    return "; ".join(texts)


def _term_key(item: tuple[Any, Any]) -> tuple[int, str]:
    monomial = item[0]
    return sum(power for _, power in monomial), str(monomial)


def _is_plain(value: SymInt) -> bool:
    return all(factor.is_Symbol for monomial in value.terms() for factor, _ in monomial)


# ----- the upper envelope of polynomials in one dim ------------------------------------------


def envelope(candidates: tuple[SymInt, ...], limit: int = MAX_DIM_VALUE) -> tuple[Piece, ...]:
    """The leading candidate on each range of their one free dim's values 1..limit, exactly.

    Sweeps from 1: the leader holds until the first integer at which another candidate is
    strictly larger; that integer is one past a real root of their difference (found exactly
    by sympy), so only the roots need checking, never each value. Among equals the one that
    is larger further on leads (so a tie does not cut a range).
    """
    scale = _common_scale(candidates)
    polys = [_integer_poly(c, scale) for c in candidates]
    x = 1
    leader = _leader_at(polys, x, limit)
    pieces: list[Piece] = []
    while True:
        overtake = _first_overtake(polys, leader, x, limit)
        if overtake is None:
            pieces.append(Piece(x, limit, candidates[leader]))
            return tuple(_merged(pieces))
        pieces.append(Piece(x, overtake - 1, candidates[leader]))
        x = overtake
        leader = _leader_at(polys, x, limit)


@dataclass(frozen=True)
class _Poly:
    """A candidate as integer coefficients (lowest degree first) over a common divisor: the
    sign of a difference is exact, and comparisons need no fractions."""

    coefficients: tuple[int, ...]

    def at(self, x: int) -> int:
        total = 0
        for coefficient in reversed(self.coefficients):
            total = total * x + coefficient
        return total

    def minus(self, other: _Poly) -> _Poly:
        size = max(len(self.coefficients), len(other.coefficients))
        left = self.coefficients + (0,) * (size - len(self.coefficients))
        right = other.coefficients + (0,) * (size - len(other.coefficients))
        return _Poly(tuple(a - b for a, b in zip(left, right, strict=True)))


def _integer_poly(value: SymInt, scale: int) -> _Poly:
    """`value` (one free dim) as integer coefficients, every one multiplied by `scale`."""
    terms = value.terms()
    degree = max((sum(p for _, p in m) for m in terms), default=0)
    coefficients = [Fraction(0)] * (degree + 1)
    for monomial, coefficient in terms.items():
        coefficients[sum(p for _, p in monomial)] += Fraction(coefficient)
    return _Poly(tuple(int(c * scale) for c in coefficients))


def _common_scale(candidates: tuple[SymInt, ...]) -> int:
    """The lcm of every coefficient's denominator (8 for sub-byte dtypes, else 1): scaled by
    it, every candidate has integer coefficients and their order is unchanged."""
    denominators = [Fraction(c).denominator for value in candidates
                    for c in value.terms().values()]
    return lcm(1, *denominators)


def _leader_at(polys: list[_Poly], x: int, limit: int) -> int:
    """The candidate largest at x; among equals the largest at x+1, then at the limit."""
    nxt = min(x + 1, limit)
    return max(range(len(polys)),
               key=lambda i: (polys[i].at(x), polys[i].at(nxt), polys[i].at(limit), -i))


def _first_overtake(polys: list[_Poly], leader: int, x: int, limit: int) -> int | None:
    """The smallest integer t in (x, limit] where some candidate exceeds the leader."""
    best: int | None = None
    for index, poly in enumerate(polys):
        if index == leader:
            continue
        found = _first_positive(poly.minus(polys[leader]), x, limit)
        if found is not None and (best is None or found < best):
            best = found
    return best


def _first_positive(difference: _Poly, x: int, limit: int) -> int | None:
    """The smallest integer t in (x, limit] with difference(t) > 0, or None.

    Between two consecutive real roots the sign is constant, so t is x+1 or one past a real
    root r >= x: the integers floor(r) + 1 are the only ones to check, in order."""
    points = {x + 1} | {floor + 1 for floor in _root_floors(difference) if floor >= x}
    for point in sorted(points):
        if point > limit:
            return None
        if difference.at(point) > 0:
            return point
    return None


def _root_floors(poly: _Poly) -> list[int]:
    """floor(r) of every real root r of `poly`, exactly (sympy's root isolation)."""
    coefficients = list(poly.coefficients)
    while coefficients and coefficients[-1] == 0:
        coefficients.pop()
    if len(coefficients) <= 1:
        return []
    if len(coefficients) == 2:  # a*x + b = 0: x = -b/a
        return [Fraction(-coefficients[0], coefficients[1]).__floor__()]
    import sympy  # root isolation only: a formula with free dims of degree 2 and over

    x = sympy.Symbol("x")
    roots = sympy.Poly(list(reversed(coefficients)), x).real_roots()
    return [int(sympy.floor(root)) for root in roots]


def _merged(pieces: list[Piece]) -> list[Piece]:
    merged: list[Piece] = []
    for piece in pieces:
        if merged and merged[-1].leader == piece.leader:
            merged[-1] = Piece(merged[-1].first, piece.last, piece.leader)
        else:
            merged.append(piece)
    return merged
