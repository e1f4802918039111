"""Random IR graphs for invariant tests (liveness, arena, schedule), built without ONNX or torch."""

from __future__ import annotations

import random

from graphmem.core.ir import Graph, Role
from graphmem.core.symbolic import SymInt
from tests.builders import GraphBuilder


def random_dag(seed: int, node_count: int = 30) -> Graph:
    rng = random.Random(seed)
    b = GraphBuilder(f"random{seed}")
    b.tensor("in", rng.randint(1, 50), Role.INPUT)
    b.tensor("p", rng.randint(1, 50), Role.PARAMETER)
    available = ["in", "p"]
    for index in range(node_count):
        inputs = rng.sample(available, k=min(len(available), rng.randint(1, 3)))
        outputs = {f"t{index}_{k}": rng.randint(1, 200) for k in range(rng.randint(1, 2))}
        b.node(f"n{index}", inputs, outputs)
        available.extend(outputs)
    return b.build([available[-1]])


def symbolic_random_dag(seed: int, node_count: int = 25) -> Graph:
    """Like random_dag, with sizes a + b*batch (+ c*batch*seq now and then)."""
    rng = random.Random(seed)
    batch, seq = SymInt.symbol("batch"), SymInt.symbol("seq")

    def size() -> SymInt:
        value = batch * rng.randint(0, 50) + rng.randint(1, 50)
        return value + batch * seq * rng.randint(1, 5) if rng.random() < 0.3 else value

    b = GraphBuilder(f"sym{seed}")
    b.tensor("in", size(), Role.INPUT)
    b.tensor("p", rng.randint(1, 50), Role.PARAMETER)
    available = ["in", "p"]
    for index in range(node_count):
        inputs = rng.sample(available, k=min(len(available), rng.randint(1, 3)))
        outputs = {f"t{index}_{k}": size() for k in range(rng.randint(1, 2))}
        b.node(f"n{index}", inputs, outputs)
        available.extend(outputs)
    return b.build([available[-1]])


def copies_and_random_dag(seed: int) -> Graph:
    """A random DAG among whose nodes are copies of weights (graph outputs), some copies of
    copies, some read by later nodes."""
    rng = random.Random(seed)
    b = GraphBuilder(f"mixed{seed}")
    b.tensor("in", rng.randint(1, 50), Role.INPUT)
    b.tensor("p", rng.randint(1, 50), Role.PARAMETER)
    available, outputs = ["in"], []
    for index in range(rng.randint(5, 8)):
        if rng.random() < 0.45:  # a copy: of the weight, or of an earlier copy
            source = rng.choice(["p", *outputs])
            name = f"c{index}"
            b.node(name, [source], {name: rng.randint(1, 30)})
            outputs.append(name)
            if rng.random() < 0.3:
                available.append(name)  # later nodes may read it
            continue
        inputs = rng.sample(available, k=min(len(available), rng.randint(1, 2)))
        made = {f"t{index}": rng.randint(1, 200)}
        b.node(f"n{index}", inputs, made)
        available.extend(made)
    last = next(name for name in reversed(available) if name not in outputs)
    return b.build([*outputs, last] if last != "in" else outputs)
