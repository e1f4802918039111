"""Per-node costs: MACs and FLOPs from the op's rule, bytes read and written from its tensors.

An op with no rule is not zero: it is listed in `unsupported_ops` and its node is marked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from graphmem.core.ir import Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt, sum_sizes
from graphmem.ops import OpCost, ShapeUnknownError, find_rule
from graphmem.ops.control_flow import BODY_SCRATCH_SUFFIX, ControlFlowNode
from graphmem.passes.dims import DimBinding

if TYPE_CHECKING:  # If/Loop/Scan bodies' costs: imported where a graph has them
    from graphmem.passes.control_flow import BodyTotals, BranchCost


class CostStatus(StrEnum):
    OK = "ok"
    UNSUPPORTED = "unsupported"  # no rule for this op: FLOPs unknown
    SHAPE_UNKNOWN = "shape_unknown"  # a rule exists but a shape it needs is unknown
    # If/Loop/Scan/cond whose bodies are not (all) costed: unreadable, or with ops of no rule
    SUBGRAPH = "subgraph"


@dataclass(frozen=True)
class NodeCost:
    name: str
    op_type: str
    domain: str
    module_path: str
    output_shapes: tuple[str, ...]
    macs: SymInt
    flops: SymInt
    bytes_read: SymInt
    bytes_written: SymInt
    param_count: int
    status: CostStatus
    note: str = ""
    branches: tuple[BranchCost, ...] = ()  # If/Loop/Scan bodies (passes/control_flow.py)


@dataclass(frozen=True)
class CostReport:
    nodes: tuple[NodeCost, ...]
    total_macs: SymInt
    total_flops: SymInt
    total_bytes_read: SymInt
    total_bytes_written: SymInt
    unsupported_ops: dict[str, int]  # op type (domain-qualified outside ai.onnx) -> node count
    shape_unknown_nodes: tuple[str, ...]
    subgraph_nodes: tuple[str, ...]
    # node -> the number of its signature (`_signature`: nodes of one number read the same
    # op, attributes, shapes and dtypes, and share their cost's numbers), -1 where costed on
    # its own: the roofline times each number once (passes/roofline.py); () where unknown
    groups: tuple[int, ...] = field(default=(), repr=False, compare=False)


def compute_costs(graph: Graph, binding: DimBinding | None = None) -> CostReport:
    return _graph_costs(graph, binding.bound if binding else {})


def _graph_costs(graph: Graph, dims: Mapping[str, int]) -> CostReport:
    shared = _Shared()
    groups: list[int] = []
    nodes = tuple(_shared_node_cost(node, dims, shared, groups) for node in graph.nodes)
    unsupported = Counter(qualified_op(n) for n in nodes if n.status is CostStatus.UNSUPPORTED)
    return CostReport(
        nodes=nodes,
        total_macs=sum_sizes(n.macs for n in nodes),
        total_flops=sum_sizes(n.flops for n in nodes),
        total_bytes_read=sum_sizes(n.bytes_read for n in nodes),
        total_bytes_written=sum_sizes(n.bytes_written for n in nodes),
        unsupported_ops=dict(sorted(unsupported.items())),
        shape_unknown_nodes=_names_with(nodes, CostStatus.SHAPE_UNKNOWN),
        subgraph_nodes=_names_with(nodes, CostStatus.SUBGRAPH),
        groups=tuple(groups),
    )


def _names_with(nodes: tuple[NodeCost, ...], status: CostStatus) -> tuple[str, ...]:
    return tuple(n.name for n in nodes if n.status is status)


def qualified_op(cost: NodeCost) -> str:
    """`com.microsoft.FusedMatMul`; a standard ONNX op or an aten name as it is."""
    if cost.domain in ("", "ai.onnx") or cost.op_type.startswith(f"{cost.domain}."):
        return cost.op_type
    return f"{cost.domain}.{cost.op_type}"


class _Shared:
    """The costs made so far by signature, and a number for each shape: a decoder's values
    hold a few dozen distinct shapes in thousands of tuples, and a signature of numbers
    hashes without calling each dim's `__hash__` (the numbers stand for equal shapes only
    within one pass, whose values keep every tuple alive)."""

    def __init__(self) -> None:
        # a signature -> its cost and its number (`CostReport.groups`)
        self.costs: dict[Hashable, tuple[NodeCost, int]] = {}
        self.shape_numbers: dict[Hashable, int] = {}  # a shape -> its number
        self.tuple_numbers: dict[int, int] = {}  # id of a shape tuple -> its shape's number

    def shape(self, shape: tuple[SymInt | None, ...] | None) -> int:
        number = self.tuple_numbers.get(id(shape))
        if number is None:
            numbers = self.shape_numbers
            number = self.tuple_numbers[id(shape)] = numbers.setdefault(shape, len(numbers))
        return number


def _shared_node_cost(node: Node, dims: Mapping[str, int], shared: _Shared,
                      groups: list[int]) -> NodeCost:
    """`_node_cost`, computed once per signature (a decoder repeats a few hundred node kinds
    over its layers): nodes of one signature differ in name and module path alone. Appends
    the node's signature number to `groups` (-1: costed on its own)."""
    key = _signature(node, shared)
    if key is None:
        groups.append(-1)
        return _node_cost(node, dims)
    try:
        found = shared.costs.get(key)
    except TypeError:  # an attribute of an unhashable kind: costed on its own
        groups.append(-1)
        return _node_cost(node, dims)
    if found is None:
        cost = _node_cost(node, dims)
        if cost.status is not CostStatus.OK:
            groups.append(-1)
            return cost  # an unknown shape's note names its node
        found = shared.costs[key] = (cost, len(shared.costs))
    groups.append(found[1])
    return _renamed(found[0], node)


def _renamed(cost: NodeCost, node: Node) -> NodeCost:
    """`cost` with `node`'s name and module path, every other field the same objects: its
    fields copied as one dict (the frozen dataclass's own __init__ sets the 13 fields one
    `object.__setattr__` at a time, a third of the pass on a decoder)."""
    renamed: NodeCost = object.__new__(NodeCost)
    fields = renamed.__dict__
    fields.update(cost.__dict__)
    fields["name"] = node.name  # stored over the copy's: no keywords dict per node
    fields["module_path"] = node.module_path
    return renamed


def _signature(node: Node, shared: _Shared) -> Hashable | None:
    """What a standard op's cost reads: its op, attributes, and each tensor's shape, dtype,
    role, whether it is a view and which inputs are the same tensor (bytes count it once).
    None where the cost may read more: other domains (a training op follows the graph), a
    backward node (its forward), imported costs, bodies. Dtypes and roles by identity (enum
    members are singletons), shapes by number (`_Shared.shape`).

    One flat tuple: the op, the attributes, the number of inputs, then per input None (no
    input) or (shape, dtype, role, not a view, the first input that is the same tensor),
    then per output (shape, dtype, not a view): read back field by field, so two nodes
    have the same tuple exactly when they read the same (tests/test_cost_signature.py)."""
    if (node.domain not in _STANDARD_DOMAINS or node.origin is not None or node.needs_grad
            or node.subgraph_node_count or node.imported_cost is not None
            or isinstance(node, ControlFlowNode)):
        return None
    numbers = shared.tuple_numbers
    inputs = node.inputs
    key: list[Hashable] = [node.op_type, tuple(node.attributes.items()), len(inputs)]
    for value in inputs:
        if value is None:
            key.append(None)
            continue
        number = numbers.get(id(value.shape))
        if number is None:
            number = shared.shape(value.shape)
        # `index`: the first input that is this tensor (values compare by identity)
        key += (number, id(value.dtype), id(value.role), value.alias_of is None,
                inputs.index(value))
    for value in node.outputs:
        number = numbers.get(id(value.shape))
        if number is None:
            number = shared.shape(value.shape)
        key += (number, id(value.dtype), value.alias_of is None)
    return tuple(key)


_STANDARD_DOMAINS = ("", "ai.onnx")


def _node_cost(node: Node, dims: Mapping[str, int]) -> NodeCost:
    if isinstance(node, ControlFlowNode) and node.bodies:
        return _control_flow_node_cost(node, dims)
    status, note, op_cost = _arithmetic(node)
    inputs = _distinct(node.present_inputs)
    return NodeCost(
        name=node.name,
        op_type=node.op_type,
        domain=node.domain,
        module_path=node.module_path,
        output_shapes=tuple(v.shape_text(dims) for v in node.outputs),
        macs=op_cost.macs.bind(dims),
        flops=op_cost.flops.bind(dims),
        bytes_read=_total_bytes(inputs, dims),
        bytes_written=_total_bytes([v for v in node.outputs if v.alias_of is None], dims),
        param_count=_param_count(inputs),
        status=status,
        note=note,
    )


def _control_flow_node_cost(node: ControlFlowNode, dims: Mapping[str, int]) -> NodeCost:
    """If/Loop/Scan priced from their bodies; a body with uncosted nodes keeps the node flagged
    as control flow (its FLOPs then count what is known)."""
    from graphmem.passes.control_flow import control_flow_cost

    cost = control_flow_cost(node, dims, _body_totals)
    return NodeCost(
        name=node.name,
        op_type=node.op_type,
        domain=node.domain,
        module_path=node.module_path,
        output_shapes=tuple(v.shape_text(dims) for v in node.outputs
                            if not v.name.endswith(BODY_SCRATCH_SUFFIX)),
        macs=cost.macs,
        flops=cost.flops,
        bytes_read=cost.bytes_read,
        bytes_written=cost.bytes_written,
        param_count=_param_count(_distinct(node.present_inputs)),
        status=CostStatus.OK if cost.complete else CostStatus.SUBGRAPH,
        note=cost.note,
        branches=cost.branches,
    )


def _body_totals(body: Graph, dims: Mapping[str, int]) -> BodyTotals:
    from graphmem.passes.control_flow import BodyTotals

    report = _graph_costs(body, dims)
    uncosted = tuple(qualified_op(n) for n in report.nodes if n.status is not CostStatus.OK)
    return BodyTotals(report.total_macs, report.total_flops, report.total_bytes_read,
                      report.total_bytes_written, uncosted)


def _arithmetic(node: Node) -> tuple[CostStatus, str, OpCost]:
    if node.subgraph_node_count:
        return _with_body_not_costed(node)
    if node.imported_cost is not None:
        imported = node.imported_cost
        return CostStatus.OK, "", OpCost(SymInt.const(imported.macs),
                                         SymInt.const(imported.flops))
    rule = find_rule(node.op_type, node.domain)
    if rule is None:
        return CostStatus.UNSUPPORTED, "no cost rule for this op", OpCost.zero()
    try:
        cost = rule(node)
    except ShapeUnknownError as error:
        return CostStatus.SHAPE_UNKNOWN, str(error), OpCost.zero()
    return CostStatus.OK, cost.note, cost


def _with_body_not_costed(node: Node) -> tuple[CostStatus, str, OpCost]:
    """A node whose bodies are not priced stays flagged; an op with a rule of its own besides
    its bodies (FlexAttention's score_mod) counts what the rule knows."""
    note = f"control flow with {node.subgraph_node_count} nodes in its bodies, not costed"
    rule = find_rule(node.op_type, node.domain)
    try:
        cost = rule(node) if rule is not None else OpCost.zero()
    except ShapeUnknownError:
        cost = OpCost.zero()
    if rule is not None and (cost.flops != 0 or cost.macs != 0):
        note = (f"{node.op_type} counted without its {node.subgraph_node_count} body nodes"
                " (not costed)")
    return CostStatus.SUBGRAPH, note, cost


def _param_count(inputs: list[Value]) -> int:
    return sum(int(v.numel or 0) for v in inputs if v.role is Role.PARAMETER)


def _distinct(values: list[Value]) -> list[Value]:
    return list(dict.fromkeys(values))


def _total_bytes(values: list[Value], dims: Mapping[str, int]) -> SymInt:
    # one sum of the known sizes (a polynomial per addition otherwise; 25,000 calls at 80 layers),
    # each bound first (binding is cached per size, and bound sizes add as numbers)
    sizes = [size.bind(dims) for value in values if (size := value.nbytes) is not None]
    return sizes[0] if len(sizes) == 1 else sum_sizes(sizes)  # most nodes: one output
