"""Pointwise functions that exporters decompose, put back together for the training step.

Exporters write PyTorch's one-op activations as chains of elementwise ONNX ops: tanh-GELU as
seven (x*x*x, 0.044715, +x, *sqrt(2/pi), tanh, +1, *x/2), SiLU as Sigmoid and Mul, rsqrt as
Sqrt and Reciprocal. In PyTorch each is ONE autograd op that saves only its input
(gelu_backward(grad, self), silu_backward(grad, self)) and makes no intermediates; run op by
op, the chain would save every intermediate (tanh-GELU: 4 tensors of the input's size instead
of 1). A region is fused when:
- it is a connected set of two or more elementwise ops (the table below) whose other inputs
  are constants (scalars such as 0.5 and 0.044715), never parameters;
- exactly one activation enters it and exactly one leaves it, and every tensor made inside is
  read only inside.
The fused node saves its input and costs its ops' FLOPs (forward), twice that (backward).
"""

from __future__ import annotations

from graphmem.core.ir import Node, Role, Value
from graphmem.ops.elementwise import FLOPS_PER_ELEMENT
from graphmem.ops.training import FUSED_OP, TRAINING_DOMAIN

_NOT_FUSED = frozenset({"Cast", "CastLike", "Identity", "Dropout", "QuantizeLinear",
                        "DequantizeLinear", "DynamicQuantizeLinear", "Sum", "Max", "Min",
                        "Mean", "Where", "Equal", "Less", "Greater", "LessOrEqual",
                        "GreaterOrEqual", "And", "Or", "Not", "Xor", "IsNaN", "IsInf"})
FUSABLE_OPS = frozenset(FLOPS_PER_ELEMENT) - _NOT_FUSED


def fuse_pointwise_regions(nodes: list[Node], graph_outputs: list[Value]) -> list[Node]:
    """`nodes` with every fusable region replaced by one FusedPointwise node (at the place of
    the region's last node; the region reads only its input and constants, made earlier).

    Regions are tried from the last node back, each the largest one ending at its node."""
    position = {node: step for step, node in enumerate(nodes)}
    fusable = {n for n in nodes if _fusable(n)}
    taken: set[Node] = set()
    replacements: dict[Node, Node] = {}
    for exit_node in reversed(nodes):
        if exit_node not in fusable or exit_node in taken:
            continue
        region = sorted(_region_ending_at(exit_node, fusable - taken), key=position.__getitem__)
        fused = _fused_node(region, set(graph_outputs))
        if fused is not None:
            taken.update(region)
            replacements[exit_node] = fused
    return [replacements.get(n, n) for n in nodes if n not in taken or n in replacements]


def _region_ending_at(exit_node: Node, allowed: set[Node]) -> set[Node]:
    """The fusable ancestors of `exit_node` whose results nothing outside reads."""
    cut: set[Value] = set()
    while True:
        region = _closure(exit_node, allowed, cut)
        leaking = {v for n in region if n is not exit_node for v in n.outputs
                   if any(c not in region for c in v.consumers)}
        if leaking <= cut:
            return region
        cut |= leaking


def _closure(exit_node: Node, allowed: set[Node], cut: set[Value]) -> set[Node]:
    region = {exit_node}
    stack = [exit_node]
    while stack:
        for value in stack.pop().present_inputs:
            producer = value.producer
            if value not in cut and producer in allowed and producer not in region:
                region.add(producer)
                stack.append(producer)
    return region


def _fusable(node: Node) -> bool:
    return (node.op_type in FUSABLE_OPS and node.domain in ("", "ai.onnx")
            and len(node.outputs) == 1
            and all(v.role in (Role.ACTIVATION, Role.CONSTANT) for v in node.present_inputs))


def _fused_node(region: list[Node], graph_outputs: set[Value]) -> Node | None:
    if len(region) < 2:
        return None
    inside = set(region)
    made = {v for n in region for v in n.outputs}
    entering = {v for n in region for v in n.present_inputs
                if v not in made and v.role is not Role.CONSTANT}
    leaving = [v for v in made
               if v in graph_outputs or not v.consumers or any(c not in inside
                                                               for c in v.consumers)]
    if len(entering) != 1 or len(leaving) != 1 or leaving[0] is not region[-1].outputs[0]:
        return None
    ops = tuple(n.op_type for n in region)
    last = region[-1]
    return Node(last.name, FUSED_OP, [next(iter(entering))], [leaving[0]],
                {"ops": ops, "flops_per_element": sum(FLOPS_PER_ELEMENT[op] for op in ops)},
                domain=TRAINING_DOMAIN, module_path=last.module_path)
