"""One walk over a graph's nodes for the rules of onnx's second pass (infer.py `_second_pass`):
each value's producer, the initializers by name and the nodes of each op type. Each rule
walked the 22,000 nodes of a decoder on its own (the slices', the sequence's, the reshapes'
twice), about 0.04 CPU s a walk of protobuf access; the graph is not changed while they read
it."""

from __future__ import annotations

import onnx


class GraphIndex:
    def __init__(self, graph: onnx.GraphProto) -> None:
        self.initializer = {t.name: t for t in graph.initializer}
        self.producer: dict[str, onnx.NodeProto] = {}
        self.by_op: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            self.by_op.setdefault(node.op_type, []).append(node)
            for name in node.output:
                self.producer[name] = node

    def nodes(self, op_type: str) -> list[onnx.NodeProto]:
        """The nodes of `op_type` in the graph's order, any domain."""
        return self.by_op.get(op_type, [])
