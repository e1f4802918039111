"""Sizes that follow the data: ONNX's NonZero, at its bound or at a router's choice.

NonZero's output [rank, n] lists the index of every nonzero element of its input, so n is
known only at run time (shape inference names it: `NonZero_21_o0__d1`) and is at most the
input's element count. The runtime models plan such a dim at that bound, every element
nonzero, instead of at the probe value graphmem gives an unbound dim, and the notes say so.

An exported mixture-of-experts layer (transformers' eager experts) sizes each expert's token
list this way: the router's TopK picks top_k of E experts per token, OneHot over the experts
marks them, and per expert a NonZero lists the (slot, token) pairs that chose it; every tensor
gathered by it follows. Where the graph shows that structure (the NonZero's input reached from
a OneHot of a TopK's indices through data movement alone: Cast, Gather, Transpose, Squeeze,
Unsqueeze, Reshape, Slice, Identity), the count is the expert's load under `--moe-routing`
(graphmem/core/routing.py: balanced by default, tokens x top_k spread evenly; capacity=F),
the i-th such NonZero of a router its expert i. `worst` is the bound over every routing:
each expert at every token (a token picks an expert once), since the order onnxruntime runs
the experts in may hold several experts' lists at once. The element count (top_k x tokens
each, the bound before) overstated onnxruntime's peak by 13 to 31% on the zoo's Mixtral- and
Qwen2-MoE-style exports (docs/zoo.md, tests/test_zoo_onnx.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from graphmem.core.ir import Graph, Node
from graphmem.core.routing import DEFAULT_ROUTING, WORST, MoeRouting, expert_loads

DATA_SIZED_OPS = ("NonZero",)
# ops that move or select data without changing which elements are nonzero
DATA_MOVES = frozenset({"Cast", "Gather", "Transpose", "Squeeze", "Unsqueeze", "Reshape",
                        "Slice", "Identity"})


@dataclass(frozen=True)
class DataBounds:
    """Each data-sized dim of a graph at its bound, and the nodes that size them."""

    bound: dict[str, int]
    nodes: tuple[str, ...]
    routed: tuple[str, ...] = ()  # of `nodes`, those sized by a router's choice
    routing: MoeRouting = DEFAULT_ROUTING
    routers: tuple[tuple[int, int, int], ...] = ()  # (tokens, experts, top_k) of each router

    def warning(self) -> str:
        """The routing assumed, for the outputs' warnings; empty where no router sizes any."""
        if not self.routed:
            return ""
        what = ", ".join(f"top-{k} of {e} over {t} tokens" for t, e, k in sorted(set(
            self.routers)))
        policy = ("worst: each expert at every token" if self.routing.kind == WORST
                  else self.routing.describe())
        return (f"mixture-of-experts routing is data: {len(self.routed)} experts' token lists"
                f" (NonZero; {what}) assumed {policy} (--moe-routing"
                " balanced|worst|capacity=F)")

    def note(self) -> str:
        """One line for the estimate's notes; empty where the graph has no data-sized dim."""
        if not self.bound:
            return ""
        at_bound = {dim: size for dim, size in self.bound.items() if dim not in self.routed}
        parts = []
        if self.routed:
            count = len(self.routed)
            policy = ("worst: each expert at every token, the bound over every routing"
                      if self.routing.kind == WORST else self.routing.describe())
            parts.append(f"{count} NonZero output{'s' if count != 1 else ''} sized by a"
                         f" mixture of experts' router, at --moe-routing {policy}")
        if at_bound:
            shown = ", ".join(f"{dim}={size:,}" for dim, size in sorted(at_bound.items())[:4])
            more = ", ..." if len(at_bound) > 4 else ""
            count = len(at_bound)
            parts.append(f"{count} NonZero output{'s' if count != 1 else ''} sized by the"
                         f" data, planned at the bound (every input element nonzero: {shown}"
                         f"{more}): the prediction is an upper bound for the tensors they size")
        return "; ".join(parts)


def data_bounds(graph: Graph, dims: Mapping[str, int],
                routing: MoeRouting = DEFAULT_ROUTING) -> DataBounds:
    """The size of every free dim a NonZero output alone introduces, at `dims`: an expert's
    load under `routing` where a router sizes it, else the element count of its input, e.g.
    a [2, 32] mask -> at most 64 indices."""
    bound: dict[str, int] = {}
    nodes: list[str] = []
    routed: list[str] = []
    experts_seen: dict[str, int] = {}  # per router (its TopK), the NonZeros met so far
    routers: dict[str, tuple[int, int, int]] = {}
    for node in graph.nodes:
        dim_and_size = _nonzero_bound(node, dims) if node.op_type in DATA_SIZED_OPS else None
        if dim_and_size is None or dim_and_size[0] in dims:
            continue
        dim, size = dim_and_size
        router = _router(node, dims)
        if router is not None and size % router.top_k == 0:
            expert = experts_seen.get(router.name, 0)
            experts_seen[router.name] = expert + 1
            tokens = size // router.top_k
            loads = expert_loads(routing, tokens, router.experts, router.top_k)
            if routing.kind == WORST:  # any expert may take every token, and the experts'
                loads = [tokens] * router.experts  # lists may be live together
            if expert < len(loads):
                size = loads[expert]
                routed.append(dim)
                routers[router.name] = (tokens, router.experts, router.top_k)
        bound[dim] = size
        nodes.append(node.name)
    return DataBounds(bound, tuple(nodes), tuple(routed), routing, tuple(routers.values()))


@dataclass(frozen=True)
class _Router:
    name: str  # its TopK node
    experts: int
    top_k: int


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


def _nonzero_bound(node: Node, dims: Mapping[str, int]) -> tuple[str, int] | None:
    """(n, the input's element count) for NonZero x -> [rank(x), n], n a lone symbol."""
    x = node.inputs[0] if node.inputs else None
    out = node.outputs[0] if node.outputs else None
    if x is None or x.shape is None or out is None or out.shape is None or len(out.shape) != 2:
        return None
    count = out.shape[1]
    if count is None:
        return None
    names = count.free_symbols()
    if len(names) != 1 or count != count.symbol(next(iter(names))):
        return None
    elements = 1
    for dim in x.shape:
        size = dim.bind(dims) if dim is not None else None
        if size is None or not size.is_constant:
            return None
        elements *= int(size)
    return next(iter(names)), elements
