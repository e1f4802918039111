"""Quantities of the HTML report: the JSON's int-or-formula values, formatted for people and
with one number to sort and draw by (free dims at PROBE_DIM_VALUE)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from graphmem.core.symbolic import SymInt, parse_dim
from graphmem.core.units import format_bytes_sym, format_si_sym

# Free dims are set to this value wherever a formula must become one number (charts, bars,
# sorting): the value the liveness pass picks the peak step at (passes/liveness.py), so the
# step marked as the peak is the highest point drawn, and what grows with the batch or the
# sequence shows next to the weights (at 1 a GPT-2's timeline is a flat band of weights).
# The formulas next to the charts give the size at any other value.
PROBE_DIM_VALUE = 64


@dataclass(frozen=True)
class Quantity:
    exact: int | str | None  # as the JSON has it: an integer, a formula, or None (not counted)
    text: str  # for people: IEC bytes or SI counts, term by term for a formula
    probe: int  # the value with every free dim at PROBE_DIM_VALUE (sorting, bars, charts)

    @property
    def is_formula(self) -> bool:
        return isinstance(self.exact, str)

    @property
    def exact_text(self) -> str:
        """The exact value: 1,149,352 or the formula."""
        return f"{self.exact:,}" if isinstance(self.exact, int) else self.exact


@cache  # a graph repeats the same few sizes thousands of times
def bytes_quantity(value: int | str) -> Quantity:
    size = _as_symint(value)
    return Quantity(value, format_bytes_sym(size), _probe(size))


@cache
def count_quantity(value: int | str | None, unit: str = "") -> Quantity:
    """A count for display; None (not counted: no rule or no shape) shows as such, not 0."""
    if value is None:
        return Quantity(None, "not counted", -1)
    count = _as_symint(value)
    return Quantity(value, format_si_sym(count, unit), _probe(count))


def _probe(value: SymInt) -> int:
    return value.evaluate(dict.fromkeys(value.free_symbols(), PROBE_DIM_VALUE))


@cache
def _as_symint(value: int | str) -> SymInt:
    """A JSON quantity back as a SymInt: an int, or sympy's text of a polynomial.

    Polynomials with integer coefficients ("143360*batch + 2472", "2*batch**2*seq") are read
    directly: sympy takes about a millisecond per formula, and a large graph has thousands.
    Anything else (fractions, floor(...)) goes through sympy.
    """
    if isinstance(value, int):
        return SymInt.const(value)
    terms = re.split(r"\s+([+-])\s+", value.strip())
    signs, texts = ["+", *terms[1::2]], terms[0::2]
    total = SymInt()
    for sign, text in zip(signs, texts, strict=True):
        term = _monomial(text.removeprefix("-"))
        if term is None:
            return SymInt.from_sympy(parse_dim(value))
        negative = (sign == "-") != text.startswith("-")
        total = total - term if negative else total + term
    return total


def _monomial(text: str) -> SymInt | None:
    """'143360*batch' or '2*batch**2*seq' as a SymInt; None for anything else."""
    term = SymInt.const(1)
    for index, factor in enumerate(text.replace("**", "^").split("*")):
        if index == 0 and factor.isdigit():
            term = term * int(factor)
            continue
        name, _, power = factor.partition("^")
        if not name.isidentifier() or not (power == "" or power.isdigit()):
            return None
        for _ in range(int(power or 1)):
            term = term * SymInt.symbol(name)
    return term


_TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("\u00b5s", 1e-6))


def format_time(seconds: float) -> str:
    """0.0123 -> '12.3 ms', 5.72e-05 -> '57.2 µs': the terminal's format_seconds
    (report/terminal/plan.py, which keeps ASCII "us"), with the micro sign for the page."""
    for unit, scale in _TIME_UNITS:
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
