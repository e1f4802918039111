"""The forward half of the training expansion (graphmem/training/expand.py): the step's graph
with the residents, the model's nodes copied under autocast (views sharing their base's
storage, as eager PyTorch runs them), and what autograd saves for backward.

Every node joins the step through `Graph.add_node` (linked at once) with its phase set.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from graphmem.core.ir import RESIDENT_ROLES, DType, Graph, Node, Phase, Role, Shape, Value
from graphmem.ops.registry import BackwardRule, find_backward_rule
from graphmem.training.checkpoint import CheckpointSegment, segment_index
from graphmem.training.config import TrainingConfig
from graphmem.training.exports import (
    bias_dropped_folds,
    folded_batchnorm_bias,
    identity_of_resident,
    running_statistics,
)
from graphmem.training.precision import (
    HALF_DTYPES,
    Precision,
    cast_target,
    op_precision,
    output_dtype,
)

# ops whose view needs a contiguous input (else PyTorch's reshape copies)
_RESHAPING_VIEWS = frozenset({"Reshape", "Flatten"})


@dataclass
class ForwardExpansion:
    """The step being built from `source`, up to the saved tensors."""

    source: Graph
    config: TrainingConfig
    graph: Graph  # the step: its nodes and values grow as the expansion runs
    mapped: dict[Value, Value] = field(default_factory=dict)  # source value -> copy
    forward_nodes: list[Node] = field(default_factory=list)
    weight_casts: dict[tuple[Value, DType], Value] = field(default_factory=dict)
    noncontiguous: set[Value] = field(default_factory=set)
    needs: dict[Node, frozenset[int]] = field(default_factory=dict)  # inputs needing a grad
    saved: dict[Node, list[Value]] = field(default_factory=dict)
    no_rule: Counter[str] = field(default_factory=Counter)
    unfolded_batchnorms: int = 0
    bias_dropped: frozenset[Node] = frozenset()  # folds whose zero bias the exporter dropped
    restored_biases: int = 0
    segments: list[CheckpointSegment] = field(default_factory=list)
    in_segment: dict[Node, CheckpointSegment] = field(default_factory=dict)

    # ----- values ---------------------------------------------------------------------------
    def new_value(self, name: str, dtype: DType, shape: Shape | None, role: Role,
                  alias_of: Value | None = None) -> Value:
        """A value of the step, registered under a name no other value has."""
        values = self.graph.values
        unique = name if name not in values else f"{name}#{len(values)}"
        value = Value(unique, dtype, shape, role, alias_of=alias_of)
        values[unique] = value
        return value

    def copy_residents(self, graph_inputs: list[Value], constants: list[Value]) -> None:
        residents = [v for v in self.source.values.values() if v.role in RESIDENT_ROLES]
        statistics = running_statistics(self.source)
        if self.config.unfold_batchnorm:
            self.bias_dropped = bias_dropped_folds(self.source)
        for value in dict.fromkeys([*residents, *graph_inputs, *constants]):
            role = Role.BUFFER if value in statistics else value.role
            self.mapped[value] = self.new_value(value.name, value.dtype, value.shape, role)
        self.graph.inputs = [self.mapped[v] for v in graph_inputs]

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
        outputs = []
        for value in node.outputs:
            dtype = value.dtype
            if self.half is not None:
                dtype = output_dtype(node, value.dtype, precision, self.half, inputs)
            out = self.new_value(value.name, dtype, value.shape, Role.ACTIVATION)
            self.mapped[value] = out
            outputs.append(out)
        copy = Node(node.name, node.op_type, inputs, outputs, dict(node.attributes), node.domain,
                    node.module_path, node.subgraph_node_count)
        self.as_view(copy)
        self.add_forward(copy)
        if bias is not None:
            self.add_batchnorm(copy, self.mapped[bias], node.outputs[0])
        elif node in self.bias_dropped:
            self.add_batchnorm(copy, self.new_beta(copy), node.outputs[0])
            self.restored_biases += 1

    def new_beta(self, conv: Node) -> Value:
        """The BatchNorm's beta [C] for a fold whose zero bias was dropped (C: the conv's
        output channels, the weight's first dim)."""
        weight = conv.inputs[1]
        assert weight is not None and weight.shape is not None  # bias_dropped_folds checked
        return self.new_value(f"{conv.name}/batchnorm.bias", weight.dtype, weight.shape[:1],
                              Role.PARAMETER)

    def add_batchnorm(self, conv: Node, beta: Value, source_output: Value) -> None:
        """Training-mode BatchNorm after `conv`: the folded bias is its beta, gamma is a new
        parameter, the running statistics new buffers (training/exports.py)."""
        made = conv.outputs[0]
        gamma = self.new_value(f"{conv.name}/batchnorm.weight", beta.dtype, beta.shape,
                               Role.PARAMETER)
        statistics = [self.new_value(f"{conv.name}/batchnorm.{label}", beta.dtype, beta.shape,
                                     Role.BUFFER) for label in ("running_mean", "running_var")]
        out = self.new_value(f"{made.name}/batchnorm", made.dtype, made.shape, Role.ACTIVATION)
        self.add_forward(Node(f"{conv.name}/batchnorm", "BatchNormalization",
                              [made, gamma, beta, *statistics], [out],
                              module_path=conv.module_path))
        self.mapped[source_output] = out
        self.unfolded_batchnorms += 1

    def add_forward(self, node: Node) -> None:
        node.phase = Phase.FORWARD
        self.graph.add_node(node)
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
        out = self.new_value(f"{value.name}/{target.label}", target, value.shape,
                             Role.ACTIVATION)
        self.add_forward(Node(f"{node.name}/autocast/{value.name}", "Cast", [value], [out],
                              {"to": target.label}, module_path=node.module_path))
        if value.role is Role.PARAMETER:
            self.weight_casts[(value, target)] = out
        return out

    def as_view(self, node: Node) -> None:
        """Outputs of ops PyTorch runs as views share their input's storage."""
        rule = find_backward_rule(node.op_type, node.domain)
        base = node.input(0)
        if base is not None and same_type_cast(node, base):
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
        requires_grad = {v for v in self.graph.values.values()
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
                             Role.ACTIVATION)  # SAVED_ACTIVATION once marked saved
        node.add_output(out)
        return out

    @staticmethod
    def mark_saved(value: Value) -> Value:
        for tensor in (value, value.storage):
            if tensor.role is Role.ACTIVATION:
                tensor.role = Role.SAVED_ACTIVATION
        return value


def _inputs_needing_grad(node: Node, rule: BackwardRule | None,
                         requires_grad: set[Value]) -> frozenset[int]:
    if not any(v.dtype.is_float for v in node.outputs):
        return frozenset()  # Shape, comparisons: autograd records nothing
    indices: Sequence[int] = range(len(node.inputs))
    if rule is not None and rule.differentiable is not None:
        indices = rule.differentiable
    return frozenset(i for i in indices if (v := node.input(i)) is not None
                     and v in requires_grad and v.dtype.is_float)


def same_type_cast(node: Node, base: Value) -> bool:
    """`x.to(x.dtype)` (HF's `softmax(..., dtype=float32).to(query.dtype)` in fp32) returns x
    itself in PyTorch: no copy, and autograd records nothing."""
    return (node.op_type in ("Cast", "CastLike") and len(node.outputs) == 1
            and node.outputs[0].dtype is base.dtype)


def _permutes(node: Node) -> bool:
    perm = node.attr_ints("perm")
    return not perm or list(perm) != sorted(perm)


def _qualified(node: Node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
