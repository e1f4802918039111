"""A graph's activation memory as plain integers: what schedulers and arena planners work on.

It states exactly the conventions of `passes/liveness.py`, so that any order's peak computed
here is the peak `analyze_liveness` reports for the same order (the tests check this):
- a buffer is the storage of a non-resident tensor (views and in-place results share their
  base's buffer and allocate nothing);
- it is allocated when the node that makes it runs and freed after the last of its users has
  run; its users are every node that reads or writes it (through any alias) and the node after
  which the framework drops it (`Value.held_until`);
- graph outputs are never freed; residents (inputs, parameters, buffers, constants) are a
  constant floor under every step.

Dependencies are the data edges, plus order edges that keep a node which makes a view or an
in-place result of a storage in its model-order place among the other nodes touching that
storage (an in-place write must not move past a read of the old contents). ONNX graphs have no
aliases, so there only data edges constrain the order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from graphmem.core.evaluate import evaluate
from graphmem.core.ir import RESIDENT_ROLES, Graph, Node, Value
from graphmem.core.symbolic import SymInt, symint_max

# Free dims are given this value when a plan needs numbers (the same probe liveness uses to
# pick one peak step among candidates that depend on free dims).
PROBE_DIM_VALUE = 64


@dataclass(frozen=True)
class MemoryModel:
    """Integer view of a graph's activations over its nodes (indices are model order)."""

    node_names: tuple[str, ...]
    resident_bytes: int
    buffer_names: tuple[str, ...]
    buffer_bytes: tuple[int, ...]
    producer: tuple[int, ...]  # buffer -> the node that allocates it
    users: tuple[tuple[int, ...], ...]  # buffer -> nodes that keep it alive (producer included)
    pinned: tuple[bool, ...]  # buffer -> a graph output: never freed
    allocates: tuple[tuple[int, ...], ...]  # node -> buffers it allocates
    uses: tuple[tuple[int, ...], ...]  # node -> buffers it keeps alive (distinct)
    predecessors: tuple[tuple[int, ...], ...]  # node -> nodes that must run before it
    dims: dict[str, int]  # the dim values the sizes were evaluated at
    # residents + the largest node's own inputs and outputs: no order peaks lower
    lower_bound_bytes: int = 0
    resident_names: tuple[str, ...] = ()

    @property
    def node_count(self) -> int:
        return len(self.node_names)

    @property
    def alloc_bytes(self) -> list[int]:
        """Bytes each node allocates."""
        sizes = self.buffer_bytes
        return [sum(sizes[b] for b in buffers) for buffers in self.allocates]

    def successors(self) -> list[list[int]]:
        result: list[list[int]] = [[] for _ in self.node_names]
        for node, preds in enumerate(self.predecessors):
            for pred in preds:
                result[pred].append(node)
        return result


def plan_dims(graph: Graph, bound: Mapping[str, int],
              free: frozenset[str] | None = None) -> dict[str, int]:
    """The bound dims, and every free dim of the graph (`free`, if known) at the probe."""
    dims = {name: PROBE_DIM_VALUE for name in (graph.free_dims() if free is None else free)}
    dims.update(bound)
    return dims


def build_memory_model(
    graph: Graph, sizes: Mapping[str, SymInt | None], dims: Mapping[str, int]
) -> MemoryModel:
    """The integer model of `graph` with every size evaluated at `dims` (all dims bound)."""
    nodes = graph.nodes
    index = {node: i for i, node in enumerate(nodes)}
    buffer_index: dict[Value, int] = {}
    names: list[str] = []
    nbytes: list[int] = []
    producer: list[int] = []
    allocates: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for value in node.outputs:
            if value.alias_of is None and value.role not in RESIDENT_ROLES:
                if value in buffer_index:
                    continue
                buffer_index[value] = len(names)
                allocates[i].append(len(names))
                names.append(value.name)
                nbytes.append(_bytes(value, sizes, dims))
                producer.append(i)
    users: list[dict[int, None]] = [{p: None} for p in producer]
    uses: list[dict[int, None]] = [{} for _ in nodes]
    for i, node in enumerate(nodes):
        for value in (*node.present_inputs, *node.outputs):
            buffer = buffer_index.get(value.storage)
            if buffer is None:
                continue
            users[buffer][i] = None
            uses[i][buffer] = None
            holder = index.get(value.held_until) if value.held_until is not None else None
            if holder is not None:
                users[buffer][holder] = None
                uses[holder][buffer] = None
    pinned = [False] * len(names)
    for value in graph.outputs:
        buffer = buffer_index.get(value.storage)
        if buffer is not None:
            pinned[buffer] = True
    residents = [
        v for v in graph.values.values() if v.role in RESIDENT_ROLES and v.alias_of is None
    ]
    resident_bytes = sum(_bytes(v, sizes, dims) for v in residents)
    working_sets = (
        sum(nbytes[b] for b in {buffer_index[v.storage] for v in (*node.present_inputs,
                                                                  *node.outputs)
                                if v.storage in buffer_index})
        for node in nodes
    )
    return MemoryModel(
        node_names=tuple(node.name for node in nodes),
        resident_bytes=resident_bytes,
        buffer_names=tuple(names),
        buffer_bytes=tuple(nbytes),
        producer=tuple(producer),
        users=tuple(tuple(u) for u in users),
        pinned=tuple(pinned),
        allocates=tuple(tuple(a) for a in allocates),
        uses=tuple(tuple(u) for u in uses),
        predecessors=_predecessors(nodes, index),
        dims=dict(dims),
        lower_bound_bytes=resident_bytes + max(working_sets, default=0),
        resident_names=tuple(v.name for v in residents),
    )


def _bytes(value: Value, sizes: Mapping[str, SymInt | None], dims: Mapping[str, int]) -> int:
    size = sizes.get(value.name)
    return 0 if size is None else evaluate(size, dims)


def _predecessors(nodes: Sequence[Node], index: Mapping[Node, int]) -> tuple[tuple[int, ...], ...]:
    preds: list[dict[int, None]] = [{} for _ in nodes]
    for i, node in enumerate(nodes):
        for value in node.present_inputs:
            source = index.get(value.producer) if value.producer is not None else None
            if source is not None and source != i:
                preds[i][source] = None
    for before, after in _alias_order_edges(nodes):
        preds[index[after]][index[before]] = None
    return tuple(tuple(p) for p in preds)


def _alias_order_edges(nodes: Sequence[Node]) -> list[tuple[Node, Node]]:
    """Edges that keep view/in-place makers in place among the users of their storage.

    Per storage that has aliases, walk its users in model order: every node making an alias
    comes after all users before it and before all users after it (O(users) edges).
    """
    touching: dict[Value, list[Node]] = {}
    makers: set[tuple[Value, Node]] = set()
    aliased: set[Value] = set()
    for node in nodes:
        for value in (*node.present_inputs, *node.outputs):
            storage = value.storage
            users = touching.setdefault(storage, [])
            if not users or users[-1] is not node:
                users.append(node)
        for value in node.outputs:
            if value.alias_of is not None:
                aliased.add(value.storage)
                makers.add((value.storage, node))
    edges: list[tuple[Node, Node]] = []
    for storage in aliased:
        last_maker: Node | None = None
        since: list[Node] = []
        for node in touching[storage]:
            if (storage, node) in makers:
                edges.extend((before, node) for before in since)
                if last_maker is not None:
                    edges.append((last_maker, node))
                last_maker, since = node, []
            else:
                if last_maker is not None:
                    edges.append((last_maker, node))
                since.append(node)
    return edges


def rebind(model: MemoryModel, sizes: Mapping[str, SymInt | None],
           dims: Mapping[str, int]) -> MemoryModel:
    """The same graph with its sizes evaluated at other dims (the structure is reused)."""

    def size(name: str) -> int:
        value = sizes.get(name)
        return 0 if value is None else evaluate(value, dims)

    return dataclasses.replace(
        model,
        resident_bytes=sum(size(name) for name in model.resident_names),
        buffer_bytes=tuple(size(name) for name in model.buffer_names),
        dims=dict(dims),
        lower_bound_bytes=0,  # not recomputed: no search runs on a rebound model
    )


def resident_sizes(model: MemoryModel, sizes: Mapping[str, SymInt | None]) -> SymInt:
    return sum((sizes.get(name) or SymInt() for name in model.resident_names), SymInt())


def order_peak(model: MemoryModel, order: Sequence[int]) -> tuple[int, int]:
    """(peak bytes including residents, step of the peak) of running `order`."""
    remaining = [len(users) for users in model.users]
    sizes = model.buffer_bytes
    live = model.resident_bytes
    peak, peak_step = -1, 0
    alloc = model.alloc_bytes
    for step, node in enumerate(order):
        live += alloc[node]
        if live > peak:
            peak, peak_step = live, step
        for buffer in model.uses[node]:
            remaining[buffer] -= 1
            if remaining[buffer] == 0 and not model.pinned[buffer]:
                live -= sizes[buffer]
    return peak, peak_step


def symbolic_order_peak(model: MemoryModel, order: Sequence[int],
                        sizes: Mapping[str, SymInt | None], resident_bytes: SymInt,
                        probe: Mapping[str, int]) -> tuple[SymInt, tuple[SymInt, ...]]:
    """The peak of `order` as polynomials in the free dims: (the one largest at `probe`,
    every step total no other dominates), as `analyze_liveness` states them, in one sweep."""
    terms = [tuple((sizes.get(name) or SymInt()).terms().items()) for name in model.buffer_names]
    remaining = [len(users) for users in model.users]
    live = dict(resident_bytes.terms())
    steps: list[SymInt] = []
    for node in order:
        for buffer in model.allocates[node]:
            for monomial, coefficient in terms[buffer]:
                live[monomial] = live.get(monomial, 0) + coefficient
        steps.append(SymInt(live))
        for buffer in model.uses[node]:
            remaining[buffer] -= 1
            if remaining[buffer] == 0 and not model.pinned[buffer]:
                for monomial, coefficient in terms[buffer]:
                    live[monomial] -= coefficient
    candidates = symint_max(steps)
    peak = max(candidates, key=lambda c: evaluate(c, probe))
    return peak, tuple(candidates)


def lifetimes(model: MemoryModel, order: Sequence[int]) -> list[tuple[int, int]]:
    """(first step, last step) of every buffer in `order`; pinned buffers last to the end."""
    position = [0] * model.node_count
    for step, node in enumerate(order):
        position[node] = step
    end = len(order) - 1
    result = []
    for buffer, users in enumerate(model.users):
        first = position[model.producer[buffer]]
        last = end if model.pinned[buffer] else max(position[u] for u in users)
        result.append((first, max(first, last)))
    return result


def is_topological(model: MemoryModel, order: Sequence[int]) -> bool:
    """True when `order` runs every node once, each after all its predecessors."""
    if sorted(order) != list(range(model.node_count)):
        return False
    position = {node: step for step, node in enumerate(order)}
    return all(
        position[pred] < position[node]
        for node, preds in enumerate(model.predecessors)
        for pred in preds
    )
