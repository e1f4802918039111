"""A dim of a shape made a 1-D vector by `Reshape(d, [-1])`, followed by onnx's inference.

The dynamo exporter writes each dim a `view` target reads as `Shape(x, start=i, end=i+1)` ->
`Squeeze` (the scalar `sym_size`) -> `Reshape(., [-1])` -> `Concat`. onnx's inference carries
shape values through Squeeze, Unsqueeze and Concat (data propagation) but not through
Reshape, so every such target, and all that follows it (an unoptimized export's every layer),
came out unknown and went to onnxruntime's rules at about 80 us a node. A Reshape of a scalar
to `[-1]` or `[1]` is `Unsqueeze(., [0])`: the copy onnx's second pass runs on has the
Unsqueeze (its axes one initializer, `AXES`), and the graph keeps its Reshape (restored as
fold.py's folded nodes are; `drop_axes` takes the initializer out again).
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx
from onnx import helper

from graphmem.frontends.onnx.graph_index import GraphIndex
from graphmem.frontends.onnx.repeat_dims import int_constants

AXES = "gm__scalar_reshape_axes"


def unsqueeze_scalar_reshapes(graph: onnx.GraphProto,
                              types: Mapping[str, onnx.ValueInfoProto],
                              index: GraphIndex | None = None) -> dict[str, onnx.NodeProto]:
    """Turn each Reshape of `graph` whose input `types` say is a scalar (rank 0) and whose
    target is a constant [-1] or [1] into Unsqueeze(input, AXES), in place; returns the
    Reshapes by their output's name (for restore). `index`: a graph of the same nodes'
    (graph_index.py), where the caller has it: the Reshapes are read at its positions and the
    targets' Constant nodes found through its producers instead of walks over every node
    (0.028 CPU s on the dynamo decoder)."""
    nodes = graph.node if index is None else [graph.node[p] for p in index.positions.get(
        "Reshape", ())]
    reshapes = [node for node in nodes if node.op_type == "Reshape"
                and node.domain in ("", "ai.onnx") and len(node.input) == 2
                and _rank(types.get(node.input[0])) == 0]
    wanted = {node.input[1] for node in reshapes}
    targets = {} if not reshapes else int_constants(graph, wanted) if index is None else \
        int_constants(graph, wanted, index.producer, index.initializer)
    replaced: dict[str, onnx.NodeProto] = {}
    for node in reshapes:
        # allowzero (the dynamo exporter writes 0) changes nothing for a target of -1 or 1
        if targets.get(node.input[1]) in ([-1], [1]) \
                and all(a.name == "allowzero" for a in node.attribute):
            original = onnx.NodeProto()
            original.CopyFrom(node)
            replaced[node.output[0]] = original
            node.op_type = "Unsqueeze"
            node.input[1] = AXES
            del node.attribute[:]
    if replaced:
        graph.initializer.append(helper.make_tensor(AXES, onnx.TensorProto.INT64, [1], [0]))
    return replaced


def drop_axes(graph: onnx.GraphProto) -> None:
    """`graph` without the AXES initializer unsqueeze_scalar_reshapes added."""
    kept = [t for t in graph.initializer if t.name != AXES]
    if len(kept) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept)


def _rank(info: onnx.ValueInfoProto | None) -> int | None:
    if info is None or not info.type.tensor_type.HasField("shape"):
        return None
    return len(info.type.tensor_type.shape.dim)
