"""A mixture of experts' token counts on an ONNX graph, bound by `--moe-routing`.

An exported mixture-of-experts layer (transformers' eager experts) sizes each expert's token
list with NonZero: the router's TopK picks top_k of E experts per token, OneHot over the
experts marks them, and per expert a NonZero lists the (slot, token) pairs that chose it;
every tensor gathered by it follows. NonZero's output [rank, n] has n known only at run time
(shape inference names it: `NonZero_21_o0__d1`). Where the graph shows that structure (the
NonZero's input reached from a OneHot through data movement alone: Cast, Gather, Transpose,
Squeeze, Unsqueeze, Reshape, Slice, Identity; never a node's name) and the OneHot's indices
are expert choices (a TopK's indices, an ArgMax / ArgMin, as Phi-MoE's sparse mixer chooses
with two of them, a Concat of such choices along the choice axis, a Cast of them), n is the
expert's load under the routing policy (graphmem/core/routing.py: balanced by default,
tokens x top_k spread evenly; capacity=F), the i-th such NonZero of a router its expert i.
The experts are the choices' range (the scores' size along the chooser's axis: an exporter's
OneHot may count one class more, which no choice reaches), tokens the scores' other
elements, top_k the indices' elements over the tokens.
`worst` is the bound over every routing: each expert at every token (a token picks an
expert once), since the order a runtime runs the experts in may hold several experts' lists
at once.

`bind_routed` puts those counts into the dims binding, so every number of one analysis (the
live-tensor peak, the FLOPs, the runtime models' tensors, the largest batch, the verdict)
reads the same routed sizes: one answer. A dim the user bound with --dim stays theirs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from graphmem.core.ir import DType, Graph, Node, Value
from graphmem.core.routing import WORST, MoeRouting, RoutedDim, expert_loads
from graphmem.core.symbolic import SymInt
from graphmem.passes.dims import DATA_SIZED_OPS, DimBinding, count_dim

# ops that move or select data without changing which elements are nonzero
DATA_MOVES = frozenset({"Cast", "Gather", "Transpose", "Squeeze", "Unsqueeze", "Reshape",
                        "Slice", "Identity"})


def bind_routed(graph: Graph, binding: DimBinding, routing: MoeRouting) -> DimBinding:
    """`binding` with each router-sized dim of `graph` it leaves free bound to the expert's
    load under `routing` (the same object where the graph has none)."""
    found = routed_dims(graph, binding.bound, routing)
    if not found:
        return binding
    bound = {**binding.bound, **{r.dim: r.size for r in found}}
    return replace(binding, bound=bound, free=tuple(d for d in binding.free if d not in bound),
                   routed=found)


def rebind(graph: Graph, dims: DimBinding, given: Mapping[str, int], routing: MoeRouting
           ) -> DimBinding:
    """`graph`'s binding at the dims `given` (the rest of `dims`' free dims left free), its
    router-sized counts bound again for them: what a probe at another batch reads."""
    free = tuple(d for d in dims.free if d not in given)
    return bind_routed(graph, DimBinding(bound=dict(given), free=free,
                                         batch_dim=dims.batch_dim), routing)


def routing_warning(routed: Sequence[RoutedDim], routing: MoeRouting) -> str:
    """What the outputs warn where a router's counts are bound; empty where none is, e.g.
    "... 8 experts' token lists (NonZero; top-2 of 4 over 32 tokens) assumed balanced ..."."""
    if not routed:
        return ""
    what = ", ".join(f"top-{k} of {e} over {t} tokens" for t, e, k in sorted(
        {(r.tokens, r.experts, r.top_k) for r in routed}))
    policy = ("worst: each expert at every token" if routing.kind == WORST
              else routing.describe())
    return (f"mixture-of-experts routing is data: {len(routed)} experts' token lists"
            f" (NonZero; {what}) assumed {policy} (--moe-routing balanced|worst|capacity=F)")


def routed_dims(graph: Graph, dims: Mapping[str, int], routing: MoeRouting
                ) -> tuple[RoutedDim, ...]:
    """Every NonZero count of `graph` a router sizes, at `dims` (those in `dims` excepted:
    given), in graph order."""
    found: list[RoutedDim] = []
    experts_seen: dict[str, int] = {}  # per router (its choices' node), the NonZeros met so far
    for node in graph.nodes:
        count = nonzero_count(node, dims) if node.op_type in DATA_SIZED_OPS else None
        router = _router(node, dims) if count is not None else None
        # the expert's mask holds each (choice, token) pair once: [top_k, tokens] or its
        # transpose (a mask of any other size, sliced or broadcast, is no expert's list)
        if count is None or router is None or count[1] != router.top_k * router.tokens:
            continue
        dim, tokens = count[0], router.tokens
        expert = experts_seen.get(router.name, 0)
        experts_seen[router.name] = expert + 1
        if dim in dims or expert >= router.experts:
            continue
        loads = ([tokens] * router.experts if routing.kind == WORST
                 else expert_loads(routing, tokens, router.experts, router.top_k))
        found.append(RoutedDim(dim, router.name, expert, tokens, router.experts,
                               router.top_k, loads[expert]))
    return tuple(found)


def nonzero_count(node: Node, dims: Mapping[str, int]) -> tuple[str, int] | None:
    """(n, the input's element count at `dims`) for NonZero x -> [rank(x), n], n a lone
    symbol; None where the count is a number or the input's size is not."""
    x = node.inputs[0] if node.inputs else None
    dim = count_dim(node.outputs[0]) if node.outputs else None
    elements = _elements(x, dims) if x is not None and dim is not None else None
    return (dim, elements) if dim is not None and elements is not None else None


class _Router:
    def __init__(self, name: str, tokens: int, experts: int, top_k: int) -> None:
        self.name = name  # the node that makes its choices (a TopK, ArgMax or their Concat)
        self.tokens = tokens
        self.experts = experts
        self.top_k = top_k


class _Choices:
    """Expert indices: `tokens` rows, each choosing among `experts` (a TopK's or an
    ArgMax's input along its axis)."""

    def __init__(self, tokens: int, experts: int) -> None:
        self.tokens = tokens
        self.experts = experts


def _router(nonzero: Node, dims: Mapping[str, int]) -> _Router | None:
    """The router whose choices, one-hot over the experts, the NonZero's input is made of by
    data movement alone (and 0/1 masks: `_masked`); None where the input is anything else (a
    sum, a comparison)."""
    value = nonzero.inputs[0] if nonzero.inputs else None
    while value is not None and value.producer is not None:
        maker = value.producer
        if maker.op_type == "OneHot":
            return _onehot_router(maker, dims)
        if maker.op_type == "Mul":
            value = _masked(maker)
            continue
        if maker.op_type not in DATA_MOVES:
            return None
        value = maker.inputs[0] if maker.inputs else None
    return None


def _masked(mul: Node) -> Value | None:
    """x of Mul(x, mask) where the mask is 0 or 1 (a boolean, or one cast): it can only drop
    x's nonzeros, so an expert's count is at most its load before the mask (Switch's
    capacity: the one-hot times cumsum <= capacity; --moe-routing worst stays the bound,
    balanced where the capacity holds the balanced load); None for any other Mul."""
    pair = tuple(mul.inputs[:2])
    for x, mask in (pair, pair[::-1]) if len(pair) == 2 else ():
        if x is not None and mask is not None and _zero_one(mask):
            return x
    return None


def _zero_one(value: Value) -> bool:
    maker = value.producer
    cast = maker is not None and maker.op_type == "Cast" and bool(maker.inputs)
    source = maker.inputs[0] if cast and maker is not None else None
    return value.dtype is DType.BOOL or (source is not None and source.dtype is DType.BOOL)


def _onehot_router(onehot: Node, dims: Mapping[str, int]) -> _Router | None:
    """OneHot(indices, depth): a router where the indices are expert choices (TopK's
    indices, ArgMax / ArgMin, their Concat along the choice axis, data movement of those),
    top_k the choices per token (the indices' elements / the tokens), the experts the
    choices' range (at most the depth: an exporter may add a class no choice reaches)."""
    indices = onehot.inputs[0] if onehot.inputs else None
    maker = indices.producer if indices is not None else None
    choices = _choices(indices, dims) if indices is not None else None
    elements = _elements(indices, dims) if indices is not None else None
    reach = _depth(onehot, dims)
    if choices is None or elements is None or maker is None or elements % choices.tokens:
        return None
    top_k = elements // choices.tokens
    if not 0 < top_k <= choices.experts or (reach is not None and reach < choices.experts):
        return None
    return _Router(maker.name, choices.tokens, choices.experts, top_k)


def _choices(value: Value, dims: Mapping[str, int]) -> _Choices | None:
    """`value` as expert choices; None where it is not made of them alone."""
    maker = value.producer
    if maker is None:
        return None
    if maker.op_type == "TopK" and value is maker.outputs[1]:
        return _choosing(maker, dims)
    if maker.op_type in ("ArgMax", "ArgMin"):
        return _choosing(maker, dims)
    if maker.op_type in ("Cast", "Identity") and maker.inputs and maker.inputs[0] is not None:
        return _choices(maker.inputs[0], dims)
    if maker.op_type == "Concat":
        return _concat_choices(maker, dims)
    return None


def _concat_choices(concat: Node, dims: Mapping[str, int]) -> _Choices | None:
    """Choices of the same tokens over the same experts, joined along the choice axis (the
    axis holds every choice of a token: its size x the tokens is the elements; joined along
    the tokens instead it is not a router's)."""
    parts = [_choices(v, dims) if v is not None else None for v in concat.inputs]
    first = parts[0] if parts else None
    out = concat.outputs[0] if concat.outputs else None
    shape = out.shape if out is not None else None
    elements = _elements(out, dims) if out is not None else None
    axis = concat.attr_int("axis", 0)
    if (first is None or shape is None or elements is None or not -len(shape) <= axis < len(shape)
            or any(p is None or (p.tokens, p.experts) != (first.tokens, first.experts)
                   for p in parts)):
        return None
    joined = _constant_size(shape[axis], dims)
    return first if joined is not None and joined * first.tokens == elements else None


def _choosing(chooser: Node, dims: Mapping[str, int]) -> _Choices | None:
    """A TopK's or ArgMax's scores: the experts along its axis, the tokens the rest."""
    scores = chooser.inputs[0] if chooser.inputs else None
    shape = scores.shape if scores is not None else None
    elements = _elements(scores, dims) if scores is not None else None
    axis = chooser.attr_int("axis", -1 if chooser.op_type == "TopK" else 0)
    if shape is None or elements is None or not -len(shape) <= axis < len(shape):
        return None
    experts = _constant_size(shape[axis], dims)
    return _Choices(elements // experts, experts) if experts else None


def _elements(value: Value, dims: Mapping[str, int]) -> int | None:
    if value.shape is None:
        return None
    elements = 1
    for dim in value.shape:
        size = _constant_size(dim, dims)
        if size is None:
            return None
        elements *= size
    return elements


def _constant_size(dim: SymInt | None, dims: Mapping[str, int]) -> int | None:
    size = dim.bind(dims) if dim is not None else None
    return int(size) if size is not None and size.is_constant else None


def _depth(onehot: Node, dims: Mapping[str, int]) -> int | None:
    """The OneHot's classes: its output's size along its axis (None where not known)."""
    out = onehot.outputs[0] if onehot.outputs else None
    shape = out.shape if out is not None else None
    axis = onehot.attr_int("axis", -1)
    if shape is None or not -len(shape) <= axis < len(shape):
        return None
    return _constant_size(shape[axis], dims)
