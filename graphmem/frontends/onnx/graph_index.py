"""One walk over a graph's nodes for the rules of onnx's second pass (infer.py `_second_pass`):
each value's producer, the initializers by name and the nodes of each op type. Each rule
walked the 22,000 nodes of a decoder on its own (the slices', the sequence's, the reshapes'
twice), about 0.04 CPU s a walk of protobuf access; the graph is not changed while they read
it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from graphmem.frontends.onnx.value_types import KnownTypes


class GraphIndex:
    def __init__(self, graph: onnx.GraphProto, op_types: Sequence[str] | None = None) -> None:
        """`op_types`: the graph's nodes' op types in order, where the caller read them
        (read.py `ReadModel`: the importer's copy of the model as read), not read again."""
        self.initializer = {t.name: t for t in graph.initializer}
        # the tables filled through locals (no attribute read per node: 0.034 -> 0.032 CPU s
        # at 22,000 nodes), the same entries in the same order
        self.producer: dict[str, onnx.NodeProto] = {}
        producer = self.producer
        self.position: dict[str, int] = {}  # each value's producer's (fold.py restore_nodes)
        value_position = self.position
        self.by_op: dict[str, list[onnx.NodeProto]] = {}
        by_op = self.by_op
        # the same nodes' positions: a copy of the graph's nodes is read at them
        self.positions: dict[str, list[int]] = {}
        positions = self.positions
        nodes = graph.node
        typed = zip(nodes, op_types, strict=True) if op_types is not None else (
            (node, node.op_type) for node in nodes)
        for position, (node, op_type) in enumerate(typed):
            if op_type in by_op:
                by_op[op_type].append(node)
                positions[op_type].append(position)
            else:
                by_op[op_type] = [node]
                positions[op_type] = [position]
            for name in node.output:
                producer[name] = node
                value_position[name] = position
        self.known = KnownTypes()  # the rules' fully_known verdicts, by type (any pass's)
        self._graph = graph
        self._consumers: dict[str, list[int]] | None = None

    @property
    def consumers(self) -> dict[str, list[int]]:
        """Each value's readers, by position (once per read), built on the first question:
        only the rotary broadcasts (seq_dims.py) and the third pass (third_pass.py) ask."""
        if self._consumers is None:
            consumers: dict[str, list[int]] = {}
            for position, node in enumerate(self._graph.node):
                for name in node.input:
                    if name in consumers:
                        consumers[name].append(position)
                    else:
                        consumers[name] = [position]
            self._consumers = consumers
        return self._consumers

    def nodes(self, op_type: str) -> list[onnx.NodeProto]:
        """The nodes of `op_type` in the graph's order, any domain."""
        return self.by_op.get(op_type, [])

    def made(self) -> set[str]:
        """The names the graph's nodes other than Constant nodes make (value_types.py
        `typed_by_onnx`)."""
        constants = {name for node in self.by_op.get("Constant", ()) for name in node.output}
        return {name for name in self.producer if name and name not in constants}

    def consumers_of(self, name: str) -> list[int]:
        """The positions of the nodes reading `name` (`consumers`)."""
        return self.consumers.get(name, [])

    def retyped(self, before: Mapping[int, str]) -> None:
        """The nodes at `before`'s positions (by the op type each had) were changed in place to
        another op (fold.py folds to Constant nodes, repeat_dims.py turns Tiles into Expands):
        moved to their op's nodes, in the graph's order. Their producers are unchanged (each
        keeps its first output, its only one where folded); `consumers`, if built, still lists
        a folded node as a reader of what it read (callers look at each reader as it is now)."""
        if not before:
            return
        moved: dict[str, list[tuple[int, onnx.NodeProto]]] = {}
        for op_type in set(before.values()):
            pairs = list(zip(self.positions[op_type], self.by_op[op_type], strict=True))
            for pair in pairs:
                if pair[0] in before:
                    moved.setdefault(pair[1].op_type, []).append(pair)
            self._set(op_type, [pair for pair in pairs if pair[0] not in before])
        for op_type, pairs in moved.items():
            had = zip(self.positions.get(op_type, []), self.by_op.get(op_type, []), strict=True)
            self._set(op_type, sorted([*had, *pairs], key=lambda pair: pair[0]))

    def _set(self, op_type: str, pairs: list[tuple[int, onnx.NodeProto]]) -> None:
        if pairs:
            self.positions[op_type] = [p for p, _ in pairs]
            self.by_op[op_type] = [n for _, n in pairs]
        else:
            self.positions.pop(op_type, None)
            self.by_op.pop(op_type, None)
