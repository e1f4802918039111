"""onnxruntime's execution order as first written, node by node: the reference the numbered
walk (graphmem/runtime_models/ort_plan.py) is checked against."""

from __future__ import annotations

from graphmem.core.ir import Graph, Node


def plain_order(graph: Graph) -> list[Node]:
    """onnxruntime's order as first written: each node's producers sorted by their index."""
    index = {id(node): i for i, node in enumerate(graph.nodes)}
    stack = [(n, False) for n in graph.nodes if not any(v.consumers for v in n.outputs)]
    visited: set[int] = set()
    order: list[Node] = []
    while stack:
        node, leaving = stack.pop()
        if leaving:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        producers = {id(v.producer): v.producer for v in node.present_inputs
                     if v.producer is not None}
        for producer in sorted(producers.values(), key=lambda n: index[id(n)]):
            if id(producer) not in visited:
                stack.append((producer, False))
    return order
