"""ONNX's preview training ops (domain ai.onnx.preview.training): Adagrad, Adam, Momentum
and Gradient.

The optimizers update n tensors at once: inputs R, T, then X_1..X_n, G_1..G_n and each state
(Adagrad: H; Momentum: V; Adam: V, H), so n = (inputs - 2) / (2 + states). FLOPs per element
of each X, the spec's pseudo code counted a primitive at a time (the learning-rate factor is
a scalar, not counted):
- Adagrad: G' = c * X + G (2); H' = H + G' * G' (2); sqrt(H') + eps (2);
  X - r * G' / (.) (3): 9
- Momentum: G' (2); V' = alpha * V + beta * G' (3); standard X - R * V' (2): 7;
  nesterov X - R * (G' + alpha * V') (4): 9
- Adam: G' (2); V' = alpha * V + (1 - alpha) * G' (3); H' = beta * H + (1 - beta) * G'^2 (4);
  sqrt(H') + eps (2); X - R' * V' / (.) (3); (1 - post) * X (1): 15
Gradient(xs, zs, y) computes dy/dx for each x of xs: the backward of every node on a path
from xs or zs to y, each priced by its op's backward rule (registry.py) for the inputs on the
path; the seed gradient (ones) is no arithmetic. A node on the path with no backward rule
makes the cost unknown, and the node says which.
"""

from __future__ import annotations

from graphmem.core.ir import Node, Value
from graphmem.core.symbolic import SymInt, sum_sizes
from graphmem.ops.registry import (
    OpCost,
    ShapeUnknownError,
    find_backward_rule,
    input_numel,
    register,
)

PREVIEW_TRAINING = "ai.onnx.preview.training"
STATE_COUNT = {"Adagrad": 1, "Momentum": 1, "Adam": 2}
ADAGRAD_FLOPS = 9
MOMENTUM_FLOPS = 7
NESTEROV_FLOPS = 9
ADAM_FLOPS = 15


def optimized_elements(node: Node) -> SymInt:
    """numel of X_1..X_n (inputs 2 .. 2 + n)."""
    tensors = (len(node.inputs) - 2) // (2 + STATE_COUNT[node.op_type])
    return sum_sizes(input_numel(node, 2 + i) for i in range(tensors))


@register("Adagrad", domain=PREVIEW_TRAINING)
def adagrad(node: Node) -> OpCost:
    return OpCost.from_flops(optimized_elements(node) * ADAGRAD_FLOPS)


@register("Momentum", domain=PREVIEW_TRAINING)
def momentum(node: Node) -> OpCost:
    nesterov = node.attr_str("mode", "standard") == "nesterov"
    per_element = NESTEROV_FLOPS if nesterov else MOMENTUM_FLOPS
    return OpCost.from_flops(optimized_elements(node) * per_element)


@register("Adam", domain=PREVIEW_TRAINING)
def adam(node: Node) -> OpCost:
    return OpCost.from_flops(optimized_elements(node) * ADAM_FLOPS)


def path_to(node: Node, target: str) -> list[Node]:
    """The nodes on a path from the Gradient node's inputs to the value named `target`, in
    the order they were reached."""
    reached: dict[int, Node] = {}
    frontier = [v for v in node.present_inputs]
    while frontier:
        value = frontier.pop()
        for consumer in value.consumers:
            if consumer is not node and id(consumer) not in reached:
                reached[id(consumer)] = consumer
                frontier.extend(consumer.outputs)
    makes_target = [n for n in reached.values() if any(v.name == target for v in n.outputs)]
    on_path: dict[int, Node] = {}
    stack = makes_target
    while stack:
        current = stack.pop()
        if id(current) in on_path:
            continue
        on_path[id(current)] = current
        stack.extend(v.producer for v in current.present_inputs
                     if v.producer is not None and id(v.producer) in reached)
    return list(on_path.values())


def inputs_on_path(forward: Node, sources: set[int], path: set[int]) -> frozenset[int]:
    def on_path(value: Value) -> bool:
        return id(value) in sources or (value.producer is not None and id(value.producer) in path)

    return frozenset(i for i, v in enumerate(forward.inputs) if v is not None and on_path(v))


@register("Gradient", domain=PREVIEW_TRAINING)
def gradient(node: Node) -> OpCost:
    target = node.attr_str("y", "")
    path = path_to(node, target)
    if not path:
        raise ShapeUnknownError(f"{node.describe()}: no path from its inputs to {target!r}")
    sources = {id(v) for v in node.present_inputs}
    ids = {id(n) for n in path}
    cost = OpCost.zero()
    for forward in path:
        rule = find_backward_rule(forward.op_type, forward.domain)
        if rule is None:
            raise ShapeUnknownError(f"{node.describe()}: no backward rule for"
                                    f" {forward.describe()} on the path to {target!r}")
        cost = cost + rule.flops(forward, inputs_on_path(forward, sources, ids))
    return cost
