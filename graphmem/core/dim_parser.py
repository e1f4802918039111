"""A small, safe grammar for the dim expressions shape inference writes (`2*seq`, `floor(seq/2)`).

A model is untrusted data. Its dim names are names: they become sympy symbols by name and are
never parsed. Only the expressions that shape inference writes back (onnxruntime's symbolic
inference prints sympy expressions over the model's dims, renamed to safe identifiers before it
runs) are parsed, here, by a recursive-descent parser of a closed grammar:

    expr   := term (('+' | '-') term)*
    term   := unary (('*' | '/' | '//' | '%') unary)*
    unary  := '-' unary | power
    power  := atom ('**' INTEGER)?            exponent 0..MAX_EXPONENT
    atom   := NUMBER | NAME | FUNC '(' expr (',' expr)* ')' | '(' expr ')'
    FUNC   := floor | ceiling | Max | Min | Mod

Nothing is evaluated but integer and rational arithmetic and those five sympy functions; the
text, the token count, the nesting and every constant are bounded, so no input runs code, hangs
or overflows. Whatever does not parse, or is not a positive-integer-valued size (`1/0`,
`Mod(b, 0)`, `2**-2`, `1e999`), is refused with DimParseError and the caller keeps the text as
one opaque name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from fractions import Fraction

import sympy

from graphmem.core.dim_name import dim_symbol

__all__ = ["DimParseError", "dim_symbol", "parse_dim_expression"]

MAX_TEXT_CHARS = 512
MAX_TOKENS = 256
MAX_DEPTH = 32
MAX_EXPONENT = 8
MAX_CONSTANT = 2**62  # larger than any tensor dim; bigger constants are not sizes
MAX_LITERAL_DIGITS = 24

_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|([A-Za-z_][A-Za-z_0-9]*)|(\*\*|//|[-+*/%(),]))")
_FUNCTIONS: dict[str, Callable[..., sympy.Expr]] = {
    "floor": sympy.floor, "ceiling": sympy.ceiling, "Max": sympy.Max, "Min": sympy.Min,
    "Mod": sympy.Mod,
}
_ARITY = {"floor": (1, 1), "ceiling": (1, 1), "Max": (2, 16), "Min": (2, 16), "Mod": (2, 2)}


class DimParseError(ValueError):
    """The text is not a dim expression of the grammar above."""


def parse_dim_expression(text: str, names: Mapping[str, str] | None = None) -> sympy.Expr:
    """The sympy expression of `text`; `names` maps identifiers in it to dim names (the safe
    aliases the importer gave the model's dims). Raises DimParseError."""
    if len(text) > MAX_TEXT_CHARS:
        raise DimParseError(f"longer than {MAX_TEXT_CHARS} characters")
    parser = _Parser(_tokens(text), names or {})
    expr = parser.expression(0)
    if parser.position != len(parser.tokens):
        raise DimParseError(f"unexpected {parser.tokens[parser.position]!r}")
    _check_size(expr)
    return expr


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    stripped = text.rstrip()
    while position < len(stripped):
        match = _TOKEN.match(stripped, position)
        if match is None:
            raise DimParseError(f"unexpected character {stripped[position]!r}")
        tokens.append(match.group(match.lastindex or 0))
        position = match.end()
        if len(tokens) > MAX_TOKENS:
            raise DimParseError(f"more than {MAX_TOKENS} tokens")
    if not tokens:
        raise DimParseError("empty")
    return tokens


def _check_size(expr: sympy.Expr) -> None:
    """A size: no infinity or NaN anywhere; a constant must be a positive integer."""
    if expr.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo):
        raise DimParseError("not finite")
    if expr.is_number and not (expr.is_Integer and 0 < int(expr) <= MAX_CONSTANT):
        raise DimParseError(f"{expr} is not a positive integer size")


class _Parser:
    def __init__(self, tokens: list[str], names: Mapping[str, str]) -> None:
        self.tokens = tokens
        self.names = names
        self.position = 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise DimParseError(f"expected {expected or 'more'}, got {token!r}")
        self.position += 1
        return token

    def expression(self, depth: int) -> sympy.Expr:
        if depth > MAX_DEPTH:
            raise DimParseError(f"nested deeper than {MAX_DEPTH}")
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            operator = self.take()
            right = self.term(depth)
            value = _bounded(value + right if operator == "+" else value - right)
        return value

    def term(self, depth: int) -> sympy.Expr:
        value = self.unary(depth)
        while self.peek() in ("*", "/", "//", "%"):
            operator = self.take()
            value = _bounded(_binary(operator, value, self.unary(depth)))
        return value

    def unary(self, depth: int) -> sympy.Expr:
        if self.peek() == "-":
            self.take()
            return -self.unary(depth + 1)
        return self.power(depth)

    def power(self, depth: int) -> sympy.Expr:
        base = self.atom(depth)
        if self.peek() != "**":
            return base
        self.take()
        exponent = self.take()
        if not exponent.isdigit() or int(exponent) > MAX_EXPONENT:
            raise DimParseError(f"exponent {exponent!r}: only 0..{MAX_EXPONENT}")
        return _bounded(base ** int(exponent))

    def atom(self, depth: int) -> sympy.Expr:
        token = self.take()
        if token == "(":
            value = self.expression(depth + 1)
            self.take(")")
            return value
        if token[0].isdigit():
            return _number(token)
        if not (token[0].isalpha() or token[0] == "_"):
            raise DimParseError(f"unexpected {token!r}")
        if self.peek() == "(":
            return self.call(token, depth)
        return dim_symbol(self.names.get(token, token))

    def call(self, function: str, depth: int) -> sympy.Expr:
        if function not in _FUNCTIONS:
            raise DimParseError(f"unknown function {function!r}")
        self.take("(")
        arguments = [self.expression(depth + 1)]
        while self.peek() == ",":
            self.take()
            arguments.append(self.expression(depth + 1))
        self.take(")")
        low, high = _ARITY[function]
        if not low <= len(arguments) <= high:
            raise DimParseError(f"{function} takes {low}..{high} arguments")
        if function == "Mod" and arguments[1].is_number and arguments[1] == 0:
            raise DimParseError("Mod by zero")
        return _bounded(_FUNCTIONS[function](*arguments))


def _number(token: str) -> sympy.Expr:
    if len(token) > MAX_LITERAL_DIGITS:
        raise DimParseError(f"number {token[:12]}... too long")
    value = Fraction(token)  # exact: Resize writes scales as `1.5*h`
    return _bounded(sympy.Rational(value.numerator, value.denominator))


def _binary(operator: str, left: sympy.Expr, right: sympy.Expr) -> sympy.Expr:
    if operator == "*":
        return left * right
    if right.is_number and right == 0:
        raise DimParseError("division by zero")
    if operator == "/":
        return left / right
    if operator == "//":
        return sympy.floor(left / right)
    return sympy.Mod(left, right)


def _bounded(expr: sympy.Expr) -> sympy.Expr:
    """Every constant on the way stays below MAX_CONSTANT in size (numerator and denominator)."""
    for atom in expr.atoms(sympy.Rational):
        if abs(atom.p) > MAX_CONSTANT or atom.q > MAX_CONSTANT:
            raise DimParseError("a constant beyond any tensor size")
    if expr.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo):
        raise DimParseError("not finite")
    return expr
