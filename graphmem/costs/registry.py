"""One registry of per-op cost formulas, filled by a decorator that rejects duplicates.

A rule is a small pure function of a node's shapes and attributes that returns its MACs and
FLOPs. Bytes read and written are not per-op: they are the sizes of the node's inputs and
outputs, computed once in the costs pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from graphmem.ir import Node, Value
from graphmem.symbolic import SymInt


@dataclass(frozen=True)
class OpCost:
    """Arithmetic of one node. A multiply-accumulate is 1 MAC and 2 FLOPs."""

    macs: SymInt
    flops: SymInt

    @staticmethod
    def zero() -> OpCost:
        return OpCost(SymInt(), SymInt())

    @staticmethod
    def from_macs(macs: SymInt) -> OpCost:
        return OpCost(macs=macs, flops=macs * 2)

    @staticmethod
    def from_flops(flops: SymInt) -> OpCost:
        return OpCost(macs=SymInt(), flops=flops)

    def __add__(self, other: OpCost) -> OpCost:
        return OpCost(self.macs + other.macs, self.flops + other.flops)


class ShapeUnknownError(Exception):
    """A rule needs a shape that shape inference did not provide."""


CostRule = Callable[[Node], OpCost]
_RULES: dict[tuple[str, str], CostRule] = {}


def register(*op_types: str, domain: str = "") -> Callable[[CostRule], CostRule]:
    """Register `rule` for each op type; registering an op twice is a programming error."""

    def decorate(rule: CostRule) -> CostRule:
        for op_type in op_types:
            key = (_canonical_domain(domain), op_type)
            if key in _RULES:
                raise ValueError(f"cost rule for {op_type!r} (domain {domain!r}) registered twice")
            _RULES[key] = rule
        return rule

    return decorate


def _canonical_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def find_rule(op_type: str, domain: str = "") -> CostRule | None:
    return _RULES.get((_canonical_domain(domain), op_type))


def registered_ops() -> list[tuple[str, str]]:
    return sorted(_RULES)


# ----- shared helpers for rules ---------------------------------------------------------------
def known_numel(value: Value | None, node: Node) -> SymInt:
    """numel of a value, or ShapeUnknownError naming the node."""
    if value is None or value.numel is None:
        name = "a missing input" if value is None else value.name
        raise ShapeUnknownError(f"{node.describe()}: shape of {name} is unknown")
    return value.numel


def known_shape(value: Value | None, node: Node) -> tuple[SymInt, ...]:
    if value is None or not value.shape_known or value.shape is None:
        name = "a missing input" if value is None else value.name
        raise ShapeUnknownError(f"{node.describe()}: shape of {name} is unknown")
    return tuple(d for d in value.shape if d is not None)


def output_numel(node: Node, index: int = 0) -> SymInt:
    if index >= len(node.outputs):
        raise ShapeUnknownError(f"{node.describe()}: has no output {index}")
    return known_numel(node.outputs[index], node)


def input_numel(node: Node, index: int) -> SymInt:
    """numel of input `index`, or ShapeUnknownError (also when the input is missing)."""
    return known_numel(node.input(index), node)


def known_dim(value: Value | None, axis: int, node: Node) -> SymInt:
    """One dim of a value (negative axes count from the end), or ShapeUnknownError.

    Only that dim must be known: a rule that needs k of a MatMul does not care whether shape
    inference found the batch size.
    """
    name = "a missing input" if value is None else value.name
    if value is None or value.shape is None:
        raise ShapeUnknownError(f"{node.describe()}: rank of {name} is unknown")
    rank = len(value.shape)
    if not -rank <= axis < rank:
        raise ShapeUnknownError(f"{node.describe()}: {name} has rank {rank}, no axis {axis}")
    dim = value.shape[axis]
    if dim is None:
        raise ShapeUnknownError(f"{node.describe()}: dim {axis} of {name} is unknown")
    return dim


def known_rank(value: Value | None, node: Node) -> int:
    if value is None or value.shape is None:
        name = "a missing input" if value is None else value.name
        raise ShapeUnknownError(f"{node.describe()}: rank of {name} is unknown")
    return len(value.shape)
