"""Where activation checkpointing can cut a traced training step: candidate modules.

A candidate is a module a user can wrap in `torch.utils.checkpoint.checkpoint`: its forward
nodes run as one contiguous stretch of the forward pass (called once per step), and it makes
tensors that backward reads (SAVED_ACTIVATION). Checkpointing it keeps only its inputs and
recomputes the rest in backward, so, to a first order, the bytes it saves are the saved
activations it makes (less what leaves it: its outputs stay saved where a later op reads them)
and the FLOPs it costs are its forward FLOPs. These first-order figures only guide the search
(graphmem/suggest/search.py); every reported saving is re-analysed.

Single-tensor cuts: a forward tensor every path from the inputs to the loss passes through
(a dominator of the loss in the forward graph, found with networkx). A module whose only
activation input is such a tensor is a clean segment boundary: Chen et al. 2016's sqrt(n)
segmentation cuts a chain exactly there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from graphmem.core.ir import RESIDENT_ROLES, Graph, Node, Phase, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.ops import traits_of
from graphmem.passes.costs import CostReport

_GRADIENT_ROLES = frozenset({Role.ACTIVATION_GRADIENT, Role.GRADIENT})


@dataclass(frozen=True)
class SegmentCandidate:
    path: str  # module path, e.g. "blocks.3"
    depth: int  # number of dotted parts
    first_step: int  # its first and last forward node, in model order
    last_step: int
    saved_bytes: int  # saved activations it makes that do not leave it
    forward_flops: int  # what recomputing it costs
    single_tensor_input: bool  # its one activation input is a single-tensor cut
    updates_buffers: bool = False  # writes a buffer in place (BatchNorm's running statistics)


def forward_nodes(graph: Graph) -> list[Node]:
    """The forward pass of a training step, in model order (`Node.phase`; the front end or
    the training expansion set it); every node of an inference graph."""
    if all(node.phase is Phase.NONE for node in graph.nodes):
        return list(graph.nodes)
    return [node for node in graph.nodes if node.phase is Phase.FORWARD]


def find_candidates(graph: Graph, costs: CostReport, sizes: Mapping[str, SymInt | None],
                    max_depth: int = 3) -> list[SegmentCandidate]:
    """Checkpointable modules at depths 1..max_depth, in forward order."""
    forward = forward_nodes(graph)
    flops_by_node = {cost.name: cost.flops for cost in costs.nodes}
    cuts = single_tensor_cuts(graph, forward)
    spans: dict[str, list[int]] = {}
    for step, node in enumerate(forward):
        parts = node.module_path.split(".") if node.module_path else []
        for depth in range(1, min(len(parts), max_depth) + 1):
            spans.setdefault(".".join(parts[:depth]), []).append(step)
    candidates = []
    for path, steps in spans.items():
        if steps[-1] - steps[0] + 1 != len(steps):
            continue  # interleaved with other modules' nodes: called more than once
        nodes = forward[steps[0]: steps[-1] + 1]
        saved = saved_inside(nodes, sizes)
        if saved <= 0:
            continue
        candidates.append(SegmentCandidate(
            path=path, depth=path.count(".") + 1, first_step=steps[0], last_step=steps[-1],
            saved_bytes=saved,
            forward_flops=sum(_int(flops_by_node.get(n.name, SymInt())) for n in nodes),
            single_tensor_input=_single_cut_input(nodes, cuts),
            updates_buffers=any(_writes_buffer(node) for node in nodes),
        ))
    return candidates


def saved_inside(nodes: list[Node], sizes: Mapping[str, SymInt | None]) -> int:
    inside = set(nodes)
    total = 0
    for node in nodes:
        for value in node.outputs:
            if value.alias_of is not None or value.role is not Role.SAVED_ACTIVATION:
                continue
            if all(reader in inside or _is_gradient_side(reader) for reader in value.consumers):
                total += _int(sizes.get(value.name) or SymInt())
    return total


def _writes_buffer(node: Node) -> bool:
    """An in-place op (aten `add_`) on a buffer."""
    return traits_of(node).is_inplace and any(v.storage.role is Role.BUFFER
                                              for v in node.present_inputs)


def _is_gradient_side(node: Node) -> bool:
    """A node of backward: it reads or makes a gradient-role tensor."""
    return any(v.storage.role in _GRADIENT_ROLES for v in (*node.outputs, *node.present_inputs))


def _int(value: SymInt) -> int:
    return int(value) if value.is_constant else 0


def _activation_inputs(nodes: list[Node]) -> set[Value]:
    inside = set(nodes)
    return {
        value.storage for node in nodes for value in node.present_inputs
        if value.storage.role not in RESIDENT_ROLES - {Role.INPUT}
        and value.storage.producer not in inside
    }


def _single_cut_input(nodes: list[Node], cuts: set[Value]) -> bool:
    entering = _activation_inputs(nodes)
    return len(entering) == 1 and next(iter(entering)) in cuts


def single_tensor_cuts(graph: Graph, forward: list[Node], float_only: bool = False
                       ) -> set[Value]:
    """Forward tensors every input-to-loss path passes through: dominators of the loss.

    `float_only` leaves integer tensors out of the paths (an ONNX export's Shape -> Gather ->
    Reshape chains read the graph input and would bypass every cut; they carry no gradient).
    """
    import networkx as nx  # 0.1 s of start-up: loaded when a search needs it

    dag: nx.DiGraph = nx.DiGraph()
    source = "<inputs>"
    dag.add_node(source)
    for node in forward:
        for value in node.present_inputs:
            storage = value.storage
            if float_only and not storage.dtype.is_float and storage.role is not Role.INPUT:
                continue
            if storage.role is Role.INPUT:
                dag.add_edge(source, storage)
            if storage.role not in RESIDENT_ROLES or storage.role is Role.INPUT:
                dag.add_edge(storage, node)
        for value in node.outputs:
            dag.add_edge(node, value.storage)
    if not forward or forward[-1] not in dag:
        return set()
    sink = forward[-1]
    dominators = nx.immediate_dominators(dag, source)
    cuts: set[Value] = set()
    current = sink
    while current in dominators and dominators[current] != current:
        current = dominators[current]
        if isinstance(current, Value):
            cuts.add(current)
    return cuts
