"""Symbolic sizes: polynomials in the model's dynamic dims with exact rational coefficients.

Shape inference speaks sympy (dims such as `batch`, `2*seq`, `floor(seq/2)`); everything after
it adds, subtracts and multiplies sizes thousands of times, so sizes are kept here as a small
polynomial (a dict from monomial to coefficient) that is cheap to add and exact to evaluate.
A factor that is not a plain symbol (`floor(seq/2)`) is kept whole as an opaque factor and
evaluated with sympy when the dims are bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from functools import cache

import sympy

from graphmem.core.dim_parser import DimParseError, dim_symbol, parse_dim_expression

# A monomial is a sorted tuple of (factor, power); the empty tuple is the constant term.
Factor = sympy.Expr
Monomial = tuple[tuple[Factor, int], ...]
Coefficient = int | Fraction


def _factor_key(item: tuple[Factor, int]) -> str:
    return _factor_name(item[0])


@cache
def _factor_symbols(factor: Factor) -> frozenset[str]:
    return frozenset(str(s) for s in factor.free_symbols)


@cache
def _factor_name(factor: Factor) -> str:
    # sympy's printer is slow and monomials are sorted on every multiplication: print once
    return str(factor)


def _mul_monomials(left: Monomial, right: Monomial) -> Monomial:
    powers: dict[Factor, int] = dict(left)
    for factor, power in right:
        powers[factor] = powers.get(factor, 0) + power
    return tuple(sorted(powers.items(), key=_factor_key))


def _normalize(coefficient: Coefficient) -> Coefficient:
    if isinstance(coefficient, Fraction) and coefficient.denominator == 1:
        return coefficient.numerator
    return coefficient


class SymInt:
    """An exact size that may depend on dynamic dims: sum of coefficient * monomial."""

    __slots__ = ("_hash", "_terms")

    def __init__(self, terms: Mapping[Monomial, Coefficient] | None = None) -> None:
        self._terms: dict[Monomial, Coefficient] = {
            monomial: _normalize(coefficient)
            for monomial, coefficient in (terms or {}).items()
            if coefficient != 0
        }
        self._hash: int | None = None

    # ----- construction -------------------------------------------------------------------
    @staticmethod
    def const(value: Coefficient) -> SymInt:
        return SymInt({(): value})

    @staticmethod
    def symbol(name: str) -> SymInt:
        return SymInt({((dim_symbol(name), 1),): 1})

    @staticmethod
    def from_sympy(expr: sympy.Expr | int) -> SymInt:
        # never sympify text: sympy.sympify evaluates Python (core/dim_parser.py parses dim text)
        if isinstance(expr, int):
            return SymInt.const(expr)
        if not isinstance(expr, sympy.Expr):
            raise TypeError(f"SymInt.from_sympy takes a sympy expression, not {type(expr)}")
        return _from_sympy_cached(expr)

    # ----- arithmetic ---------------------------------------------------------------------
    def __add__(self, other: SymInt | int) -> SymInt:
        other = _as_symint(other)
        terms = dict(self._terms)
        for monomial, coefficient in other._terms.items():
            terms[monomial] = terms.get(monomial, 0) + coefficient
        return SymInt(terms)

    __radd__ = __add__

    def __neg__(self) -> SymInt:
        return SymInt({m: -c for m, c in self._terms.items()})

    def __sub__(self, other: SymInt | int) -> SymInt:
        return self + (-_as_symint(other))

    def __rsub__(self, other: SymInt | int) -> SymInt:
        return _as_symint(other) - self

    def __mul__(self, other: SymInt | Coefficient) -> SymInt:
        if isinstance(other, int | Fraction):
            return SymInt({m: c * other for m, c in self._terms.items()})
        terms: dict[Monomial, Coefficient] = {}
        for left, left_coefficient in self._terms.items():
            for right, right_coefficient in other._terms.items():
                monomial = _mul_monomials(left, right)
                terms[monomial] = terms.get(monomial, 0) + left_coefficient * right_coefficient
        return SymInt(terms)

    __rmul__ = __mul__

    def scaled(self, numerator: int, denominator: int = 1) -> SymInt:
        """self * numerator / denominator, exactly (e.g. bits to bytes: scaled(bits, 8))."""
        return self * Fraction(numerator, denominator)

    # ----- inspection ---------------------------------------------------------------------
    @property
    def is_constant(self) -> bool:
        return all(monomial == () for monomial in self._terms)

    @property
    def constant_term(self) -> Coefficient:
        return self._terms.get((), 0)

    def free_symbols(self) -> frozenset[str]:
        names: set[str] = set()
        for monomial in self._terms:
            for factor, _ in monomial:
                names |= _factor_symbols(factor)
        return frozenset(names)

    def terms(self) -> dict[Monomial, Coefficient]:
        return dict(self._terms)

    def __int__(self) -> int:
        if not self.is_constant:
            raise ValueError(f"size {self} depends on unbound dims {sorted(self.free_symbols())}")
        value = self.constant_term
        return int(value) if isinstance(value, int) else _ceil(value)

    def evaluate(self, dims: Mapping[str, int]) -> int:
        """The exact integer size with every dim bound; fractions (sub-byte dtypes) round up."""
        return int(self.bind(dims))

    def bind(self, dims: Mapping[str, int]) -> SymInt:
        """Substitute the dims that are given; the others stay symbolic."""
        if not dims or self.is_constant:
            return self
        result = SymInt()
        for monomial, coefficient in self._terms.items():
            result = result + _bind_monomial(monomial, dims) * coefficient
        return result

    def dominates(self, other: SymInt) -> bool:
        """True when self >= other for every positive value of the dims.

        Sufficient test: every coefficient of self - other is >= 0 (all monomials are
        positive because the dims are). It may answer False for pairs that do compare.
        """
        return all(c >= 0 for c in (self - other)._terms.values())

    # ----- comparison and display ---------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return self.is_constant and self.constant_term == other
        return isinstance(other, SymInt) and self._terms == other._terms

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._terms.items()))
        return self._hash

    def to_sympy(self) -> sympy.Expr:
        total: sympy.Expr = sympy.Integer(0)
        for monomial, coefficient in self._terms.items():
            term: sympy.Expr = sympy.Rational(coefficient.numerator, coefficient.denominator)
            for factor, power in monomial:
                term = term * factor**power
            total = total + term
        return total

    def formula(self) -> str:
        """Python/sympy syntax (`150528*batch + 4096`, powers as `**`) without calling sympy."""
        if not self._terms:
            return "0"
        parts = []
        for monomial, coefficient in sorted(self._terms.items(), key=_term_order):
            factors = [str(f) if p == 1 else f"{_parenthesized(f)}**{p}" for f, p in monomial]
            number = str(coefficient) if isinstance(coefficient, int) else (
                f"{coefficient.numerator}/{coefficient.denominator}")
            parts.append("*".join(factors if number == "1" and factors else [number, *factors]))
        return " + ".join(parts).replace("+ -", "- ")

    def __str__(self) -> str:
        return format_terms(self, str)

    def __repr__(self) -> str:
        return f"SymInt({self})"


def parse_dim(text: str, names: Mapping[str, str] | None = None) -> sympy.Expr:
    """A dim as shape inference writes it (`batch`, `2*seq`, `floor(seq/2)`) as sympy, parsed by
    graphmem's own closed grammar (core/dim_parser.py), never evaluated. `names` maps the safe
    identifiers in the text back to the model's dim names. Text outside the grammar
    (`batch/size`, `N.1`, anything hostile) becomes one opaque symbol of that name.
    """
    try:
        return parse_dim_expression(text, names)
    except DimParseError:
        return dim_symbol(names.get(text, text) if names else text)


def _parenthesized(factor: Factor) -> str:
    text = str(factor)
    return text if factor.is_Symbol else f"({text})"


def _ceil(value: Fraction) -> int:
    return -(-value.numerator // value.denominator)


def _as_symint(value: SymInt | int) -> SymInt:
    return value if isinstance(value, SymInt) else SymInt.const(value)


def _bind_monomial(monomial: Monomial, dims: Mapping[str, int]) -> SymInt:
    result = SymInt.const(1)
    for factor, power in monomial:
        if factor.is_Symbol and factor.name in dims:
            result = result * dims[factor.name] ** power
            continue
        names = {str(s) for s in factor.free_symbols}
        if names and names <= dims.keys():
            value = factor.subs({s: dims[str(s)] for s in factor.free_symbols})
            result = result * _from_sympy_cached(sympy.Integer(value) ** power)
        else:
            result = result * SymInt({((factor, power),): 1})
    return result


@cache
def _from_sympy_cached(expr: sympy.Expr) -> SymInt:
    expanded = sympy.expand(expr)
    if expanded.is_Number:
        return SymInt.const(_to_coefficient(expanded))
    terms: dict[Monomial, Coefficient] = {}
    for monomial_expr, coefficient in expanded.as_coefficients_dict().items():
        monomial = _monomial_of(monomial_expr)
        terms[monomial] = terms.get(monomial, 0) + _to_coefficient(coefficient)
    return SymInt(terms)


def _to_coefficient(number: sympy.Expr) -> Coefficient:
    rational = sympy.Rational(number)
    return Fraction(int(rational.p), int(rational.q))


def _monomial_of(expr: sympy.Expr) -> Monomial:
    if expr == 1:
        return ()
    powers: dict[Factor, int] = {}
    for base, exponent in expr.as_powers_dict().items():
        if exponent.is_Integer and int(exponent) > 0 and (base.is_Symbol or not base.is_Number):
            powers[base] = powers.get(base, 0) + int(exponent)
        else:  # a negative or symbolic power: keep the whole factor opaque
            powers[base**exponent] = powers.get(base**exponent, 0) + 1
    return tuple(sorted(powers.items(), key=_factor_key))


def format_terms(value: SymInt, format_coefficient: object) -> str:
    """Render `c0 + c1*batch + c2*batch*seq`, constant first, coefficients through a formatter.

    `format_coefficient` turns a number into text (e.g. bytes to '97.5 MiB').
    """
    if not value.terms():
        return format_coefficient(0)  # type: ignore[operator]
    parts = []
    for monomial, coefficient in sorted(value.terms().items(), key=_term_order):
        number = coefficient if isinstance(coefficient, int) else float(coefficient)
        text = format_coefficient(number)  # type: ignore[operator]
        factors = "*".join(str(f) if p == 1 else f"{f}^{p}" for f, p in monomial)
        if factors:
            text = factors if text == "1" else f"{text}*{factors}"
        parts.append(text)
    return " + ".join(parts).replace("+ -", "- ")


def _term_order(item: tuple[Monomial, Coefficient]) -> tuple[int, str]:
    monomial = item[0]
    return sum(power for _, power in monomial), str(monomial)


def symint_max(candidates: Iterable[SymInt]) -> list[SymInt]:
    """The candidates that no other candidate dominates (the max over all dim values).

    With every size bound this is a single number; with free dims it can be several
    polynomials, none larger than the others for every dim value.
    """
    unique = list(dict.fromkeys(candidates))
    if all(c.is_constant for c in unique):
        return [max(unique, key=lambda c: c.constant_term)] if unique else []
    kept: list[SymInt] = []
    for candidate in unique:
        if any(k.dominates(candidate) for k in kept):
            continue
        kept = [k for k in kept if not candidate.dominates(k)] + [candidate]
    return kept


def product(values: Iterable[SymInt]) -> SymInt:
    result = SymInt.const(1)
    for value in values:
        result = result * value
    return result
