"""The second half of the training expansion (graphmem/training/expand.py): backward, the
recomputation of checkpointed segments, gradient accumulation, the optimizer update, and
the lifetimes eager PyTorch gives the step's tensors.

A backward node is a plain Node in the BACKWARD phase whose `origin` is the forward node it
differentiates (its cost comes from that node's backward rule, graphmem/ops/).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from graphmem.core.ir import Node, Phase, Role, Value
from graphmem.ops.registry import BackwardRule, backward_domain, find_backward_rule
from graphmem.training.checkpoint import RECOMPUTE_SUFFIX, CheckpointSegment, recompute_stop
from graphmem.training.config import TrainingGraph
from graphmem.training.forward import ForwardExpansion, same_type_cast
from graphmem.training.steps import TRAINING_DOMAIN, optimizer_nodes, state_values


@dataclass
class StepExpansion(ForwardExpansion):
    """The whole step: the forward expansion, then backward and the optimizer update."""

    grads: dict[Value, Value] = field(default_factory=dict)  # forward value -> its gradient
    backward_nodes: list[Node] = field(default_factory=list)
    grad_buffers: dict[Value, Value] = field(default_factory=dict)  # parameter -> its .grad

    # ----- backward -------------------------------------------------------------------------
    def run_backward(self, loss: Value) -> None:
        seed = self.new_value("loss/grad", loss.dtype, loss.shape, Role.ACTIVATION_GRADIENT)
        self.add_backward(Node("loss/grad_seed", "GradSeed", [loss], [seed],
                               domain=TRAINING_DOMAIN, module_path="loss"))
        self.grads[loss] = seed
        reaching = _nodes_reaching(loss)
        for node in reversed(self.forward_nodes):
            if node in self.needs and node in reaching:
                self.differentiate(node)

    def add_backward(self, node: Node) -> None:
        node.phase = Phase.BACKWARD
        self.graph.add_node(node)
        self.backward_nodes.append(node)

    def differentiate(self, node: Node) -> None:
        grad_outputs = [self.grads.pop(v) for v in node.outputs if v in self.grads]
        if not grad_outputs:
            return
        rule = find_backward_rule(node.op_type, node.domain)
        needs = self.needs[node]
        backward = Node(
            f"{node.name}/backward", node.op_type, [*grad_outputs, *self.saved_for(node)], [],
            dict(node.attributes), backward_domain(node.domain), node.module_path,
            origin=node, needs_grad=needs)
        made = []
        for index in sorted(needs):
            target = node.inputs[index]
            if target is None:
                continue
            role = Role.GRADIENT if target.role is Role.PARAMETER else Role.ACTIVATION_GRADIENT
            view = _gradient_is_view(rule, node, index, grad_outputs)
            grad = self.new_value(f"grad[{target.name}]", target.dtype, target.shape, role,
                                  alias_of=grad_outputs[0] if view else None)
            backward.outputs.append(grad)
            made.append((target, grad))
        for label, shape in (rule.temporaries(node, needs) if rule else ()):
            backward.outputs.append(self.new_value(
                f"{node.name}/backward/{label}", node.outputs[0].dtype, shape,
                Role.ACTIVATION_GRADIENT))
        self.add_backward(backward)
        for target, grad in made:
            self.accumulate(target, grad)

    # ----- checkpointed segments -----------------------------------------------------------
    def saved_for(self, node: Node) -> list[Value]:
        """What `node`'s backward reads: in a checkpointed segment, the recomputed copies of
        the tensors made inside it (recomputed now if this is the segment's first)."""
        segment = self.in_segment.get(node)
        saved = self.saved[node]
        if segment is None or not any(segment.makes(v) for v in saved):
            return saved
        if not segment.done:
            self.recompute(segment)
        copies = [segment.recomputed[v] if segment.makes(v) else v for v in saved]
        for value in copies:
            self.mark_saved(value)
        return copies

    def recompute(self, segment: CheckpointSegment) -> None:
        """The segment's forward again, up to its last node whose tensors backward reads."""
        segment.done = True
        for node in segment.nodes[:recompute_stop(segment, self.saved)]:
            inputs = [None if v is None else segment.recomputed.get(v, v) for v in node.inputs]
            outputs = []
            for value in node.outputs:
                alias = value.alias_of
                made = self.new_value(
                    f"{value.name}{RECOMPUTE_SUFFIX}", value.dtype, value.shape, Role.ACTIVATION,
                    alias_of=None if alias is None else segment.recomputed.get(alias, alias))
                segment.recomputed[value] = made
                outputs.append(made)
            self.add_backward(Node(f"{node.name}{RECOMPUTE_SUFFIX}", node.op_type, inputs,
                                   outputs, dict(node.attributes), node.domain,
                                   node.module_path, node.subgraph_node_count))

    def hold_segment_inputs(self) -> None:
        """The checkpoint's frame holds a segment's inputs until its last backward node."""
        step = {node: index for index, node in enumerate(self.graph.nodes)}
        for segment in self.segments:
            last = [b for b in self.backward_nodes if b.origin in segment.members]
            if not last:
                continue
            for value in segment.entering():
                held = value.held_until
                if held is None or step.get(held, -1) < step[last[-1]]:
                    value.held_until = last[-1]

    # ----- gradients ------------------------------------------------------------------------
    def accumulate(self, target: Value, grad: Value) -> None:
        """A second gradient of `target` is added to the first, in place when it owns its
        storage (autograd's InputBuffer), else into a new tensor."""
        if target.role is Role.PARAMETER and self.config.grad_accum > 1:
            self.accumulate_into_grad_buffer(target, grad)
            return
        old = self.grads.get(target)
        if old is None:
            self.grads[target] = grad
            return
        in_place = old.alias_of is None
        total = self.new_value(f"grad[{target.name}]", old.dtype, old.shape, old.role,
                               alias_of=old if in_place else None)
        if target.role is Role.PARAMETER:  # only the sum is the parameter's gradient
            grad.role = Role.ACTIVATION_GRADIENT
            if not in_place:
                old.role = Role.ACTIVATION_GRADIENT
        self.add_backward(Node(f"{grad.name}/accumulate", "GradAccumulate", [old, grad],
                               [total], domain=TRAINING_DOMAIN,
                               module_path=grad.producer.module_path if grad.producer else ""))
        self.grads[target] = total

    def accumulate_into_grad_buffer(self, target: Value, grad: Value) -> None:
        """Gradient accumulation: AccumulateGrad adds each new gradient into the parameter's
        existing .grad in place (`param.grad += new`), and the new one is freed."""
        grad.role = Role.ACTIVATION_GRADIENT
        buffer = self.grad_buffers.get(target)
        if buffer is None:
            buffer = self.new_value(f"{target.name}.grad", target.dtype, target.shape,
                                    Role.GRADIENT)
            self.grad_buffers[target] = buffer
        current = self.grads.get(target, buffer)
        total = self.new_value(f"grad[{target.name}]", buffer.dtype, buffer.shape,
                               Role.GRADIENT, alias_of=buffer)
        self.add_backward(Node(f"{grad.name}/accumulate", "GradAccumulate", [current, grad],
                               [total], domain=TRAINING_DOMAIN,
                               module_path=grad.producer.module_path if grad.producer else ""))
        self.grads[target] = total

    def allocate_grad_buffers(self) -> None:
        """The .grad tensors of the earlier micro-batches, alive from the step's start.

        Their node runs first and is in the BACKWARD phase, as the torch tracer labels the
        `.grad` sums it makes (graphmem/frontends/torch/trace.py)."""
        if not self.grad_buffers:
            return
        node = Node("optimizer/accumulated_grads", "GradBuffers", [],
                    list(self.grad_buffers.values()), domain=TRAINING_DOMAIN,
                    module_path="optimizer", phase=Phase.BACKWARD)
        self.graph.add_node(node, index=0)

    # ----- optimizer ------------------------------------------------------------------------
    def add_optimizer(self) -> None:
        values = self.graph.values
        params = [v for v in values.values() if v.role is Role.PARAMETER and v in self.grads]
        grads = [self.grads[p] for p in params]
        for grad in grads:
            if grad.storage.role is Role.ACTIVATION_GRADIENT:
                grad.storage.role = Role.GRADIENT  # a view's base holds a parameter gradient
        state = state_values(params, self.config.optimizer)
        for slot_values in state.values():
            for value in slot_values:
                values[value.name] = value
        steps = optimizer_nodes(params, grads, self.config.optimizer, state)
        for node in steps:  # in the OPTIMIZER phase (training/steps.py)
            for value in node.outputs:
                values[value.name] = value
            self.graph.add_node(node)
        for grad in grads:
            grad.held_until = steps[-1]  # the step's list of gradients lives to its end

    # ----- result ---------------------------------------------------------------------------
    def finish(self, model_outputs: list[Value], loss: Value) -> TrainingGraph:
        end_of_backward = self.backward_nodes[-1]
        for value in model_outputs:
            value.held_until = end_of_backward
        with_backward = {b.origin for b in self.backward_nodes if b.origin is not None}
        for node, saved in self.saved.items():
            segment = self.in_segment.get(node)
            if node not in with_backward:
                for value in saved:  # freed with the autograd graph
                    if segment is None or not segment.makes(value):
                        value.held_until = end_of_backward
        self.hold_segment_inputs()
        loss.role = Role.OUTPUT
        self.graph.outputs = [loss]
        return TrainingGraph(self.graph, dict(sorted(self.no_rule.items())), loss.name,
                             self.unfolded_batchnorms, self.restored_biases)


def _nodes_reaching(target: Value) -> set[Node]:
    """Every node the target depends on (a gradient of the target can reach them)."""
    reached: set[Node] = set()
    stack = [target]
    seen: set[Value] = set()
    while stack:
        value = stack.pop()
        if value in seen or value.producer is None:
            continue
        seen.add(value)
        reached.add(value.producer)
        stack.extend(value.producer.present_inputs)
    return reached


def _gradient_is_view(rule: BackwardRule | None, node: Node, index: int,
                      grad_outputs: list[Value]) -> bool:
    """The gradient of input `index` is the incoming gradient (or a view of it)."""
    if rule is None or len(grad_outputs) != 1:
        return False
    base = node.input(0)
    if rule.grad_view or (base is not None and same_type_cast(node, base)):
        return True
    # a parameter's gradient is its own tensor (AccumulateGrad clones a shared gradient)
    target, incoming = node.inputs[index], grad_outputs[0]
    return (rule.passes_gradient_to(index) and target is not None
            and target.role is not Role.PARAMETER and target.dtype is incoming.dtype
            and target.shape is not None and target.shape == incoming.shape)
