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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from graphmem.core.ir import Graph
from graphmem.core.routing import DEFAULT_ROUTING, WORST, MoeRouting, RoutedDim
from graphmem.passes.dims import DATA_SIZED_OPS, count_dim
from graphmem.passes.routed_dims import nonzero_count, routed_dims, routing_warning
from graphmem.runtime_models.graph_cache import cached_per_graph


@dataclass(frozen=True)
class DataBounds:
    """Each data-sized dim of a graph at its bound, and the nodes that size them."""

    bound: dict[str, int]
    nodes: tuple[str, ...]
    routed: tuple[RoutedDim, ...] = ()  # the counts a router sizes (bound here or before)
    routing: MoeRouting = DEFAULT_ROUTING

    def warning(self) -> str:
        """The routing assumed, for the outputs' warnings; empty where no router sizes any."""
        return routing_warning(self.routed, self.routing)

    def note(self) -> str:
        """One line for the estimate's notes; empty where the graph has no data-sized dim."""
        if not self.bound and not self.routed:
            return ""
        routed = {r.dim for r in self.routed}
        at_bound = {dim: size for dim, size in self.bound.items() if dim not in routed}
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
                routing: MoeRouting = DEFAULT_ROUTING,
                routed: tuple[RoutedDim, ...] = ()) -> DataBounds:
    """The size of every free dim a NonZero output alone introduces, at `dims`: an expert's
    load under `routing` where a router sizes it (passes/routed_dims.py), else the element
    count of its input, e.g. a [2, 32] mask -> at most 64 indices. `routed`: the counts the
    dims binding already sized (`DimBinding.routed`), reported with those found here."""
    if not has_data_sized_ops(graph):  # nothing to find (a probe asks at every batch)
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
    return DataBounds(bound, tuple(nodes), every, routing)


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
    return carried
