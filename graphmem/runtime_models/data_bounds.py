"""Sizes that follow the data: ONNX's NonZero, at its bound or at a router's choice.

NonZero's output [rank, n] lists the index of every nonzero element of its input, so n is
known only at run time (shape inference names it: `NonZero_21_o0__d1`) and is at most the
input's element count. The runtime models plan such a dim at that bound, every element
nonzero, instead of at the probe value graphmem gives an unbound dim, and the notes say so.

A mixture of experts' per-expert token lists are NonZero counts too: the dims binding sizes
them by `--moe-routing` (graphmem/passes/routed_dims.py), and the runtime models read that
binding (`routed`: the counts it sized), so their tensors are the live-tensor peak's. On a
graph the binding did not see (onnxruntime's optimized graph) the same rule finds them.
The element count (top_k x tokens each, the bound before) overstated onnxruntime's peak by
13 to 31% on the zoo's Mixtral- and Qwen2-MoE-style exports (docs/zoo.md,
tests/test_zoo_onnx.py).

Other ops size an axis by the data within an input's extent: a Slice of computed starts and
ends (an EmbeddingBag's bag in a TorchScript export's Loop body), Split, TopK, Compress,
Unique, NonMaxSuppression (graphmem/passes/extent_bounds.py). Their new dims, in control-flow
bodies too (a body's dims size its node's scratch), are planned at that extent the same way,
and so is a NonZero in a body or one counting a tensor such a dim sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from graphmem.core.ir import Graph
from graphmem.core.routing import DEFAULT_ROUTING, WORST, MoeRouting, RoutedDim
from graphmem.passes.dims import DATA_SIZED_OPS, count_dim
from graphmem.passes.extent_bounds import ExtentDim, extent_bounds, extent_dims
from graphmem.passes.routed_dims import nonzero_count, routed_dims, routing_warning
from graphmem.runtime_models.graph_cache import cached_per_graph


@dataclass(frozen=True)
class DataBounds:
    """Each data-sized dim of a graph at its bound, and the nodes that size them."""

    bound: dict[str, int]
    nodes: tuple[str, ...]
    routed: tuple[RoutedDim, ...] = ()  # the counts a router sizes (bound here or before)
    routing: MoeRouting = DEFAULT_ROUTING
    extents: tuple[ExtentDim, ...] = ()  # the other data-sized dims (extent_bounds.py)

    def warning(self) -> str:
        """The routing assumed, for the outputs' warnings; empty where no router sizes any."""
        return routing_warning(self.routed, self.routing)

    def note(self) -> str:
        """One line for the estimate's notes; empty where the graph has no data-sized dim."""
        if not self.bound and not self.routed:
            return ""
        routed = {r.dim for r in self.routed}
        others = {e.dim for e in self.extents if e.op_type != "NonZero"}
        at_bound = {dim: size for dim, size in self.bound.items()
                    if dim not in routed and dim not in others}
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
        parts.extend(_extents_note(self.extents, self.bound))
        return "; ".join(parts)


def data_bounds(graph: Graph, dims: Mapping[str, int],
                routing: MoeRouting = DEFAULT_ROUTING,
                routed: tuple[RoutedDim, ...] = ()) -> DataBounds:
    """The size of every free dim a NonZero output alone introduces, at `dims`: an expert's
    load under `routing` where a router sizes it (passes/routed_dims.py), else the element
    count of its input, e.g. a [2, 32] mask -> at most 64 indices. `routed`: the counts the
    dims binding already sized (`DimBinding.routed`), reported with those found here.
    Then every other dim the data sets within an input's extent (`_with_extents`)."""
    extents = _extent_dims(graph)
    if not extents and not has_data_sized_ops(graph):  # a probe asks at every batch
        return DataBounds({}, (), (), routing)
    found = routed_dims(graph, dims, routing)
    bound = {r.dim: r.size for r in found}
    nodes: list[str] = []
    present: set[str] = set()  # every NonZero count of this graph, bound or not
    for node in graph.nodes:
        count = nonzero_count(node, dims) if node.op_type in DATA_SIZED_OPS else None
        if count is not None:
            present.add(count[0])
        if count is None or count[0] in dims:
            continue
        bound.setdefault(*count)
        nodes.append(node.name)
    every = (*(r for r in routed if r.dim in present), *found)
    return _with_extents(DataBounds(bound, tuple(nodes), every, routing), extents, dims)


def _with_extents(bounds: DataBounds, extents: tuple[ExtentDim, ...],
                  dims: Mapping[str, int]) -> DataBounds:
    """`bounds` with the extent-bounded dims not in `dims` nor bound already, at their bound
    (at `dims` and the bounds before them)."""
    more, used = extent_bounds(extents, {**dims, **bounds.bound})
    if not more:
        return bounds
    return replace(bounds, bound={**bounds.bound, **more},
                   nodes=(*bounds.nodes, *(e.node for e in used)), extents=used)


def _extents_note(extents: tuple[ExtentDim, ...], bound: Mapping[str, int]) -> list[str]:
    """The note's part for the extent-bounded dims other than NonZero's counts (those are in
    the NonZero part), e.g. "3 Slice outputs' dims sized by the data, planned at the bound
    (the input's extent: s0=8, ...): ..."."""
    shown_dims = [e for e in extents if e.op_type != "NonZero"]
    if not shown_dims:
        return []
    ops = ", ".join(sorted({e.op_type for e in shown_dims}))
    shown = ", ".join(f"{e.dim}={bound[e.dim]:,}" for e in shown_dims[:4])
    more = ", ..." if len(shown_dims) > 4 else ""
    count = len(shown_dims)
    return [f"{count} dim{'s' if count != 1 else ''} of {ops} outputs sized by the data,"
            f" planned at the bound (the extent of the input they are taken from: {shown}"
            f"{more}): the prediction is an upper bound for the tensors they size"]


_EXTENT_DIMS = object()  # graph_cache's key for `_extent_dims`


def _extent_dims(graph: Graph) -> tuple[ExtentDim, ...]:
    """extent_bounds.py's dims of `graph` (found once per graph: they do not follow dims)."""
    return cached_per_graph(graph, (_EXTENT_DIMS,), lambda: extent_dims(graph))


_NO_DATA_SIZED = object()  # graph_cache's key for `has_data_sized_ops`


def has_data_sized_ops(graph: Graph) -> bool:
    """Whether any node of `graph` is a NonZero (found once per graph)."""
    return cached_per_graph(graph, (_NO_DATA_SIZED,), lambda: any(
        node.op_type in DATA_SIZED_OPS for node in graph.nodes))


def carried_counts(graph: Graph, written: Graph) -> dict[str, str]:
    """{a NonZero count of `graph`: the count of the same tensor in `written`} where they
    differ: onnxruntime's optimized graph keeps the tensors' names, but its shape inference
    names its own dims (and its order of the experts is its own), so the sizes the dims
    binding gave the graph as written are carried by tensor, not found again."""
    carried: dict[str, str] = {}
    for node in graph.nodes:
        if node.op_type not in DATA_SIZED_OPS or not node.outputs:
            continue
        same = written.values.get(node.outputs[0].name)
        ours = count_dim(node.outputs[0])
        theirs = count_dim(same) if same is not None else None
        if ours is not None and theirs is not None and ours != theirs:
            carried[ours] = theirs
    return {**_carried_extents(graph, written), **carried}


def _carried_extents(graph: Graph, written: Graph) -> dict[str, str]:
    """`carried_counts` for the extent-bounded dims (bodies' tensors too): by tensor and axis."""
    extents = _extent_dims(graph)
    if not extents:
        return {}
    theirs = {(e.tensor, e.axis): e.dim for e in _extent_dims(written)}
    return {e.dim: dim for e in extents
            if (dim := theirs.get((e.tensor, e.axis))) is not None and dim != e.dim}
