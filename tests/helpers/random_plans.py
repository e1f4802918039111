"""Random graphs for onnxruntime's planner: views, in-place ops, graph outputs, repeated and
missing inputs, scalars and shapes onnxruntime cannot name (tests/test_ort_plan.py,
tests/test_probe_positions.py)."""

from __future__ import annotations

import random

from graphmem.core.ir import DType, Graph, Node, Role, Value
from graphmem.core.ort_view import PlanShape
from graphmem.core.symbolic import SymInt
from graphmem.runtime_models.ort_kernels import CONTRIB_INPLACE_INPUT

SHAPES: list[PlanShape | None] = [(4, 8), (4, 8), (8, 4), (2, "batch", 8), (), (16,), (4, None),
                                  None]
DTYPES = [DType.FLOAT32, DType.FLOAT32, DType.FLOAT16, DType.INT64, DType.STRING]
OPS = [("", "Relu"), ("", "Relu"), ("", "Reshape"), ("", "Identity"), ("", "Add"),
       ("", "MatMul"), ("", "Sigmoid"), ("com.microsoft.nchwc", "Conv"), ("custom", "Thing"),
       ("", "Split")]


def random_graph(rng: random.Random, nodes: int) -> tuple[Graph, dict[str, PlanShape | None]]:
    shapes: dict[str, PlanShape | None] = {}
    graph = Graph(name="g", nodes=[], values={}, inputs=[], outputs=[])

    def new_value(name: str, role: Role) -> Value:
        value = Value(name, rng.choice(DTYPES), (SymInt.const(4),), role)
        shapes[name] = rng.choice(SHAPES)
        graph.values[name] = value
        return value

    pool = [new_value(f"in{i}", Role.INPUT) for i in range(rng.randint(1, 3))]
    pool += [new_value(f"w{i}", Role.PARAMETER) for i in range(rng.randint(0, 2))]
    graph.inputs = pool[:]
    for n in range(nodes):
        domain, op = rng.choice(OPS)
        count = 4 if (domain, op) in CONTRIB_INPLACE_INPUT else rng.randint(1, 3)
        inputs: list[Value | None] = [rng.choice(pool[-6:] if rng.random() < 0.8 else pool)
                                      for _ in range(count)]
        if rng.random() < 0.15:
            inputs[rng.randrange(count)] = None
        made = [new_value(f"v{n}_{k}", Role.ACTIVATION)
                for k in range(2 if op == "Split" else 1)]
        graph.add_node(Node(f"n{n}", op, inputs, made, domain=domain))
        pool += made
    produced = [v for v in graph.values.values() if v.producer is not None]
    for value in rng.sample(produced, k=rng.randint(1, min(4, len(produced)))):
        value.role = Role.OUTPUT
        graph.outputs.append(value)
    return graph, shapes
