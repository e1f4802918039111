"""Training expansion: one graph for a whole training step of an ONNX inference graph.

The forward graph becomes, in this order:
1. the forward nodes (with autocast's casts under AMP), then the loss (cross-entropy of the
   model's first output, graphmem/training/steps.py). Tensors autograd saves for
   backward (each op's backward rule, graphmem/ops/) are SAVED_ACTIVATION and live until
   the backward node that reads them; ops PyTorch runs as views (Reshape, Transpose, Split...)
   allocate nothing, as in eager PyTorch;
2. one backward node per forward node that a gradient reaches, in reverse order: it reads the
   gradients of its outputs and its saved tensors and makes the gradients of its inputs that
   need one (ACTIVATION_GRADIENT, freed after their last use; a tensor read by several nodes
   gets its gradients summed in place, as autograd's InputBuffer does) and of parameters
   (GRADIENT, held until the optimizer step ends);
3. the optimizer update (training_steps.py), with its state resident (OPTIMIZER_STATE).
   With gradient accumulation, every .grad exists from the start (the earlier micro-batches
   left it) and each new parameter gradient is added into it in place, then freed.
As in eager PyTorch, a Cast to the tensor's own type is the tensor itself, and add/sub hand
the incoming gradient on to a same-shaped input without a copy. What exporters did to the
graph (merged initializers, running statistics, BatchNorm folded into convs) is undone first
(training_exports.py). Segments named in `TrainingConfig.checkpoints` run under activation
checkpointing: nothing made inside them is saved, and backward recomputes them
(training_checkpoint.py).
The model's outputs stay alive until backward ends (the training loop holds them in a Python
variable, `out = model(x); loss = ce(out, y); loss.backward()`), and saved tensors of nodes
that no gradient reaches are freed with the autograd graph when backward ends. Every float
initializer of more than one element, BatchNorm running statistics aside, is a trainable
parameter (ONNX cannot tell a frozen weight or a folded buffer from a trained one).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from graphmem.core.ir import RESIDENT_ROLES, DType, Graph, Node, Role, Value
from graphmem.errors import GraphmemError
from graphmem.ops.registry import (
    BackwardRule,
    OpCost,
    find_backward_rule,
    register,
    registered_backward_ops,
)
from graphmem.training.checkpoint import (
    RECOMPUTE_SUFFIX,
    CheckpointSegment,
    recompute_stop,
    resolve_segments,
    segment_index,
)
from graphmem.training.exports import (
    folded_batchnorm_bias,
    identity_of_resident,
    running_statistics,
)
from graphmem.training.fusion import fuse_pointwise_regions
from graphmem.training.precision import (
    AUTOCAST_DEVICES,
    HALF_DTYPES,
    Precision,
    cast_target,
    op_precision,
    output_dtype,
)
from graphmem.training.steps import (
    OPTIMIZERS,
    TRAINING_DOMAIN,
    loss_nodes,
    optimizer_nodes,
    state_values,
)

BACKWARD_DOMAIN = "graphmem.backward"
# ops whose view needs a contiguous input (else PyTorch's reshape copies)
_RESHAPING_VIEWS = frozenset({"Reshape", "Flatten"})


@dataclass(frozen=True)
class TrainingConfig:
    optimizer: str = "adam"
    amp: str | None = None  # "fp16" | "bf16"
    autocast_device: str = "cuda"  # whose autocast op lists: "cuda" or "cpu"
    # decomposed activations (tanh-GELU, SiLU) as the one PyTorch op they came from
    fuse_pointwise: bool = True
    # a BatchNorm that the exporter folded into a conv is trained as Conv + BatchNorm
    # (graphmem/training/exports.py)
    unfold_batchnorm: bool = True
    # micro-batches per optimizer step: above 1, every parameter's .grad exists before the
    # forward starts (from the second micro-batch on) and backward adds into it
    grad_accum: int = 1
    # forward segments run under activation checkpointing: module paths or FIRST..LAST node
    # ranges (graphmem/training/checkpoint.py)
    checkpoints: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrainingGraph:
    graph: Graph
    no_backward_rule: dict[str, int]  # op type -> nodes counted as saving all their inputs
    loss: str  # name of the loss value
    unfolded_batchnorms: int = 0  # convs given back the BatchNorm folded into them


@dataclass(eq=False)
class BackwardNode(Node):
    """The backward of one forward node (its cost comes from the forward node's rule)."""

    forward: Node | None = None
    needs_grad: frozenset[int] = frozenset()


def expand_training(graph: Graph, config: TrainingConfig) -> TrainingGraph:
    """The whole training step of `graph` as one graph (see the module docstring)."""
    _check_config(config)
    logits = _logits(graph)
    expansion = _Expansion(graph, config)
    src_loss_nodes, targets, loss = loss_nodes(logits)
    loss_constants = [v for n in src_loss_nodes for v in n.present_inputs
                      if v.role is Role.CONSTANT]
    expansion.copy_residents([*graph.inputs, targets], loss_constants)
    forward = graph.nodes
    if config.fuse_pointwise:
        forward = fuse_pointwise_regions(graph.nodes, graph.outputs)
    for node in forward:
        expansion.copy_forward(node)
    expansion.segments = resolve_segments(expansion.forward_nodes, config.checkpoints)
    for node in src_loss_nodes:  # cross_entropy is on both autocast fp32 lists
        expansion.copy_forward(node, Precision.FLOAT32)
    expansion.save_for_backward()
    expansion.run_backward(expansion.mapped[loss])
    expansion.allocate_grad_buffers()
    expansion.add_optimizer()
    return expansion.finish(graph, [expansion.mapped[v] for v in graph.outputs],
                            expansion.mapped[loss])


def _check_config(config: TrainingConfig) -> None:
    if config.optimizer not in OPTIMIZERS:
        raise GraphmemError(f"--optimizer {config.optimizer}: choose one of"
                            f" {', '.join(OPTIMIZERS)}")
    if config.amp is not None and config.amp not in HALF_DTYPES:
        raise GraphmemError(f"--amp {config.amp}: choose fp16 or bf16")
    if config.grad_accum < 1:
        raise GraphmemError(f"--grad-accum {config.grad_accum}: give 1 or more micro-batches")
    if config.autocast_device not in AUTOCAST_DEVICES:
        raise GraphmemError(f"autocast device {config.autocast_device}: choose cuda or cpu")


def _logits(graph: Graph) -> Value:
    if not graph.outputs:
        raise GraphmemError(f"model {graph.name} has no outputs to compute a loss from")
    logits = graph.outputs[0]
    if not logits.dtype.is_float or logits.shape is None or len(logits.shape) < 2:
        raise GraphmemError(
            f"--train computes cross-entropy on the first output, which must be float logits"
            f" [..., classes]; {logits.name} is {logits.dtype.label}{logits.shape_text()}")
    if not any(v.dtype.is_float for v in graph.values_with_role(Role.PARAMETER)):
        raise GraphmemError(f"model {graph.name} has no float parameters to train")
    return logits


@dataclass
class _Expansion:
    source: Graph
    config: TrainingConfig
    values: dict[str, Value] = field(default_factory=dict)
    mapped: dict[Value, Value] = field(default_factory=dict)  # source value -> copy
    nodes: list[Node] = field(default_factory=list)
    forward_nodes: list[Node] = field(default_factory=list)
    weight_casts: dict[tuple[Value, DType], Value] = field(default_factory=dict)
    noncontiguous: set[Value] = field(default_factory=set)
    needs: dict[Node, frozenset[int]] = field(default_factory=dict)
    saved: dict[Node, list[Value]] = field(default_factory=dict)
    grads: dict[Value, Value] = field(default_factory=dict)  # forward value -> its gradient
    backward_nodes: list[Node] = field(default_factory=list)
    no_rule: Counter[str] = field(default_factory=Counter)
    inputs: list[Value] = field(default_factory=list)
    grad_buffers: dict[Value, Value] = field(default_factory=dict)  # parameter -> its .grad
    unfolded_batchnorms: int = 0
    segments: list[CheckpointSegment] = field(default_factory=list)
    in_segment: dict[Node, CheckpointSegment] = field(default_factory=dict)

    # ----- values ---------------------------------------------------------------------------
    def new_value(self, name: str, dtype: DType, shape: object, role: Role,
                  producer: Node | None = None, alias_of: Value | None = None) -> Value:
        unique = name if name not in self.values else f"{name}#{len(self.values)}"
        value = Value(unique, dtype, shape, role, producer=producer, alias_of=alias_of)  # type: ignore[arg-type]
        self.values[unique] = value
        return value

    def copy_residents(self, graph_inputs: list[Value], constants: list[Value]) -> None:
        residents = [v for v in self.source.values.values() if v.role in RESIDENT_ROLES]
        statistics = running_statistics(self.source)
        for value in dict.fromkeys([*residents, *graph_inputs, *constants]):
            role = Role.BUFFER if value in statistics else value.role
            self.mapped[value] = self.new_value(value.name, value.dtype, value.shape, role)
        self.inputs = [self.mapped[v] for v in graph_inputs]

    @property
    def half(self) -> DType | None:
        return HALF_DTYPES[self.config.amp] if self.config.amp else None

    # ----- forward --------------------------------------------------------------------------
    def copy_forward(self, node: Node, precision: Precision | None = None) -> None:
        resident = identity_of_resident(node, self.mapped)
        if resident is not None:  # an exporter's alias of a deduplicated initializer
            self.mapped[node.outputs[0]] = resident
            return
        bias = folded_batchnorm_bias(node) if self.config.unfold_batchnorm else None
        if bias is not None:  # the conv without its folded bias, then the BatchNorm
            node = Node(node.name, node.op_type, node.inputs[:2], list(node.outputs),
                        dict(node.attributes), node.domain, node.module_path)
        if precision is None:
            precision = op_precision(node, self.config.autocast_device)
        inputs = [self.autocast_input(node, v, precision) for v in node.inputs]
        copy = Node(node.name, node.op_type, inputs, [], dict(node.attributes), node.domain,
                    node.module_path, node.subgraph_node_count)
        for value in node.outputs:
            dtype = value.dtype
            if self.half is not None:
                dtype = output_dtype(node, value.dtype, precision, self.half, inputs)
            out = self.new_value(value.name, dtype, value.shape, Role.ACTIVATION, copy)
            self.mapped[value] = out
            copy.outputs.append(out)
        self.as_view(copy)
        self.add_forward(copy)
        if bias is not None:
            self.add_batchnorm(copy, self.mapped[bias], node.outputs[0])

    def add_batchnorm(self, conv: Node, beta: Value, source_output: Value) -> None:
        """Training-mode BatchNorm after `conv`: the folded bias is its beta, gamma is a new
        parameter, the running statistics new buffers (training_exports.py)."""
        made = conv.outputs[0]
        gamma = self.new_value(f"{conv.name}/batchnorm.weight", beta.dtype, beta.shape,
                               Role.PARAMETER)
        statistics = [self.new_value(f"{conv.name}/batchnorm.{label}", beta.dtype, beta.shape,
                                     Role.BUFFER) for label in ("running_mean", "running_var")]
        node = Node(f"{conv.name}/batchnorm", "BatchNormalization",
                    [made, gamma, beta, *statistics], [], module_path=conv.module_path)
        out = self.new_value(f"{made.name}/batchnorm", made.dtype, made.shape, Role.ACTIVATION,
                             node)
        node.outputs.append(out)
        self.mapped[source_output] = out
        self.add_forward(node)
        self.unfolded_batchnorms += 1

    def add_forward(self, node: Node) -> None:
        self.nodes.append(node)
        self.forward_nodes.append(node)

    def autocast_input(self, node: Node, source: Value | None,
                       precision: Precision) -> Value | None:
        if source is None:
            return None
        value = self.mapped[source]
        target = cast_target(value, precision, self.half) if self.half else None
        if target is None:
            return value
        if value.role is Role.PARAMETER and (value, target) in self.weight_casts:
            return self.weight_casts[(value, target)]  # autocast's cache of weight casts
        cast = Node(f"{node.name}/autocast/{value.name}", "Cast", [value], [],
                    {"to": target.label}, module_path=node.module_path)
        out = self.new_value(f"{value.name}/{target.label}", target, value.shape,
                             Role.ACTIVATION, cast)
        cast.outputs.append(out)
        self.add_forward(cast)
        if value.role is Role.PARAMETER:
            self.weight_casts[(value, target)] = out
        return out

    def as_view(self, node: Node) -> None:
        """Outputs of ops PyTorch runs as views share their input's storage."""
        rule = find_backward_rule(node.op_type, node.domain)
        base = node.input(0)
        if base is not None and _same_type_cast(node, base):
            rule = BackwardRule((), rule.flops, view=True, grad_view=True) if rule else None
        if rule is None or not rule.view or base is None:
            return
        if node.op_type in _RESHAPING_VIEWS and base.storage in self.noncontiguous:
            return  # reshape of a transposed tensor copies
        permuted = node.op_type == "Transpose" and _permutes(node)
        for out in node.outputs:
            out.alias_of = base
            if permuted or base.storage in self.noncontiguous or base in self.noncontiguous:
                self.noncontiguous.add(out)

    # ----- saved tensors --------------------------------------------------------------------
    def save_for_backward(self) -> None:
        requires_grad = {v for v in self.values.values()
                         if v.role is Role.PARAMETER and v.dtype.is_float}
        for node in self.forward_nodes:
            rule = find_backward_rule(node.op_type, node.domain)
            needs = _inputs_needing_grad(node, rule, requires_grad)
            if not needs:
                continue
            self.needs[node] = needs
            requires_grad.update(v for v in node.outputs if v.dtype.is_float)
            self.saved[node] = self.saved_tensors(node, rule, needs)
        self.in_segment = segment_index(self.segments)
        for node, saved in self.saved.items():
            segment = self.in_segment.get(node)
            for value in saved:  # inside a checkpointed segment: recomputed in backward
                if segment is None or not segment.makes(value):
                    self.mark_saved(value)
        for segment in self.segments:  # the checkpoint's frame holds the segment's inputs
            for value in segment.entering():
                self.mark_saved(value)

    def saved_tensors(self, node: Node, rule: BackwardRule | None,
                      needs: frozenset[int]) -> list[Value]:
        if rule is None:  # unknown backward: assume it keeps every input it reads
            self.no_rule[_qualified(node)] += 1
            return [v for v in dict.fromkeys(node.present_inputs)
                    if v.storage.role not in RESIDENT_ROLES]
        saved: list[Value] = []
        for spec in rule.saves:
            if spec.needed_for is not None and not needs & set(spec.needed_for):
                continue
            if spec.kind == "extra":
                value: Value | None = self.extra_output(node, spec.label, spec.dtype, spec.shape)
            else:
                value = node.input(spec.index) if spec.kind == "input" else (
                    node.outputs[spec.index] if spec.index < len(node.outputs) else None)
            if value is not None and value not in saved:
                saved.append(value)
        return saved

    def extra_output(self, node: Node, label: str, dtype: DType | None, shape: object) -> Value:
        """A tensor the training-mode op makes besides its outputs (mean, rstd, a mask)."""
        made_shape = shape(node) if callable(shape) else ()
        out = self.new_value(f"{node.name}/{label}", dtype or node.outputs[0].dtype, made_shape,
                             Role.ACTIVATION, node)  # SAVED_ACTIVATION once marked saved
        node.outputs.append(out)
        return out

    @staticmethod
    def mark_saved(value: Value) -> Value:
        for tensor in (value, value.storage):
            if tensor.role is Role.ACTIVATION:
                tensor.role = Role.SAVED_ACTIVATION
        return value

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
        for value in node.outputs:
            value.producer = node
        self.nodes.append(node)
        self.backward_nodes.append(node)

    def differentiate(self, node: Node) -> None:
        grad_outputs = [self.grads.pop(v) for v in node.outputs if v in self.grads]
        if not grad_outputs:
            return
        rule = find_backward_rule(node.op_type, node.domain)
        needs = self.needs[node]
        backward = BackwardNode(
            f"{node.name}/backward", node.op_type, [*grad_outputs, *self.saved_for(node)], [],
            dict(node.attributes), _backward_domain(node.domain), node.module_path,
            forward=node, needs_grad=needs)
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
            copy = Node(f"{node.name}{RECOMPUTE_SUFFIX}", node.op_type, inputs, [],
                        dict(node.attributes), node.domain, node.module_path,
                        node.subgraph_node_count)
            for value in node.outputs:
                alias = value.alias_of
                made = self.new_value(
                    f"{value.name}{RECOMPUTE_SUFFIX}", value.dtype, value.shape, Role.ACTIVATION,
                    alias_of=None if alias is None else segment.recomputed.get(alias, alias))
                segment.recomputed[value] = made
                copy.outputs.append(made)
            self.add_backward(copy)

    def hold_segment_inputs(self) -> None:
        """The checkpoint's frame holds a segment's inputs until its last backward node."""
        step = {node: index for index, node in enumerate(self.nodes)}
        for segment in self.segments:
            last = [b for b in self.backward_nodes
                    if isinstance(b, BackwardNode) and b.forward in segment.members]
            if not last:
                continue
            for value in segment.entering():
                held = value.held_until
                if held is None or step.get(held, -1) < step[last[-1]]:
                    value.held_until = last[-1]

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
        """The .grad tensors of the earlier micro-batches, alive from the step's start."""
        if not self.grad_buffers:
            return
        node = Node("optimizer/accumulated_grads", "GradBuffers", [],
                    list(self.grad_buffers.values()), domain=TRAINING_DOMAIN,
                    module_path="optimizer")
        for value in node.outputs:
            value.producer = node
        self.nodes.insert(0, node)

    # ----- optimizer ------------------------------------------------------------------------
    def add_optimizer(self) -> None:
        params = [v for v in self.values.values()
                  if v.role is Role.PARAMETER and v in self.grads]
        grads = [self.grads[p] for p in params]
        for grad in grads:
            if grad.storage.role is Role.ACTIVATION_GRADIENT:
                grad.storage.role = Role.GRADIENT  # a view's base holds a parameter gradient
        state = state_values(params, self.config.optimizer)
        for slot_values in state.values():
            for value in slot_values:
                self.values[value.name] = value
        steps = optimizer_nodes(params, grads, self.config.optimizer, state)
        for node in steps:
            for value in node.outputs:
                self.values[value.name] = value
            self.nodes.append(node)
        for grad in grads:
            grad.held_until = steps[-1]  # the step's list of gradients lives to its end

    # ----- result ---------------------------------------------------------------------------
    def finish(self, source: Graph, model_outputs: list[Value], loss: Value) -> TrainingGraph:
        end_of_backward = self.backward_nodes[-1]
        for value in model_outputs:
            value.held_until = end_of_backward
        with_backward = {b.forward for b in self.backward_nodes if isinstance(b, BackwardNode)}
        for node, saved in self.saved.items():
            segment = self.in_segment.get(node)
            if node not in with_backward:
                for value in saved:  # freed with the autograd graph
                    if segment is None or not segment.makes(value):
                        value.held_until = end_of_backward
        self.hold_segment_inputs()
        for node in self.nodes:
            for value in dict.fromkeys(node.present_inputs):
                value.consumers.append(node)
        loss.role = Role.OUTPUT
        graph = Graph(f"{source.name}", self.nodes, self.values, self.inputs, [loss],
                      source.opset, source.source_format)
        return TrainingGraph(graph, dict(sorted(self.no_rule.items())), loss.name,
                             self.unfolded_batchnorms)


def _inputs_needing_grad(node: Node, rule: BackwardRule | None,
                         requires_grad: set[Value]) -> frozenset[int]:
    if not any(v.dtype.is_float for v in node.outputs):
        return frozenset()  # Shape, comparisons: autograd records nothing
    indices = range(len(node.inputs))
    if rule is not None and rule.differentiable is not None:
        indices = rule.differentiable
    return frozenset(i for i in indices if (v := node.input(i)) is not None
                     and v in requires_grad and v.dtype.is_float)


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
    if rule.grad_view or (base is not None and _same_type_cast(node, base)):
        return True
    # a parameter's gradient is its own tensor (AccumulateGrad clones a shared gradient)
    target, incoming = node.inputs[index], grad_outputs[0]
    return (rule.passes_gradient_to(index) and target is not None
            and target.role is not Role.PARAMETER and target.dtype is incoming.dtype
            and target.shape is not None and target.shape == incoming.shape)


def _same_type_cast(node: Node, base: Value) -> bool:
    """`x.to(x.dtype)` (HF's `softmax(..., dtype=float32).to(query.dtype)` in fp32) returns x
    itself in PyTorch: no copy, and autograd records nothing."""
    return (node.op_type in ("Cast", "CastLike") and len(node.outputs) == 1
            and node.outputs[0].dtype is base.dtype)


def _permutes(node: Node) -> bool:
    perm = node.attr_ints("perm")
    return not perm or list(perm) != sorted(perm)


def _qualified(node: Node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _backward_domain(domain: str) -> str:
    return BACKWARD_DOMAIN if domain in ("", "ai.onnx") else f"{BACKWARD_DOMAIN}/{domain}"


def backward_cost(node: Node) -> OpCost:
    """A backward node's arithmetic, from its forward node's backward rule."""
    if not isinstance(node, BackwardNode) or node.forward is None:
        return OpCost.zero()
    rule = find_backward_rule(node.forward.op_type, node.forward.domain)
    return rule.flops(node.forward, node.needs_grad) if rule else OpCost.zero()


def _register_backward_costs() -> None:
    for domain, op_type in registered_backward_ops():
        register(op_type, domain=_backward_domain(domain))(backward_cost)


_register_backward_costs()
