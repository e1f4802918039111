"""A graph's activation buffers (the storages of the tensors its nodes make) and the nodes
that keep each alive: what graphmem/passes/memory_model.py sweeps, with its conventions (a
view or in-place result shares its base's buffer; a buffer lives until the last node that
reads or writes it, or until the node after which the framework drops it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from graphmem.core.ir import RESIDENT_ROLES, Graph, Node, Value

Aliases = Mapping[Value, Value]  # value -> the value whose storage it shares (a what-if)


@dataclass(frozen=True)
class Buffers:
    """A graph's activation storages and the nodes that keep each alive (node indices are the
    model order; no sizes, so one Buffers serves any sizes and any order)."""

    nodes: tuple[Node, ...]
    storages: tuple[Value, ...]  # buffer -> the value that owns its storage
    producer: tuple[int, ...]  # buffer -> the node that allocates it
    allocates: tuple[tuple[int, ...], ...]  # node -> buffers it allocates
    uses: tuple[tuple[int, ...], ...]  # node -> buffers it keeps alive (distinct)
    touches: tuple[tuple[int, ...], ...]  # node -> buffers it reads or writes: its working set
    pinned: tuple[bool, ...]  # buffer -> a graph output: never freed
    residents: tuple[Value, ...]  # resident tensors owning their storage, in graph order
    what_if: bool = False  # built with `aliases` overriding the graph's own
    # node -> the nodes that must run before it (`node_predecessors`), where the walk that
    # found `touches` found them too (no views nor held tensors: no order edges); else None
    predecessors: tuple[tuple[int, ...], ...] | None = None

    def of_graph(self, graph: Graph) -> bool:
        """True when these are `graph`'s own buffers as it stands (no what-if aliases, the same
        nodes): then they can be reused instead of walked again."""
        nodes = graph.nodes
        return not self.what_if and len(nodes) == len(self.nodes) \
            and all(a is b for a, b in zip(nodes, self.nodes, strict=True))

    def steps(self, order: Sequence[Node]) -> list[int]:
        """Node indices of `order`, a permutation of the graph's nodes."""
        index = {node: i for i, node in enumerate(self.nodes)}
        try:
            return [index[node] for node in order]
        except KeyError as missing:
            raise ValueError(f"{missing.args[0].describe()} is not a node of the graph") from None


def find_buffers(graph: Graph, aliases: Aliases | None = None) -> Buffers:
    """The buffers of `graph`; `aliases` overrides `Value.alias_of` (a what-if, no mutation)."""
    nodes = tuple(graph.nodes)
    buffer_of: dict[Value, int] = {}
    producer: list[int] = []
    allocates: list[tuple[int, ...]] = []
    for i, node in enumerate(nodes):
        made = []
        for value in node.outputs:
            base = value.alias_of if not aliases else _base(value, aliases)  # no call per value
            if base is None and value.role not in RESIDENT_ROLES and value not in buffer_of:
                buffer_of[value] = len(producer)
                made.append(len(producer))
                producer.append(i)
        allocates.append(tuple(made))
    plain = None if aliases else _plain_touches(nodes, buffer_of, producer)
    predecessors = None
    if plain is not None:
        touches, predecessors = plain
        uses = touches
    else:
        uses, touches = _uses(nodes, buffer_of, aliases)
    pinned = [False] * len(producer)
    for value in graph.outputs:
        buffer = buffer_of.get(storage_of(value, aliases))
        if buffer is not None:
            pinned[buffer] = True
    residents = tuple(v for v in graph.values.values() if v.role in RESIDENT_ROLES
                      and (v.alias_of if not aliases else _base(v, aliases)) is None)
    return Buffers(nodes, tuple(buffer_of), tuple(producer), tuple(allocates), uses, touches,
                   tuple(pinned), residents, what_if=bool(aliases), predecessors=predecessors)


IndexLists = tuple[tuple[int, ...], ...]


def _uses(nodes: tuple[Node, ...], buffer_of: Mapping[Value, int],
          aliases: Aliases | None) -> tuple[IndexLists, IndexLists]:
    """(node -> buffers it keeps alive, node -> buffers it reads or writes)."""
    index = {node: i for i, node in enumerate(nodes)}
    uses: list[dict[int, None]] = [{} for _ in nodes]
    touches: list[tuple[int, ...]] = []
    for i, node in enumerate(nodes):
        touched: dict[int, None] = {}
        for value in (*node.present_inputs, *node.outputs):
            buffer = buffer_of.get(storage_of(value, aliases) if aliases else value.storage)
            if buffer is None:
                continue
            touched[buffer] = None
            uses[i][buffer] = None
            holder = index.get(value.held_until) if value.held_until is not None else None
            if holder is not None:
                uses[holder][buffer] = None
        touches.append(tuple(touched))
    return tuple(tuple(u) for u in uses), tuple(touches)


def _plain_touches(nodes: tuple[Node, ...], buffer_of: Mapping[Value, int],
                   producer: Sequence[int]) -> tuple[IndexLists, IndexLists] | None:
    """(node -> buffers it reads or writes, node -> the nodes that must run before it) where
    no value a node touches is a view or held past its last use: then what a node keeps
    alive is what it touches (`_uses` gives both the same), and the nodes before it are its
    inputs' producers (`node_predecessors`, which adds order edges only for views). None
    where some value is (a traced PyTorch graph): `_uses` follows them.

    An input with a buffer was made by that buffer's producer; another input's maker (a
    Constant node's resident output) is looked up by node."""
    get = buffer_of.get
    index: dict[Node, int] | None = None
    touches, predecessors = [], []
    for i, node in enumerate(nodes):
        touched: dict[int, None] = {}
        before: dict[int, None] = {}
        for value in node.inputs:
            if value is None:
                continue
            if value.alias_of is not None or value.held_until is not None:
                return None
            buffer = get(value)
            if buffer is not None:
                touched[buffer] = None
                source: int | None = producer[buffer]
            elif value.producer is not None:
                index = index or numbered(nodes)
                source = index.get(value.producer)
            else:
                continue
            if source is not None and source != i:
                before[source] = None
        for value in node.outputs:
            if value.alias_of is not None or value.held_until is not None:
                return None
            buffer = get(value)
            if buffer is not None:
                touched[buffer] = None
        touches.append(tuple(touched))
        predecessors.append(tuple(before))
    return tuple(touches), tuple(predecessors)


def _base(value: Value, aliases: Aliases | None) -> Value | None:
    return aliases.get(value, value.alias_of) if aliases else value.alias_of


def storage_of(value: Value, aliases: Aliases | None = None) -> Value:
    """The value owning `value`'s memory, following `aliases` before `Value.alias_of`."""
    if not aliases:
        return value.storage
    base = _base(value, aliases)
    while base is not None:
        value, base = base, _base(base, aliases)
    return value


def numbered(nodes: Sequence[Node]) -> dict[Node, int]:
    """node -> its index in the model order."""
    return dict(zip(nodes, range(len(nodes)), strict=True))
