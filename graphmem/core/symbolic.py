"""Symbolic sizes: polynomials in the model's dynamic dims with exact rational coefficients.

Shape inference speaks sympy (dims such as `batch`, `2*seq`, `floor(seq/2)`); everything after
it adds, subtracts and multiplies sizes thousands of times, so sizes are kept here as a small
polynomial (a dict from monomial to coefficient) that is cheap to add and exact to evaluate.
A factor that is not a plain symbol (`floor(seq/2)`) is kept whole as an opaque factor and
evaluated with sympy when the dims are bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from functools import cache, lru_cache
from typing import TYPE_CHECKING

from graphmem.core.dim_name import Coefficient, DimName, Factor, Monomial, dim_name, plain_dim

if TYPE_CHECKING:
    import sympy


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
    if not left:
        return right
    if not right:
        return left
    powers: dict[Factor, int] = dict(left)
    for factor, power in right:
        powers[factor] = powers.get(factor, 0) + power
    return tuple(sorted(powers.items(), key=_factor_key))


def _normalize(coefficient: Coefficient) -> Coefficient:
    if type(coefficient) is Fraction and coefficient.denominator == 1:
        return coefficient.numerator
    return coefficient


def _new(terms: dict[Monomial, Coefficient]) -> SymInt:
    """A SymInt over `terms` as they are: every coefficient non-zero and normalized (the
    arithmetic below keeps them so; the public constructor checks them)."""
    value = object.__new__(SymInt)
    value._terms = terms
    value._hash = None
    value._free = None
    value._text = None
    if not terms:
        value._const = 0
    elif len(terms) == 1 and () in terms:
        value._const = terms[()]
    else:
        value._const = None
    return value


def _const(number: Coefficient) -> SymInt:
    if type(number) is int:
        cached = _CONSTANTS.get(number)
        if cached is None:
            if len(_CONSTANTS) >= _MAX_CACHED_CONSTANTS:
                _CONSTANTS.clear()
            cached = _CONSTANTS[number] = _new({(): number} if number else {})
        return cached
    number = _normalize(number)
    return _new({(): number} if number != 0 else {})


# Sizes repeat (a decoder's 400 layers have the same few dozen): a constant SymInt is
# immutable, so one object serves every equal integer.
_CONSTANTS: dict[int, SymInt] = {}
_MAX_CACHED_CONSTANTS = 1 << 16
# product's results by factors (SymInts are immutable: a shared result is safe)
_PRODUCTS: dict[tuple[SymInt, ...], SymInt] = {}
_MAX_CACHED_PRODUCTS = 1 << 14


def _add_terms(terms: dict[Monomial, Coefficient], monomial: Monomial,
               coefficient: Coefficient) -> None:
    """terms[monomial] += coefficient, dropping the term where it cancels."""
    total = terms.get(monomial, 0) + coefficient
    if total == 0:
        terms.pop(monomial, None)
    else:
        terms[monomial] = _normalize(total)


class SymInt:
    """An exact size that may depend on dynamic dims: sum of coefficient * monomial.

    Immutable. Most sizes of a bound graph are plain numbers, so a constant keeps its number
    in `_const` and arithmetic between constants never touches the term dicts.
    """

    __slots__ = ("_const", "_free", "_hash", "_terms", "_text")

    _const: Coefficient | None  # the value when constant, else None
    _free: frozenset[str] | None  # free_symbols(), computed once
    _hash: int | None
    _terms: dict[Monomial, Coefficient]
    _text: str | None  # str(self), printed once

    def __init__(self, terms: Mapping[Monomial, Coefficient] | None = None) -> None:
        cleaned = {monomial: _normalize(coefficient)
                   for monomial, coefficient in (terms or {}).items() if coefficient != 0}
        self._terms = cleaned
        self._hash = None
        self._free = None
        self._text = None
        if not cleaned:
            self._const = 0
        elif len(cleaned) == 1 and () in cleaned:
            self._const = cleaned[()]
        else:
            self._const = None

    # ----- construction -------------------------------------------------------------------
    @staticmethod
    def const(value: Coefficient) -> SymInt:
        return _const(value)

    @staticmethod
    def symbol(name: str) -> SymInt:
        return SymInt({((dim_name(name), 1),): 1})

    @staticmethod
    def from_sympy(expr: sympy.Expr | int) -> SymInt:
        # never sympify text: sympy.sympify evaluates Python (core/dim_parser.py parses dim text)
        if isinstance(expr, int):
            return SymInt.const(expr)
        import sympy  # loaded already: expr is one of its expressions

        if not isinstance(expr, sympy.Expr):
            raise TypeError(f"SymInt.from_sympy takes a sympy expression, not {type(expr)}")
        return _from_sympy_cached(expr)

    # ----- arithmetic ---------------------------------------------------------------------
    def __add__(self, other: SymInt | int) -> SymInt:
        if type(other) is int:
            if self._const is not None:
                return _const(self._const + other)
            other = _const(other)
        elif not isinstance(other, SymInt):
            other = SymInt.const(other)
        if self._const is not None and other._const is not None:
            return _const(self._const + other._const)
        if not other._terms:
            return self
        if not self._terms:
            return other
        terms = dict(self._terms)
        for monomial, coefficient in other._terms.items():
            _add_terms(terms, monomial, coefficient)
        return _new(terms)

    __radd__ = __add__

    def __neg__(self) -> SymInt:
        if self._const is not None:
            return _const(-self._const)
        return _new({m: -c for m, c in self._terms.items()})

    def __sub__(self, other: SymInt | int) -> SymInt:
        if type(other) is int and self._const is not None:
            return _const(self._const - other)
        return self + (-_as_symint(other))

    def __rsub__(self, other: SymInt | int) -> SymInt:
        return _as_symint(other) - self

    def __mul__(self, other: SymInt | Coefficient) -> SymInt:
        if isinstance(other, int | Fraction):
            if self._const is not None:
                return _const(self._const * other)
            if other == 0:
                return _const(0)
            return _new({m: _normalize(c * other) for m, c in self._terms.items()})
        if not isinstance(other, SymInt):
            return NotImplemented
        if other._const is not None:
            return self * other._const
        if self._const is not None:
            return other * self._const
        terms: dict[Monomial, Coefficient] = {}
        for left, left_coefficient in self._terms.items():
            for right, right_coefficient in other._terms.items():
                _add_terms(terms, _mul_monomials(left, right),
                           left_coefficient * right_coefficient)
        return _new(terms)

    __rmul__ = __mul__

    def scaled(self, numerator: int, denominator: int = 1) -> SymInt:
        """self * numerator / denominator, exactly (e.g. bits to bytes: scaled(bits, 8))."""
        if denominator == 1:
            return self * numerator
        if numerator % denominator == 0:  # 32 bits = 4 bytes: integers stay integers
            return self * (numerator // denominator)
        return self * Fraction(numerator, denominator)

    # ----- inspection ---------------------------------------------------------------------
    @property
    def is_constant(self) -> bool:
        return self._const is not None

    @property
    def constant_term(self) -> Coefficient:
        return self._terms.get((), 0)

    def free_symbols(self) -> frozenset[str]:
        if self._free is None:
            monomials = [m for m in self._terms if m]
            if not monomials:
                self._free = frozenset()
            elif len(monomials) == 1:
                self._free = _monomial_symbols(monomials[0])
            else:
                self._free = frozenset().union(*map(_monomial_symbols, monomials))
        return self._free

    def terms(self) -> dict[Monomial, Coefficient]:
        return dict(self._terms)

    def __int__(self) -> int:
        value = self._const
        if value is None:
            raise ValueError(f"size {self} depends on unbound dims {sorted(self.free_symbols())}")
        return value if isinstance(value, int) else _ceil(value)

    def evaluate(self, dims: Mapping[str, int]) -> int:
        """The exact integer size with every dim bound; fractions (sub-byte dtypes) round up."""
        return int(self.bind(dims))

    def bind(self, dims: Mapping[str, int]) -> SymInt:
        """Substitute the dims that are given; the others stay symbolic."""
        if self._const is not None or not dims:
            return self
        # a graph's sizes are a few distinct polynomials, bound at the same dims many times
        return _bind_cached(self, tuple(dims.items()))

    def dominates(self, other: SymInt) -> bool:
        """True when self >= other for every positive value of the dims.

        Sufficient test: every coefficient of self - other is >= 0 (all monomials are
        positive because the dims are). It may answer False for pairs that do compare.
        """
        return all(c >= 0 for c in (self - other)._terms.values())

    # ----- comparison and display ---------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return self._const is not None and self._const == other
        return isinstance(other, SymInt) and self._terms == other._terms

    def __hash__(self) -> int:
        if self._hash is None:
            const = self._const
            self._hash = hash(const) if const is not None else hash(frozenset(self._terms.items()))
        return self._hash

    def to_sympy(self) -> sympy.Expr:
        import sympy

        total: sympy.Expr = sympy.Integer(0)
        for monomial, coefficient in self._terms.items():
            term: sympy.Expr = sympy.Rational(coefficient.numerator, coefficient.denominator)
            for factor, power in monomial:
                term = term * (factor.to_sympy() if isinstance(factor, DimName) else factor)**power
            total = total + term
        return total

    def formula(self) -> str:
        """Python/sympy syntax (`150528*batch + 4096`, powers as `**`) without calling sympy."""
        if not self._terms:
            return "0"
        parts = []
        for monomial, coefficient in sorted(self._terms.items(), key=_term_order):
            factors = [_factor_name(f) if p == 1 else f"{_parenthesized(f)}**{p}"
                       for f, p in monomial]
            number = str(coefficient) if isinstance(coefficient, int) else (
                f"{coefficient.numerator}/{coefficient.denominator}")
            parts.append("*".join(factors if number == "1" and factors else [number, *factors]))
        return " + ".join(parts).replace("+ -", "- ")

    def __str__(self) -> str:
        if self._text is None:
            const = self._const
            self._text = str(const) if type(const) is int else format_terms(self, str)
        return self._text

    def __repr__(self) -> str:
        return f"SymInt({self})"


def parse_dim(text: str, names: Mapping[str, str] | None = None) -> sympy.Expr:
    """A dim as shape inference writes it (`batch`, `2*seq`, `floor(seq/2)`) as sympy, parsed by
    graphmem's own closed grammar (core/dim_parser.py), never evaluated. `names` maps the safe
    identifiers in the text back to the model's dim names. Text outside the grammar
    (`batch/size`, `N.1`, anything hostile) becomes one opaque symbol of that name.
    """
    from graphmem.core.dim_name import dim_symbol
    from graphmem.core.dim_parser import DimParseError, parse_dim_expression

    try:
        return parse_dim_expression(text, names)
    except DimParseError:
        return dim_symbol(names.get(text, text) if names else text)


def parse_size(text: str, names: Mapping[str, str] | None = None) -> SymInt:
    """`SymInt.from_sympy(parse_dim(text, names))`; a plain name (`batch`) without sympy."""
    if plain_dim(text):
        return SymInt.symbol(names.get(text, text) if names else text)
    return SymInt.from_sympy(parse_dim(text, names))


def _parenthesized(factor: Factor) -> str:
    text = _factor_name(factor)
    return text if factor.is_Symbol else f"({text})"


def _ceil(value: Fraction) -> int:
    return -(-value.numerator // value.denominator)


def _as_symint(value: SymInt | int) -> SymInt:
    return value if isinstance(value, SymInt) else SymInt.const(value)


@lru_cache(maxsize=1 << 16)
def _bind_cached(value: SymInt, dims: tuple[tuple[str, int], ...]) -> SymInt:
    given = value.free_symbols() & {name for name, _ in dims}
    if not given:
        return value
    key = tuple(sorted((name, number) for name, number in dims if name in given))
    terms: dict[Monomial, Coefficient] = {}
    for monomial, coefficient in value._terms.items():
        for bound, factor in _bind_monomial(monomial, key).items():
            _add_terms(terms, bound, factor * coefficient)
    return _new(terms)


@lru_cache(maxsize=1 << 16)
def _bind_monomial(monomial: Monomial,
                   dims: tuple[tuple[str, int], ...]) -> dict[Monomial, Coefficient]:
    """`monomial` with `dims` substituted, as terms (read-only: the result is cached)."""
    values = dict(dims)
    coefficient: Coefficient = 1
    kept: dict[Factor, int] = {}
    for factor, power in monomial:
        if factor.is_Symbol and factor.name in values:
            coefficient *= values[factor.name] ** power
            continue
        names = _factor_symbols(factor)
        if names and names <= values.keys():
            coefficient *= _opaque_value(factor, values, power)
        else:
            kept[factor] = kept.get(factor, 0) + power
    if coefficient == 0:
        return {}
    bound = tuple(sorted(kept.items(), key=_factor_key))
    return {bound: _normalize(coefficient)}


@lru_cache(maxsize=1 << 16)
def _monomial_symbols(monomial: Monomial) -> frozenset[str]:
    return frozenset().union(*(_factor_symbols(factor) for factor, _ in monomial))


@cache
def _from_sympy_cached(expr: sympy.Expr) -> SymInt:
    from graphmem.core.sympy_terms import expression_terms

    return SymInt(expression_terms(expr))


def _opaque_value(factor: Factor, values: Mapping[str, int], power: int) -> Coefficient:
    from graphmem.core.sympy_terms import opaque_value

    return opaque_value(factor, values, power)


def format_terms(value: SymInt, format_coefficient: Callable[[int | float], str]) -> str:
    """Render `c0 + c1*batch + c2*batch*seq`, constant first, coefficients through a formatter.

    `format_coefficient` turns a number into text (e.g. bytes to '97.5 MiB').
    """
    if not value.terms():
        return format_coefficient(0)
    parts = []
    for monomial, coefficient in sorted(value.terms().items(), key=_term_order):
        number = coefficient if isinstance(coefficient, int) else float(coefficient)
        text = format_coefficient(number)
        factors = "*".join(_factor_name(f) if p == 1 else f"{_factor_name(f)}^{p}"
                             for f, p in monomial)
        if factors:
            text = factors if text == "1" else f"{text}*{factors}"
        parts.append(text)
    return " + ".join(parts).replace("+ -", "- ")


def _term_order(item: tuple[Monomial, Coefficient]) -> tuple[int, str]:
    return _monomial_order(item[0])


@lru_cache(maxsize=1 << 14)
def _monomial_order(monomial: Monomial) -> tuple[int, str]:
    # the order terms are written in: by degree, then as the monomial prints. Printing runs
    # sympy's printer on every factor (about 5 us each), and a report with free dims sorts
    # the same few monomials 70,000 times: each is printed once
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
    """The product of `values`, remembered by factors: the passes ask for the element count
    of the same few shapes tens of thousands of times (an 80-layer decoder: 50,000 calls,
    a few hundred shapes), and a product of polynomials builds one per multiplication."""
    factors = tuple(values)
    cached = _PRODUCTS.get(factors)
    if cached is None:
        if len(_PRODUCTS) >= _MAX_CACHED_PRODUCTS:
            _PRODUCTS.clear()
        cached = _PRODUCTS[factors] = _product(factors)
    return cached


def _product(values: tuple[SymInt, ...]) -> SymInt:
    number: Coefficient = 1  # the constant factors, multiplied as numbers
    result: SymInt | None = None
    for value in values:
        if value._const is not None:
            number *= value._const
        else:
            result = value if result is None else result * value
    if result is None:
        return _const(number)
    return result * number


def sum_sizes(values: Iterable[SymInt]) -> SymInt:
    """The sum of `values`, adding the constant ones as numbers and the polynomials' terms in
    one dict (`sum(values, SymInt())` builds a polynomial per addition)."""
    number: Coefficient = 0
    terms: dict[Monomial, Coefficient] = {}
    for value in values:
        if value._const is not None:
            number += value._const
            continue
        for monomial, coefficient in value._terms.items():
            _add_terms(terms, monomial, coefficient)
    if not terms:
        return _const(number)  # all constants (a bound graph's sizes): no dict to build
    if number:
        _add_terms(terms, (), number)
    return _new(terms)
