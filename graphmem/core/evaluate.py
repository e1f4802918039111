"""Fast exact evaluation of sizes at bound dims, for passes that evaluate thousands of them.

`SymInt.evaluate` goes through `bind`, which builds new polynomials; a schedule, an arena plan
or a sweep point evaluates every tensor's size, so here each polynomial is compiled once into
plain integer arithmetic (opaque factors such as `floor(seq/2)` still go through sympy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from fractions import Fraction

from graphmem.core.symbolic import SymInt

Evaluator = Callable[[Mapping[str, int]], int]


def compile_count(value: SymInt) -> Evaluator:
    """A function giving `value.evaluate(dims)`, exactly (fractions of a byte round up)."""
    if value.is_constant:
        constant = int(value)
        return lambda dims: constant
    terms = value.terms()
    if not all(factor.is_Symbol for monomial in terms for factor, _ in monomial):
        return value.evaluate
    plain = [(coefficient, [(factor.name, power) for factor, power in monomial])
             for monomial, coefficient in terms.items()]

    def evaluate(dims: Mapping[str, int]) -> int:
        total: int | Fraction = 0
        for coefficient, factors in plain:
            term = coefficient
            for name, power in factors:
                term *= dims[name] ** power
            total += term
        return math.ceil(total)

    return evaluate


def evaluate(value: SymInt, dims: Mapping[str, int]) -> int:
    """`value.evaluate(dims)` without building intermediate polynomials."""
    return compile_count(value)(dims)
