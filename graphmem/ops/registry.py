"""One registry of what graphmem knows about each op, filled by decorators that reject duplicates.

Each op, named by (domain, op type), has one `OpSpec`:
- `cost`: a small pure function of a node's shapes and attributes that returns its MACs and
  FLOPs. Bytes read and written are not per-op: they are the sizes of the node's inputs and
  outputs, computed once in the costs pass.
- `backward`: what autograd saves for the op and what its backward computes (training).
- `traits`: what passes need to know beyond cost (a contraction, a view, an in-place form,
  cuBLAS, the autocast policy), asked with `traits_of(node)` instead of op-name sets.
Both op vocabularies meet here: ONNX nodes (`MatMul`) and traced aten nodes (`aten.mm.default`,
domain "aten", specs from graphmem/ops/aten.py); `op_name(node)` and `spec_of(node)` read both.

Registration is explicit and symmetric: `@register(*ops)` for a cost rule,
`@register_backward(*ops)` for a backward rule (applied to a `BackwardRule`),
`register_traits(*ops, **traits)`. Every rule lives in a family module of this package, and
`load_all()` imports them all (the package does it on import), so the registry is the same
whatever was imported first.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from graphmem.core.ir import DType, Node, Shape, Value
from graphmem.core.symbolic import SymInt
from graphmem.ops.traits import Traits

# The families, in load order: aten.py copies the traits of the ONNX ops it maps to.
FAMILIES = ("elementwise", "linear", "normalization", "pooling", "reduction", "movement",
            "attention", "recurrent", "signal", "sampling", "optimizers", "text", "ml",
            "training", "aten")
ATEN_DOMAIN = "aten"  # traced PyTorch nodes: op type "aten.<packet>.<overload>"
# A backward node of the training expansion has its forward op's type in this domain
# ("graphmem.backward", or "graphmem.backward/com.microsoft" for a com.microsoft op).
BACKWARD_DOMAIN = "graphmem.backward"


@dataclass(frozen=True)
class OpCost:
    """Arithmetic of one node. A multiply-accumulate is 1 MAC and 2 FLOPs. `note` says what
    the numbers leave out where a rule can know only part (a string op's work, a bound)."""

    macs: SymInt
    flops: SymInt
    note: str = ""

    @staticmethod
    def zero() -> OpCost:
        return OpCost(SymInt(), SymInt())

    @staticmethod
    def from_macs(macs: SymInt) -> OpCost:
        return OpCost(macs=macs, flops=macs * 2)

    @staticmethod
    def from_flops(flops: SymInt) -> OpCost:
        return OpCost(macs=SymInt.const(0), flops=flops)  # the shared zero: none built per node

    def __add__(self, other: OpCost) -> OpCost:
        note = "; ".join(n for n in (self.note, other.note) if n)
        return OpCost(self.macs + other.macs, self.flops + other.flops, note)

    def noted(self, note: str) -> OpCost:
        """The same arithmetic, with what it leaves out said."""
        return OpCost(self.macs, self.flops, "; ".join(n for n in (self.note, note) if n))


class ShapeUnknownError(Exception):
    """A rule needs a shape that shape inference did not provide."""


CostRule = Callable[[Node], OpCost]
_NO_TRAITS = Traits()


# ----- the registry ---------------------------------------------------------------------------
@dataclass(frozen=True)
class OpSpec:
    """Everything graphmem knows about one op."""

    domain: str
    op_type: str
    cost: CostRule | None = None
    backward: BackwardRule | None = None
    traits: Traits = field(default=_NO_TRAITS)
    canonical: str = ""  # an aten op: the ONNX op of the same math ("Gemm" for addmm)


# (canonical domain, op type) -> its spec; tests swap this dict to register throwaway ops
_RULES: dict[tuple[str, str], OpSpec] = {}


def _canonical_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def _update(op_type: str, domain: str, what: str, **changes: Any) -> None:
    """Set fields of one spec; a field already set is a programming error."""
    key = (_canonical_domain(domain), op_type)
    spec = _RULES.get(key) or OpSpec(key[0], op_type)
    for name in changes:
        if getattr(spec, name) is not None:
            raise ValueError(f"{what} for {op_type!r} (domain {domain!r}) registered twice")
    _RULES[key] = replace(spec, **changes)


def register(*op_types: str, domain: str = "") -> Callable[[CostRule], CostRule]:
    """Register `rule` as the cost of each op type; registering an op twice is an error."""

    def decorate(rule: CostRule) -> CostRule:
        for op_type in op_types:
            _update(op_type, domain, "cost rule", cost=rule)
        return rule

    return decorate


def register_backward(*op_types: str,
                      domain: str = "") -> Callable[[BackwardRule], BackwardRule]:
    """Register `rule` as the backward of each op type; twice is an error. A rule that runs
    the op as a view makes the op a view (`Traits.view`)."""

    def decorate(rule: BackwardRule) -> BackwardRule:
        for op_type in op_types:
            _update(op_type, domain, "backward rule", backward=rule)
            if rule.view:
                register_traits(op_type, domain=domain, view=True)
        return rule

    return decorate


def register_traits(*op_types: str, domain: str = "", **traits: Any) -> None:
    """Declare traits of each op type (Traits field names); a trait declared twice (set to
    something other than its default) is an error."""
    for op_type in op_types:
        key = (_canonical_domain(domain), op_type)
        spec = _RULES.get(key) or OpSpec(key[0], op_type)
        for name in traits:
            if getattr(spec.traits, name) != getattr(_NO_TRAITS, name):
                raise ValueError(f"trait {name} of {op_type!r} (domain {domain!r}) registered"
                                 " twice")
        _RULES[key] = replace(spec, traits=replace(spec.traits, **traits))


def register_canonical(op_type: str, canonical: str, domain: str = ATEN_DOMAIN) -> None:
    """Name the ONNX op `op_type` computes (aten ops)."""
    key = (_canonical_domain(domain), op_type)
    spec = _RULES.get(key) or OpSpec(key[0], op_type)
    if spec.canonical:
        raise ValueError(f"canonical op of {op_type!r} (domain {domain!r}) registered twice")
    _RULES[key] = replace(spec, canonical=canonical)


_loaded: list[bool] = []  # one entry once load_all has started


def load_all() -> None:
    """Import every rule family (idempotent); graphmem.ops does it on import."""
    if _loaded:
        return
    _loaded.append(True)  # first: the families import this module
    for family in FAMILIES:
        importlib.import_module(f"graphmem.ops.{family}")


def find_spec(op_type: str, domain: str = "") -> OpSpec | None:
    load_all()
    return _RULES.get((_canonical_domain(domain), op_type))


def find_rule(op_type: str, domain: str = "") -> CostRule | None:
    """The cost rule of an op; a backward node's cost comes from its forward op's backward."""
    forward = forward_domain(domain)
    if forward is not None:
        return backward_node_cost if find_backward_rule(op_type, forward) else None
    spec = find_spec(op_type, domain)
    return spec.cost if spec is not None else None


def find_backward_rule(op_type: str, domain: str = "") -> BackwardRule | None:
    spec = find_spec(op_type, domain)
    return spec.backward if spec is not None else None


def registered_ops() -> list[tuple[str, str]]:
    """(domain, op type) of every op with a cost rule."""
    load_all()
    return sorted(key for key, spec in _RULES.items() if spec.cost is not None)


def registered_backward_ops() -> list[tuple[str, str]]:
    load_all()
    return sorted(key for key, spec in _RULES.items() if spec.backward is not None)


def registered_specs() -> list[OpSpec]:
    load_all()
    return [_RULES[key] for key in sorted(_RULES)]


# ----- one op's spec and traits, for both vocabularies ----------------------------------------
def op_name(node: Node) -> str:
    """`aten.addmm.default` -> `addmm` (the overload packet); other op types as they are."""
    packet = _aten_packet(node.op_type)
    return node.op_type if packet is None else packet


def _aten_packet(op_type: str) -> str | None:
    # a traced op's type names its namespace first: no ONNX op type starts with "aten."
    namespace, _, rest = op_type.partition(".")
    return rest.partition(".")[0] if namespace == ATEN_DOMAIN and rest else None


def spec_of(node: Node) -> OpSpec | None:
    """The spec of a node's own op (None for ops graphmem does not know)."""
    packet = _aten_packet(node.op_type)
    if packet is not None:
        return find_spec(packet, ATEN_DOMAIN)
    return find_spec(node.op_type, node.domain)


def traits_of(node: Node) -> Traits:
    """What a node's op is: its spec's traits; a backward node's come from its forward op
    (`Traits.of_backward`); an unknown aten op named as an in-place form is one."""
    forward = forward_domain(node.domain)
    if forward is not None:
        spec = find_spec(node.op_type, forward)
        return spec.traits.of_backward() if spec is not None else _NO_TRAITS
    spec = spec_of(node)
    if spec is not None:
        return spec.traits
    packet = _aten_packet(node.op_type)
    if packet is not None and names_inplace_form(packet):
        return Traits(is_inplace=True)
    return _NO_TRAITS


def names_inplace_form(packet: str) -> bool:
    """PyTorch names an in-place variant `<op>_` (`add_`, `_foreach_mul_`) or `__i<op>__`."""
    if packet.startswith("__"):
        return packet.startswith("__i") and packet.endswith("__")
    return packet.endswith("_")


# ----- backward nodes -------------------------------------------------------------------------
def backward_domain(domain: str) -> str:
    """The domain of the backward node of a forward op in `domain`."""
    canonical = _canonical_domain(domain)
    return BACKWARD_DOMAIN if not canonical else f"{BACKWARD_DOMAIN}/{canonical}"


def forward_domain(domain: str) -> str | None:
    """The forward op's domain of a backward domain; None when `domain` is not one."""
    if domain == BACKWARD_DOMAIN:
        return ""
    prefix = f"{BACKWARD_DOMAIN}/"
    return domain[len(prefix):] if domain.startswith(prefix) else None


def backward_node_cost(node: Node) -> OpCost:
    """A backward node's arithmetic: the backward rule of the forward node it differentiates
    (`Node.origin`), for the inputs that need gradients (`Node.needs_grad`)."""
    forward = node.origin
    rule = find_backward_rule(forward.op_type, forward.domain) if forward is not None else None
    if forward is None or rule is None:
        return OpCost.zero()
    return rule.flops(forward, node.needs_grad)


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
