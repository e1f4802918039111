"""One registry of per-op cost formulas, filled by a decorator that rejects duplicates.

A rule is a small pure function of a node's shapes and attributes that returns its MACs and
FLOPs. Bytes read and written are not per-op: they are the sizes of the node's inputs and
outputs, computed once in the costs pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from graphmem.core.ir import DType, Node, Shape, Value
from graphmem.core.symbolic import SymInt


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


# ----- backward rules: what autograd saves, what the backward computes ------------------------
# The training expansion (graphmem/training/expand.py) reads these. Each rule follows what
# PyTorch's autograd saves for the aten op the ONNX op comes from (tools/autograd/
# derivatives.yaml): `result` is an output, `self`/`other` inputs; `wrap_opt_if(x, mask[i])`
# saves x only when input i needs a gradient, which `needed_for` says here.
@dataclass(frozen=True)
class SavedTensor:
    """One tensor autograd keeps from the forward for an op's backward."""

    kind: str  # "input" | "output" | "extra" (a tensor the training op makes besides outputs)
    index: int = 0  # input or output position
    # saved only when one of these inputs needs a gradient (None: whenever any does)
    needed_for: tuple[int, ...] | None = None
    label: str = ""  # extra: what it is ("mean", "rstd", "mask", "indices")
    dtype: DType | None = None  # extra: its element type (None: output 0's)
    shape: Callable[[Node], Shape] | None = None  # extra: its shape


def saved_input(index: int, needed_for: tuple[int, ...] | None = None) -> SavedTensor:
    return SavedTensor("input", index, needed_for)


def saved_output(index: int = 0) -> SavedTensor:
    return SavedTensor("output", index)


def saved_extra(label: str, dtype: DType | None, shape: Callable[[Node], Shape]) -> SavedTensor:
    return SavedTensor("extra", label=label, dtype=dtype, shape=shape)


# backward arithmetic of a forward node, given the inputs that need gradients
BackwardFlops = Callable[[Node, frozenset[int]], OpCost]
# (label, shape) of tensors the backward makes and drops inside its own step (dtype: output 0)
BackwardTemporaries = Callable[[Node, frozenset[int]], tuple[tuple[str, Shape], ...]]


def no_temporaries(node: Node, needs_grad: frozenset[int]) -> tuple[tuple[str, Shape], ...]:
    return ()


@dataclass(frozen=True)
class BackwardRule:
    saves: tuple[SavedTensor, ...]
    flops: BackwardFlops
    # inputs that can get a gradient (None: every floating-point input)
    differentiable: tuple[int, ...] | None = None
    # PyTorch runs the op as a view of input 0 (no allocation): Reshape, Transpose, Split...
    view: bool = False
    # the input gradients are views of the incoming gradient (Reshape, Concat's slices)
    grad_view: bool = False
    temporaries: BackwardTemporaries = no_temporaries
    # inputs whose gradient IS the incoming gradient when they have the output's shape
    # (derivatives.yaml add: `self: grad`, `other: maybe_multiply(grad, alpha)` with alpha 1;
    # sub's self): autograd hands the same tensor on, no copy. None: every input (Sum).
    passes_gradient: tuple[int, ...] | None = ()

    def passes_gradient_to(self, index: int) -> bool:
        return self.passes_gradient is None or index in self.passes_gradient


_BACKWARD_RULES: dict[tuple[str, str], BackwardRule] = {}


def register_backward(rule: BackwardRule, *op_types: str, domain: str = "") -> None:
    """Register the backward of each op type; twice is a programming error."""
    for op_type in op_types:
        key = (_canonical_domain(domain), op_type)
        if key in _BACKWARD_RULES:
            raise ValueError(f"backward rule for {op_type!r} (domain {domain!r}) registered twice")
        _BACKWARD_RULES[key] = rule


def find_backward_rule(op_type: str, domain: str = "") -> BackwardRule | None:
    return _BACKWARD_RULES.get((_canonical_domain(domain), op_type))


def pointwise_backward_flops(flops_per_element: int) -> BackwardFlops:
    """numel(output 0) * a constant, for each input that needs a gradient."""

    def flops(node: Node, needs_grad: frozenset[int]) -> OpCost:
        return OpCost.from_flops(output_numel(node) * (flops_per_element * len(needs_grad)))

    return flops


def broadcast_temporaries(node: Node, needs_grad: frozenset[int]) -> tuple[tuple[str, Shape], ...]:
    """A gradient of a broadcast input is computed at the output's size, then summed down
    (`sum_to_size`): one output-sized temporary for each such input."""
    out = node.outputs[0]
    made = []
    for index in sorted(needs_grad):
        value = node.input(index)
        if value is not None and out.shape is not None and value.numel != out.numel:
            made.append((f"unreduced_grad{index}", out.shape))
    return tuple(made)


def pointwise_backward(
    saves: tuple[SavedTensor, ...],
    flops_per_element: int,
    differentiable: tuple[int, ...] | None = None,
    temporaries: BackwardTemporaries = no_temporaries,
    passes_gradient: tuple[int, ...] | None = (),
) -> BackwardRule:
    return BackwardRule(saves, pointwise_backward_flops(flops_per_element), differentiable,
                        temporaries=temporaries, passes_gradient=passes_gradient)


def registered_backward_ops() -> list[tuple[str, str]]:
    return sorted(_BACKWARD_RULES)
