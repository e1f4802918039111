"""Convert a traced aten-level FX graph into graphmem's IR.

Memory semantics come from the op schemas: an output whose schema alias annotation matches an
argument (views, in-place ops) is an alias of that argument and allocates nothing. FLOPs come
from PyTorch's own FlopCounterMode formulas where it has one, else from graphmem's per-element
conventions (see torch_costs); an op neither knows is reported as unsupported.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from graphmem.core.ir import DType, Graph, Node, Phase, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.frontends.torch.control_flow import attach_branches, is_branch_module, is_cond
from graphmem.frontends.torch.costs import imported_cost
from graphmem.frontends.torch.kernel_args import kernel_attributes
from graphmem.frontends.torch.loss_storage import unreduced_storage
from graphmem.frontends.torch.onednn_rnn import rnn_attributes, sized_outputs
from graphmem.frontends.torch.trace import MODULE_KEY, PHASE_KEY, TracedStep
from graphmem.ops.control_flow import ControlFlowNode

_DTYPES = {
    torch.float32: DType.FLOAT32, torch.float16: DType.FLOAT16, torch.bfloat16: DType.BFLOAT16,
    torch.float64: DType.FLOAT64, torch.int64: DType.INT64, torch.int32: DType.INT32,
    torch.int16: DType.INT16, torch.int8: DType.INT8, torch.uint8: DType.UINT8,
    torch.bool: DType.BOOL, torch.complex64: DType.COMPLEX64, torch.complex128: DType.COMPLEX128,
    # the flash attention kernel's RNG state is uint64; float8 weights of quantized models
    torch.uint64: DType.UINT64, torch.uint32: DType.UINT32, torch.uint16: DType.UINT16,
    torch.float8_e4m3fn: DType.FLOAT8, torch.float8_e5m2: DType.FLOAT8,
}


def graph_from_trace(traced: TracedStep, name: str) -> Graph:
    converter = _Converter(traced, Graph(name, [], {}, [], [], source_format="torch.fx"))
    for fx_node in traced.graph_module.graph.nodes:
        converter.visit(fx_node)
    graph = converter.graph
    graph.inputs = [v for v in converter.placeholders if v.role is Role.INPUT]
    graph.outputs = converter.outputs
    _assign_training_roles(graph)
    _attribute_backward_nodes(graph)
    _assign_eager_lifetimes(converter, traced.released_after)
    return graph


def _branch_graph(module: torch.fx.GraphModule, name: str) -> Graph:
    """A torch.cond branch as a graph: its placeholders are the cond's operands."""
    operands = [n.name for n in module.graph.nodes if n.op == "placeholder"]
    return graph_from_trace(TracedStep(module, [(Role.INPUT, n) for n in operands],
                                       "inference"), name)


def _attribute_backward_nodes(graph: Graph) -> None:
    """Backward and optimizer nodes run outside module calls: attribute each to the module of
    a parameter it reads (`stem.weight` -> `stem`), else of a forward tensor it reads (what
    autograd saved), else of any tensor it reads. An optimizer node that reads tensors of
    several modules (torch.optim's foreach update of every parameter) belongs to none."""
    for node in graph.nodes:
        if node.module_path or node.phase in (Phase.FORWARD, Phase.NONE):
            continue
        owners = [_owner(value) for value in node.present_inputs]
        ranked = sorted((rank, path) for rank, path in owners if path)
        if node.phase is Phase.OPTIMIZER and len({path for _, path in ranked}) > 1:
            continue
        if ranked:
            node.module_path = ranked[0][1]


def _owner(value: Value) -> tuple[int, str]:
    """(preference, module path) of a tensor a backward node reads: the module whose forward
    saved it. Parameters first, by name, unless forward reads them in several modules (a tied
    weight: wte's embedding and lm_head's matmul); then forward tensors: saved by the node
    that reads them (a matmul its input: lm_head saves ln_f's output) or that made them (relu,
    softmax their output), so the module of their forward readers when that is one module,
    else of their maker (a view's own maker: lm_head's t(weight)); then the rest."""
    if value.role is Role.PARAMETER:
        tied = len(_forward_readers(value)) > 1
        return (3, "") if tied else (0, value.name.rpartition(".")[0])
    producer = value.producer
    if producer is None:
        return 3, ""
    if producer.phase is not Phase.FORWARD:
        return 2, producer.module_path
    readers = _forward_readers(value)
    return 1, (next(iter(readers)) if len(readers) == 1 else producer.module_path)


def _forward_readers(value: Value) -> set[str]:
    """The module paths of the forward nodes that read `value`."""
    return {node.module_path for node in value.consumers
            if node.phase is Phase.FORWARD and node.module_path}


def _assign_eager_lifetimes(converter: _Converter, released_after: dict[str, str]) -> None:
    """`released_after` names the fx node last traced when eager dropped a tensor; that is
    often a `getitem` unpacking a multi-output op (native_layer_norm's output, mean, rstd),
    which is no IR node: the tensor is held until the IR node at or before it."""
    for fx_name, value in converter.fx_values.items():
        holder = converter.ir_node_at.get(released_after.get(fx_name, ""))
        if holder is not None:
            value.held_until = holder


class _Converter:
    def __init__(self, traced: TracedStep, graph: Graph) -> None:
        self.traced = traced
        self.graph = graph
        self.env: dict[torch.fx.Node, Any] = {}  # fx node -> Value, or a list for tuples
        self.values: dict[str, Value] = graph.values
        self.nodes: list[Node] = graph.nodes
        self.placeholders: list[Value] = []
        self.outputs: list[Value] = []
        self.fx_values: dict[str, Value] = {}  # fx node name -> the value it stands for
        # fx node name -> the last IR node made at or before it (None before the first)
        self.ir_node_at: dict[str, Node | None] = {}

    def visit(self, fx_node: torch.fx.Node) -> None:
        if fx_node.op == "placeholder":
            self._placeholder(fx_node)
        elif fx_node.op == "get_attr" and is_branch_module(self.traced.graph_module, fx_node):
            self.env[fx_node] = None  # a torch.cond branch: converted with its cond node
        elif fx_node.op == "get_attr":
            meta = fx_node.meta.get("val", getattr(self.traced.graph_module, str(fx_node.target),
                                                   None))
            self.env[fx_node] = self._value(fx_node.name, meta, Role.CONSTANT)
        elif fx_node.op == "call_function" and fx_node.target is operator.getitem:
            parent, index = fx_node.args
            self.env[fx_node] = self.env[parent][index]  # type: ignore[index]
            if isinstance(self.env[fx_node], Value):
                self.fx_values[fx_node.name] = self.env[fx_node]
        elif fx_node.op == "call_function":
            self._call(fx_node)
        elif fx_node.op == "output":
            self.outputs = [v for v in _leaves(fx_node.args, self.env) if v is not None]
            for value in self.outputs:
                if value.role is Role.ACTIVATION:
                    value.role = Role.OUTPUT
        self.ir_node_at[fx_node.name] = self.nodes[-1] if self.nodes else None

    def _placeholder(self, fx_node: torch.fx.Node) -> None:
        role, label = self.traced.leaf_roles[len(self.placeholders)]
        value = self._value(label, fx_node.meta.get("val"), role)
        self.placeholders.append(value)
        self.env[fx_node] = value

    def _value(self, name: str, meta: Any, role: Role) -> Value:
        unique = name if name not in self.values else f"{name}#{len(self.values)}"
        if isinstance(meta, torch.Tensor):
            shape = tuple(SymInt.const(int(d)) for d in meta.shape)
            value = Value(unique, _DTYPES.get(meta.dtype, DType.UNKNOWN), shape, role)
        else:
            value = Value(unique, DType.UNKNOWN, (), role)
        self.values[unique] = value
        return value

    def _call(self, fx_node: torch.fx.Node) -> None:
        target = fx_node.target
        custom = fx_node.meta.get("custom", {})
        node = (ControlFlowNode if is_cond(fx_node) else Node)(
            name=fx_node.name,
            op_type=str(target),
            inputs=[v for v in _leaves((fx_node.args, fx_node.kwargs), self.env) if v is not None],
            outputs=[],
            attributes={**kernel_attributes(fx_node), **rnn_attributes(fx_node)},
            domain="aten",
            module_path=str(custom.get(MODULE_KEY, "")),
            imported_cost=imported_cost(fx_node),
            phase=self._phase(custom.get(PHASE_KEY)),
        )
        self.env[fx_node] = self._outputs(fx_node, node)
        if isinstance(node, ControlFlowNode):
            attach_branches(node, fx_node, self.traced.graph_module, _branch_graph, self.values)
        if isinstance(self.env[fx_node], Value):
            self.fx_values[fx_node.name] = self.env[fx_node]
        self.graph.add_node(node)

    def _phase(self, label: object) -> Phase:
        """The tracer's phase label (trace.py); a node traced outside every phase (the step's
        returned `loss.detach()`) runs after the node before it, so it shares its phase."""
        if self.traced.mode != "training":
            return Phase.NONE
        if label is not None:
            return Phase(str(label))
        return self.nodes[-1].phase if self.nodes else Phase.FORWARD

    def _outputs(self, fx_node: torch.fx.Node, node: Node) -> Any:
        meta = sized_outputs(fx_node, fx_node.meta.get("val"))  # onednn_rnn.py: a workspace
        aliases = _output_aliases(fx_node)
        if isinstance(meta, list | tuple):
            made = [self._output(fx_node, node, f"{fx_node.name}.{i}", m, aliases.get(i))
                    for i, m in enumerate(meta)]
            return made
        value = self._output(fx_node, node, fx_node.name, meta, aliases.get(0))
        unreduced = unreduced_storage(fx_node)
        if value is not None and unreduced is not None:  # loss_storage.py
            value.alias_of = self._value(f"{fx_node.name}.unreduced", unreduced,
                                         Role.ACTIVATION)
            node.add_output(value.alias_of)
        return value

    def _output(self, fx_node: torch.fx.Node, node: Node, name: str, meta: Any,
                alias_arg: Any) -> Value | None:
        if not isinstance(meta, torch.Tensor):
            return None
        value = self._value(name, meta, Role.ACTIVATION)
        if alias_arg is not None:
            base = self.env.get(alias_arg) if isinstance(alias_arg, torch.fx.Node) else None
            value.alias_of = base if isinstance(base, Value) else None
        node.add_output(value)
        return value


def _leaves(tree: Any, env: dict[torch.fx.Node, Any]) -> list[Value | None]:
    values: list[Value | None] = []
    for leaf in _nodes_in(tree, []):
        mapped = env.get(leaf)
        values.extend(mapped if isinstance(mapped, list) else [mapped])
    return values


def _nodes_in(tree: Any, found: list[torch.fx.Node]) -> list[torch.fx.Node]:
    """The fx nodes of an argument tree in pytree's order (tuples and lists in order, dicts by
    their values), without pytree's generic flattening: a fifth of the conversion's time."""
    if isinstance(tree, torch.fx.Node):
        found.append(tree)
    elif isinstance(tree, list | tuple):
        for item in tree:
            _nodes_in(item, found)
    elif isinstance(tree, dict):
        for item in tree.values():
            _nodes_in(item, found)
    return found


# Ops whose schema declares a fresh tensor although the result shares its input's storage
# (autograd treats them as non-views): `_unsafe_view` reshapes a just-made temporary.
STORAGE_SHARING_OPS = frozenset({"_unsafe_view"})
# ... and whose returned list's elements are views of argument 0 though the schema declares
# fresh tensors (split without autograd's view tracking: PyTorch's own RNN cells chunk their
# gates so). Counted as made, an LSTM with projections (run by those cells on the CPU) was
# 512 B a step over eager's inference (+11.11% at 6 x 2 x 12, 16 hidden, 8 projected).
VIEW_LIST_OPS = frozenset({"unsafe_split", "unsafe_split_with_sizes", "unsafe_chunk"})


def _output_aliases(fx_node: torch.fx.Node) -> dict[int, Any]:
    """Output index -> the fx argument it aliases (views and in-place results)."""
    plan = _alias_plan(fx_node.target)
    if plan is None:
        return {}
    if plan.shares_storage:
        return {0: fx_node.args[0]}
    if plan.one_returned_list and isinstance(fx_node.meta.get("val"), list | tuple):
        # one returned list (split, unbind, chunk): every element aliases like the list does
        if plan.list_base is None:
            return {}
        base = _argument(fx_node, *plan.list_base)
        count = len(fx_node.meta["val"])
        return dict.fromkeys(range(count), base) if base is not None else {}
    return {index: _argument(fx_node, *where) for index, where in plan.returns}


@dataclass(frozen=True)
class _AliasPlan:
    """What an op's schema says its outputs alias, for `_output_aliases` to read off a node:
    (position, name) of the arguments; worked out once per op, not per node."""

    shares_storage: bool  # STORAGE_SHARING_OPS: output 0 shares argument 0's storage
    one_returned_list: bool
    list_base: tuple[int, str] | None  # the argument a returned list's elements alias
    returns: tuple[tuple[int, tuple[int, str]], ...]  # output index -> its argument


_ALIAS_PLANS: dict[Any, _AliasPlan | None] = {}


def _alias_plan(target: Any) -> _AliasPlan | None:
    if target not in _ALIAS_PLANS:
        _ALIAS_PLANS[target] = _new_alias_plan(target)
    return _ALIAS_PLANS[target]


def _new_alias_plan(target: Any) -> _AliasPlan | None:
    schema = getattr(target, "_schema", None)
    if schema is None:
        return None
    packet = getattr(target, "overloadpacket", None)
    shares = packet is not None and packet.__name__ in STORAGE_SHARING_OPS
    one_list = len(schema.returns) == 1
    list_base = _aliased_argument(schema, schema.returns[0].alias_info) if one_list else None
    if one_list and packet is not None and packet.__name__ in VIEW_LIST_OPS:
        list_base = (0, schema.arguments[0].name)
    arg_by_set: dict[frozenset[str], tuple[int, str]] = {}
    for position, argument in enumerate(schema.arguments):
        if argument.alias_info is not None and argument.alias_info.before_set:
            arg_by_set[frozenset(argument.alias_info.before_set)] = (position, argument.name)
    returns = tuple((index, arg_by_set[frozenset(returned.alias_info.before_set)])
                    for index, returned in enumerate(schema.returns)
                    if returned.alias_info is not None
                    and frozenset(returned.alias_info.before_set) in arg_by_set)
    return _AliasPlan(shares, one_list, list_base, returns)


def _aliased_argument(schema: Any, info: Any) -> tuple[int, str] | None:
    """The argument a returned list's elements alias: `Tensor(a -> *) self` in split's schema.

    The list's own annotation carries no set (its elements do, which pybind does not expose),
    so the argument annotated as flowing into the wildcard set is the base.
    """
    if info is None:
        return None
    for position, argument in enumerate(schema.arguments):
        arg_info = argument.alias_info
        if arg_info is None or arg_info.is_write:
            continue
        if "*" in arg_info.after_set or set(arg_info.before_set) & set(info.before_set):
            return position, argument.name
    return None


def _argument(fx_node: torch.fx.Node, position: int, name: str) -> Any:
    if position < len(fx_node.args):
        return fx_node.args[position]
    return fx_node.kwargs.get(name)


def _assign_training_roles(graph: Graph) -> None:
    """Label tensors by the phase that makes them and the phases that read them.

    A tensor read through a view counts as read by the view's readers.
    """
    readers: dict[Value, set[Phase]] = {}
    for value in graph.values.values():
        readers.setdefault(value.storage, set()).update(c.phase for c in value.consumers)
    for node in graph.nodes:
        for value in node.outputs:
            if value.alias_of is None and value.role is Role.ACTIVATION:
                value.role = _role_for(node.phase, readers.get(value, set()))


def _role_for(phase: Phase, readers: set[Phase]) -> Role:
    if phase in (Phase.FORWARD, Phase.NONE):
        return Role.SAVED_ACTIVATION if Phase.BACKWARD in readers else Role.ACTIVATION
    if phase is Phase.BACKWARD:
        return Role.GRADIENT if Phase.OPTIMIZER in readers else Role.ACTIVATION_GRADIENT
    return Role.TEMPORARY
