"""Small IR graphs for pass tests, built without ONNX or torch."""

from __future__ import annotations

from graphmem.core.ir import DType, Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt


class GraphBuilder:
    """Build a Graph node by node; tensors are float32 of a given element count."""

    def __init__(self, name: str = "test") -> None:
        self.name = name
        self.values: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.inputs: list[Value] = []

    def tensor(self, name: str, numel: int | SymInt, role: Role) -> Value:
        size = numel if isinstance(numel, SymInt) else SymInt.const(numel)
        value = Value(name, DType.FLOAT32, (size,), role)
        self.values[name] = value
        if role is Role.INPUT:
            self.inputs.append(value)
        return value

    def node(self, name: str, inputs: list[str], outputs: dict[str, int | SymInt],
             op_type: str = "Relu") -> Node:
        node = Node(name, op_type, [self.values[n] for n in inputs], [])
        for value in node.present_inputs:
            value.consumers.append(node)
        for out_name, numel in outputs.items():
            value = self.tensor(out_name, numel, Role.ACTIVATION)
            value.producer = node
            node.outputs.append(value)
        self.nodes.append(node)
        return node

    def build(self, outputs: list[str]) -> Graph:
        graph_outputs = [self.values[n] for n in outputs]
        for value in graph_outputs:
            if value.role is Role.ACTIVATION:
                value.role = Role.OUTPUT
        return Graph(self.name, self.nodes, self.values, self.inputs, graph_outputs)


def sizes_of(graph: Graph) -> dict[str, SymInt | None]:
    return {name: value.nbytes for name, value in graph.values.items()}
