"""Sizes that follow the data, planned at their bound: ONNX's NonZero.

NonZero's output [rank, n] lists the index of every nonzero element of its input, so n is
known only at run time (shape inference names it: `NonZero_21_o0__d1`) and is at most the
input's element count. An exported mixture-of-experts layer (transformers' eager experts)
sizes each expert's token list this way, and every tensor gathered by it follows. The
runtime models plan such a dim at its bound, every element nonzero (each expert takes every
token it could), instead of at the probe value graphmem gives an unbound dim, so the
prediction is an upper bound on what those tensors take, and the notes say so: measured on
Mixtral- and Qwen2-MoE-style exports, graphmem is 9 to 18% above onnxruntime's peak there
(docs/zoo.md, tests/test_zoo_onnx.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from graphmem.core.ir import Graph, Node

DATA_SIZED_OPS = ("NonZero",)


@dataclass(frozen=True)
class DataBounds:
    """Each data-sized dim of a graph at its bound, and the nodes that size them."""

    bound: dict[str, int]
    nodes: tuple[str, ...]

    def note(self) -> str:
        """One line for the estimate's notes; empty where the graph has no data-sized dim."""
        if not self.bound:
            return ""
        shown = ", ".join(f"{dim}={size:,}" for dim, size in sorted(self.bound.items())[:4])
        more = ", ..." if len(self.bound) > 4 else ""
        count = len(self.nodes)
        return (f"{count} NonZero output{'s' if count != 1 else ''} sized by the data, planned"
                f" at the bound (every input element nonzero: {shown}{more}): the prediction"
                " is an upper bound for the tensors they size (a router's choice takes less)")


def data_bounds(graph: Graph, dims: Mapping[str, int]) -> DataBounds:
    """The bound of every free dim a NonZero output alone introduces, at `dims`: the element
    count of its input, e.g. a [2, 32] mask -> at most 64 indices."""
    bound: dict[str, int] = {}
    nodes: list[str] = []
    for node in graph.nodes:
        dim_and_size = _nonzero_bound(node, dims) if node.op_type in DATA_SIZED_OPS else None
        if dim_and_size is not None and dim_and_size[0] not in dims:
            bound[dim_and_size[0]] = dim_and_size[1]
            nodes.append(node.name)
    return DataBounds(bound, tuple(nodes))


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
