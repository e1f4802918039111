"""Sizes and counts in the free dims, as a person reads them in the terminal.

One convention for every polynomial shown: the coefficient first, with its unit, then the dims
joined by `·` with superscript powers (core/peak_formula.py `readable`): `97.4 MiB + 9.8
MiB·batch`, `247.55 MFLOP·batch·seq + 0.0833 FLOP·seq²`. Nothing reads like a division: a
fractional coefficient is written as a decimal. A peak that is the largest of several
polynomials is shown by core/peak_formula.py `Formula.display`: the leading polynomial on each
range of one free dim, or the leader at the probe value with several; never the whole max(...).
"""

from __future__ import annotations

from fractions import Fraction

from graphmem.core.conventions import PROBE_DIM_VALUE
from graphmem.core.peak_formula import Formula, readable
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes, format_si

_SMALL = 1000  # below this an SI prefix is not used: a fraction keeps 3 significant digits


def size_text(value: SymInt) -> str:
    """Bytes: `409.8 MiB`, or `97.4 MiB + 9.8 MiB·batch` with free dims."""
    return format_bytes(int(value)) if value.is_constant else readable(value, format_bytes)


def count_text(value: SymInt, unit: str = "") -> str:
    """A count (FLOPs, MACs) in SI: `8.20 GFLOP·batch`, `0.0833 FLOP·seq²`."""
    if value.is_constant:
        return format_si(int(value), unit)
    return readable(value, lambda number: _si(number, unit))


def peak_text(candidates: tuple[SymInt, ...]) -> str:
    """A peak: a number, one polynomial, or the exact largest of several, readable."""
    if len(candidates) == 1:
        return size_text(candidates[0])
    return Formula(candidates).display()


def _si(number: int | float | Fraction, unit: str) -> str:
    """format_si, except that a fraction below 1000 keeps its digits (1/12 is 0.0833, not 0)."""
    value = float(number)
    if abs(value) < _SMALL and value != int(value):
        return f"{value:.3g} {unit}".rstrip()
    return format_si(value, unit)


def probe_value(value: SymInt) -> int:
    """`value` where every free dim is PROBE_DIM_VALUE: an order for sizes in free dims."""
    if value.is_constant:
        return int(value)
    return value.evaluate(dict.fromkeys(value.free_symbols(), PROBE_DIM_VALUE))
