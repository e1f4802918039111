"""sympy expressions to and from graphmem's polynomial terms (core/symbolic.py imports this only
where a size is a sympy expression: onnxruntime's rules, `floor(seq/2)`, Resize's scales)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import sympy

from graphmem.core.dim_name import Coefficient, DimName, Factor, Monomial, dim_name


def expression_terms(expr: sympy.Expr) -> dict[Monomial, Coefficient]:
    """`expr` expanded: coefficient by monomial, a plain symbol as its DimName (one key per dim
    whichever way it was made), any other factor kept whole (opaque)."""
    expanded = sympy.expand(expr)
    if expanded.is_Number:
        return {(): _to_coefficient(expanded)}
    terms: dict[Monomial, Coefficient] = {}
    for monomial_expr, coefficient in expanded.as_coefficients_dict().items():
        monomial = _monomial_of(monomial_expr)
        terms[monomial] = terms.get(monomial, 0) + _to_coefficient(coefficient)
    return terms


def opaque_value(factor: Factor, values: Mapping[str, int], power: int) -> Coefficient:
    """factor ** power with every dim in it bound (`floor(seq/2)` at seq=7, squared: 9); a
    plain dim is bound by its name before it gets here (symbolic.py `_bind_monomial`)."""
    assert not isinstance(factor, DimName)
    value = factor.subs({s: values[str(s)] for s in factor.free_symbols})
    return _to_coefficient(sympy.Integer(value) ** power)


def _to_coefficient(number: sympy.Expr) -> Coefficient:
    rational = sympy.Rational(number)
    return Fraction(int(rational.p), int(rational.q))


def _monomial_of(expr: sympy.Expr) -> Monomial:
    if expr == 1:
        return ()
    powers: dict[Factor, int] = {}
    for base, exponent in expr.as_powers_dict().items():
        if exponent.is_Integer and int(exponent) > 0 and (base.is_Symbol or not base.is_Number):
            factor = dim_name(base.name) if base.is_Symbol else base
            powers[factor] = powers.get(factor, 0) + int(exponent)
        else:  # a negative or symbolic power: keep the whole factor opaque
            powers[base**exponent] = powers.get(base**exponent, 0) + 1
    return tuple(sorted(powers.items(), key=lambda item: str(item[0])))
