"""Units as DESIGN.md states them: memory in IEC (MiB, GiB), rates and FLOPs in SI."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from graphmem.core.symbolic import SymInt, format_terms

# The largest byte count graphmem accepts, given or computed: 4 EiB. A few such counts still
# add up inside a signed 64-bit integer (a C long, numpy's int64, JSON readers' int64).
MAX_BYTES = 1 << 62
# The largest count (parameters, FLOPs) a budget may give: a signed 64-bit integer.
MAX_COUNT = (1 << 63) - 1

_IEC = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
_SI = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def format_bytes(count: int | float | Fraction) -> str:
    """1536 -> '1.5 KiB'; 0 -> '0 B'."""
    value = float(count)
    for unit, size in _IEC:
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B" if value == int(value) else f"{value:.1f} B"


def format_si(count: int | float | Fraction, unit: str = "") -> str:
    """4.09e9 -> '4.09 G' + unit."""
    value = float(count)
    for prefix, size in _SI:
        if abs(value) >= size:
            return f"{value / size:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}".rstrip()


def format_bytes_sym(value: SymInt) -> str:
    """Bytes, or a formula such as '97.5 MiB + 23.0 MiB*batch' when dims are free."""
    return format_terms(value, format_bytes)


def format_rate(per_second: float, unit: str) -> str:
    """A rate such as samples per second: whole numbers with thousands separators from 100
    on, three significant digits below (a 2.2 s step is '0.455 samples/s', not '0')."""
    if abs(per_second) >= 100:
        return f"{per_second:,.0f} {unit}"
    return f"{per_second:.3g} {unit}"


def format_si_sym(value: SymInt, unit: str = "") -> str:
    return format_terms(value, lambda c: format_si(c, unit))


def format_sym_or_max(candidates: tuple[SymInt, ...], formatter: Callable[[SymInt], str]) -> str:
    """One formula, or max(a, b) when no single formula is the largest for every dim value."""
    texts = [formatter(c) for c in candidates]
    return texts[0] if len(texts) == 1 else "max(" + ", ".join(texts) + ")"


def count_noun(count: int, singular: str, plural: str | None = None) -> str:
    """`1 budget`, `2 budgets`, `1,024 views`: a count with its noun in the right number."""
    noun = singular if count == 1 else (plural or f"{singular}s")
    return f"{count:,} {noun}"
