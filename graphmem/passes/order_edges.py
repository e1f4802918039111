"""The dependencies of a graph's nodes that any order must keep (`MemoryModel.predecessors`).

The data edges, plus order edges that keep a node which makes a view or an in-place result of a
storage in its model-order place among the other nodes touching that storage (an in-place write
must not move past a read of the old contents). ONNX graphs have no aliases: only data edges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from graphmem.core.ir import Node, Value


def node_predecessors(nodes: Sequence[Node],
                      index: Mapping[Node, int]) -> tuple[tuple[int, ...], ...]:
    """Node -> the nodes that must run before it (indices into `nodes`, the model order):
    its inputs' producers, and the order edges of views and in-place results."""
    preds: list[dict[int, None]] = []
    get = index.get
    for i, node in enumerate(nodes):
        found: dict[int, None] = {}
        for value in node.inputs:
            if value is not None and (producer := value.producer) is not None:
                source = get(producer)
                if source is not None and source != i:
                    found[source] = None
        preds.append(found)
    for before, after in _alias_order_edges(nodes):
        preds[index[after]][index[before]] = None
    return tuple(tuple(p) for p in preds)


def _alias_order_edges(nodes: Sequence[Node]) -> list[tuple[Node, Node]]:
    """Edges that keep view/in-place makers in place among the users of their storage.

    Per storage that has aliases, walk its users in model order: every node making an alias
    comes after all users before it and before all users after it (O(users) edges).
    """
    if not any(value.alias_of is not None for node in nodes for value in node.outputs):
        return []  # no views nor in-place results (every ONNX graph): no order edges
    touching: dict[Value, list[Node]] = {}
    makers: set[tuple[Value, Node]] = set()
    aliased: set[Value] = set()
    for node in nodes:
        for value in (*node.present_inputs, *node.outputs):
            storage = value.storage
            users = touching.setdefault(storage, [])
            if not users or users[-1] is not node:
                users.append(node)
        for value in node.outputs:
            if value.alias_of is not None:
                aliased.add(value.storage)
                makers.add((value.storage, node))
    edges: list[tuple[Node, Node]] = []
    for storage in aliased:
        last_maker: Node | None = None
        since: list[Node] = []
        for node in touching[storage]:
            if (storage, node) in makers:
                edges.extend((before, node) for before in since)
                if last_maker is not None:
                    edges.append((last_maker, node))
                last_maker, since = node, []
            else:
                if last_maker is not None:
                    edges.append((last_maker, node))
                since.append(node)
    return edges
