"""`--margin 10%`: headroom the GPU's verdict must leave, for errors the prediction may have.

It holds when device total x (1 + margin) <= the GPU's memory: the verdict's own two numbers
(graphmem/passes/fit.py GpuFit `required_bytes`, `capacity_bytes`), compared exactly (a
Fraction, not a float) so the boundary is exact to the byte. The measured error of each
verdict path (JSON `gpu.error_band`) is what a margin guards against.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from graphmem.errors import SpecError

MAX_PERCENT = 1000  # a margin of 10x the device total: beyond that, a typo


@dataclass(frozen=True)
class Margin:
    """Headroom over the device total, as a share of it (`10%`: percent = 10)."""

    text: str
    percent: Fraction  # exact: 12.5% is 25/2, never 0.125 rounded


def parse_margin(text: str) -> Margin:
    """`10%` -> Margin; the % sign is required (10 alone: 10% or 10x?)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*%\s*", str(text))
    if not match:
        raise SpecError(f"'{text}' is not a margin such as 10% (of the device total)")
    percent = Fraction(match.group(1))
    if percent > MAX_PERCENT:
        raise SpecError(f"'{text}': a margin above {MAX_PERCENT}% of the device total is"
                        " surely a typo")
    return Margin(str(text).strip(), percent)


def with_margin_bytes(device_total_bytes: int, margin: Margin) -> Fraction:
    """device total x (1 + percent / 100), exactly: it holds when this is <= the capacity."""
    return device_total_bytes * (100 + margin.percent) / 100
