"""Small IR graphs for pass tests, built without ONNX or torch."""

from __future__ import annotations

from graphmem.core.ir import DType, Graph, Node, Phase, Role, Value
from graphmem.core.symbolic import SymInt


class GraphBuilder:
    """Build a Graph node by node; tensors are float32 of a given element count."""

    def __init__(self, name: str = "test") -> None:
        self.name = name
        self.graph = Graph(name, [], {}, [], [])
        self.values: dict[str, Value] = self.graph.values
        self.nodes: list[Node] = self.graph.nodes
        self.inputs: list[Value] = []

    def tensor(self, name: str, numel: int | SymInt, role: Role) -> Value:
        size = numel if isinstance(numel, SymInt) else SymInt.const(numel)
        value = Value(name, DType.FLOAT32, (size,), role)
        self.values[name] = value
        if role is Role.INPUT:
            self.inputs.append(value)
        return value

    def node(self, name: str, inputs: list[str], outputs: dict[str, int | SymInt],
             op_type: str = "Relu", phase: Phase = Phase.NONE) -> Node:
        made = [self.tensor(out_name, numel, Role.ACTIVATION)
                for out_name, numel in outputs.items()]
        node = Node(name, op_type, [self.values[n] for n in inputs], made, phase=phase)
        return self.graph.add_node(node)

    def build(self, outputs: list[str]) -> Graph:
        graph_outputs = [self.values[n] for n in outputs]
        for value in graph_outputs:
            if value.role is Role.ACTIVATION:
                value.role = Role.OUTPUT
        self.graph.inputs = list(self.inputs)
        self.graph.outputs = graph_outputs
        self.graph.check()
        return self.graph


def sizes_of(graph: Graph) -> dict[str, SymInt | None]:
    return {name: value.nbytes for name, value in graph.values.items()}
