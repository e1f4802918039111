"""A mixture of experts' token counts on an ONNX graph, bound by `--moe-routing`.

An exported mixture-of-experts layer (transformers' eager experts) sizes each expert's token
list with NonZero: the router's TopK picks top_k of E experts per token, OneHot over the
experts marks them, and per expert a NonZero lists the (slot, token) pairs that chose it;
every tensor gathered by it follows. NonZero's output [rank, n] has n known only at run time
(shape inference names it: `NonZero_21_o0__d1`). Where the graph shows that structure (the
NonZero's input reached from a OneHot of a TopK's indices through data movement alone: Cast,
Gather, Transpose, Squeeze, Unsqueeze, Reshape, Slice, Identity; never a node's name), n is
the expert's load under the routing policy (graphmem/core/routing.py: balanced by default,
tokens x top_k spread evenly; capacity=F), the i-th such NonZero of a router its expert i.
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

from graphmem.core.ir import Graph, Node, Value
from graphmem.core.routing import WORST, MoeRouting, RoutedDim, expert_loads
from graphmem.passes.dims import DimBinding

DATA_SIZED_OPS = ("NonZero",)
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
    experts_seen: dict[str, int] = {}  # per router (its TopK), the NonZeros met so far
    for node in graph.nodes:
        count = nonzero_count(node, dims) if node.op_type in DATA_SIZED_OPS else None
        router = _router(node, dims) if count is not None else None
        if count is None or router is None or count[1] % router.top_k:
            continue
        dim, elements = count
        expert = experts_seen.get(router.name, 0)
        experts_seen[router.name] = expert + 1
        tokens = elements // router.top_k  # the mask is [top_k, tokens] (or its transpose)
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
    if x is None or x.shape is None or dim is None:
        return None
    elements = 1
    for size in x.shape:
        bound = size.bind(dims) if size is not None else None
        if bound is None or not bound.is_constant:
            return None
        elements *= int(bound)
    return dim, elements


def count_dim(value: Value) -> str | None:
    """n of a NonZero output [rank, n] where n is a lone symbol (a dim the data sizes)."""
    shape = value.shape
    count = shape[1] if shape is not None and len(shape) == 2 else None
    if count is None:
        return None
    names = count.free_symbols()
    if len(names) != 1 or count != count.symbol(next(iter(names))):
        return None
    return next(iter(names))


class _Router:
    def __init__(self, name: str, experts: int, top_k: int) -> None:
        self.name = name  # its TopK node
        self.experts = experts
        self.top_k = top_k


def _router(nonzero: Node, dims: Mapping[str, int]) -> _Router | None:
    """The TopK whose indices, one-hot over the experts, the NonZero's input is made of by
    data movement alone; None where the input is anything else (a sum, a comparison)."""
    value = nonzero.inputs[0] if nonzero.inputs else None
    while value is not None and value.producer is not None:
        maker = value.producer
        if maker.op_type == "OneHot":
            indices = maker.inputs[0] if maker.inputs else None
            topk = indices.producer if indices is not None else None
            if topk is None or topk.op_type != "TopK" or indices is not topk.outputs[1]:
                return None
            return _topk_router(topk, dims)
        if maker.op_type not in DATA_MOVES:
            return None
        value = maker.inputs[0] if maker.inputs else None
    return None


def _topk_router(topk: Node, dims: Mapping[str, int]) -> _Router | None:
    """(experts, top_k): the TopK's input and indices along its axis."""
    scores, chosen = topk.inputs[0], topk.outputs[1]
    if scores is None or scores.shape is None or chosen.shape is None:
        return None
    axis = topk.attr_int("axis", -1)
    sizes = []
    for shape in (scores.shape, chosen.shape):
        dim = shape[axis] if -len(shape) <= axis < len(shape) else None
        size = dim.bind(dims) if dim is not None else None
        if size is None or not size.is_constant:
            return None
        sizes.append(int(size))
    experts, top_k = sizes
    return _Router(topk.name, experts, top_k) if 0 < top_k <= experts else None
