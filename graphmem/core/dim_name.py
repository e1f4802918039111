"""A dynamic dim as a factor of a size, without sympy.

Most sizes are polynomials in plain dims (`150528*batch + 4096`), and most commands never need
more: an ONNX file names its dims (`batch`, `seq`), and every pass adds, multiplies and binds
them. sympy (about 0.2 s to import, as long as onnx and numpy together) is needed only where
shape inference writes an expression (`floor(seq/2)`, onnxruntime's rules) or a formula's roots
are isolated; a plain dim is this small class, equal to sympy's positive integer symbol of the
same name where the two meet (core/symbolic.py turns one into the other).
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import cache
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    import sympy

# what the dim grammar (core/dim_parser.py) reads as one NAME: such a text is the plain dim
_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


class DimName:
    """A plain dynamic dim (a positive integer) in a monomial. It answers what the passes ask
    of a sympy factor (`is_Symbol`, `name`, `free_symbols`, its text) and prints as sympy
    prints the symbol, so sorted terms and formulas read the same with either."""

    __slots__ = ("name",)
    is_Symbol = True
    is_Number = False

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is DimName and other.name == self.name

    def __hash__(self) -> int:
        return hash((DimName, self.name))

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__

    @property
    def free_symbols(self) -> frozenset[DimName]:
        return frozenset((self,))

    def to_sympy(self) -> sympy.Symbol:
        return dim_symbol(self.name)


@cache
def dim_name(name: str) -> DimName:
    return DimName(name)


def plain_dim(text: str) -> bool:
    """True when `text` is one name of the dim grammar: the dim it names, nothing to parse."""
    return _NAME.fullmatch(text) is not None


# A monomial is a sorted tuple of (factor, power); the empty tuple is the constant term. A plain
# dim is a DimName (no sympy needed), any other factor (`floor(seq/2)`) a sympy expression.
Factor = Union[DimName, "sympy.Expr"]
Monomial = tuple[tuple[Factor, int], ...]
Coefficient = int | Fraction


@cache
def dim_symbol(name: str) -> sympy.Symbol:
    """The one sympy symbol for a dynamic dim: a positive integer, named, never parsed."""
    import sympy

    return sympy.Symbol(name, integer=True, positive=True)
