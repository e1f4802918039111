"""Quantities of the HTML report: a result's SymInt (or int), formatted for people, with its exact
value for the tooltip and one number to sort and draw by (free dims at PROBE_DIM_VALUE)."""

from __future__ import annotations

from functools import cache
from typing import NamedTuple

from graphmem.core.conventions import PROBE_DIM_VALUE
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes, format_bytes_sym, format_si, format_si_sym

# Free dims are set to PROBE_DIM_VALUE wherever a formula must become one number (charts, bars,
# sorting): the value the liveness pass picks the peak step at, so the step marked as the peak
# is the highest point drawn, and what grows with the batch or the sequence shows next to the
# weights (at 1 a GPT-2's timeline is a flat band of weights). The formulas next to the charts
# give the size at any other value.
__all__ = ["PROBE_DIM_VALUE", "Quantity", "bytes_quantity", "count_quantity", "format_time"]


class Quantity(NamedTuple):
    exact: int | str | None  # an integer, the formula (as the JSON writes it), None: not counted
    text: str  # for people: IEC bytes or SI counts, term by term for a formula
    probe: int  # the value with every free dim at PROBE_DIM_VALUE (sorting, bars, charts)
    probe_text: str = ""  # `probe` for people, where a bar needs one short number

    @property
    def is_formula(self) -> bool:
        return isinstance(self.exact, str)

    @property
    def exact_text(self) -> str:
        """The exact value: 1,149,352 or the formula."""
        return f"{self.exact:,}" if isinstance(self.exact, int) else str(self.exact)


def as_symint(value: SymInt | int) -> SymInt:
    return value if isinstance(value, SymInt) else SymInt.const(value)


def probe(value: SymInt | int) -> int:
    """`value` with every free dim at PROBE_DIM_VALUE."""
    value = as_symint(value)
    if value.is_constant:  # most sizes of a bound graph: nothing to evaluate
        return int(value)
    return value.evaluate(dict.fromkeys(value.free_symbols(), PROBE_DIM_VALUE))


def exact(value: SymInt) -> int | str:
    """The exact value as the JSON writes it: an int, or the formula in the free dims."""
    return int(value) if value.is_constant else value.formula()


@cache  # a graph repeats the same few sizes thousands of times
def _bytes(value: SymInt) -> Quantity:
    at_probe = probe(value)
    return Quantity(exact(value), format_bytes_sym(value), at_probe, format_bytes(at_probe))


def bytes_quantity(value: SymInt | int) -> Quantity:
    return _bytes(as_symint(value))


@cache
def _count(value: SymInt, unit: str) -> Quantity:
    at_probe = probe(value)
    return Quantity(exact(value), format_si_sym(value, unit), at_probe, format_si(at_probe, unit))


def count_quantity(value: SymInt | int | None, unit: str = "") -> Quantity:
    """A count for display; None (not counted: no rule or no shape) shows as such, not 0."""
    if value is None:
        return Quantity(None, "not counted", -1)
    return _count(as_symint(value), unit)


def percent(part: int | float, whole: int | float) -> float:
    """part / whole in percent; 0 when the whole is 0 (nothing to share)."""
    return 100.0 * part / whole if whole > 0 else 0.0


_TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("\u00b5s", 1e-6))


def format_time(seconds: float) -> str:
    """0.0123 -> '12.3 ms', 5.72e-05 -> '57.2 µs': the terminal's format_seconds
    (report/terminal/plan.py, which keeps ASCII "us"), with the micro sign for the page."""
    for unit, scale in _TIME_UNITS:
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
