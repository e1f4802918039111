"""One graph for every batch: two traces of a step at two batches, made one graph whose
batch-proportional dims are `k * batch` (a SymInt), so the peak at a third batch is
`value_bytes` + `analyze_liveness` with `batch` bound, no third trace.

A traced step at two batches is the same graph where its sizes scale with the batch: the same
nodes in the same order, each reading and making the same values, and every dim either the
same number in both or k times the batch in both, with one integer k. Anything else (another
node count, an op or phase that differs, a dim such as `batch + 1` or one rounded up to a
multiple) answers "no scaling" with the first difference found, and the caller traces again.
Two batches cannot tell `k * batch` from a size rounded to a multiple of both: the caller
confirms the answer it reads off the scaled graph with one real trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from graphmem.core.ir import Dim, Graph, Node, Shape, Value
from graphmem.core.symbolic import SymInt
from graphmem.passes.dims import DimBinding, value_bytes
from graphmem.passes.liveness import analyze_liveness

BATCH_SYMBOL = "batch"  # the scaled graph's batch dim: bind it with DimBinding({"batch": b})


@dataclass(frozen=True)
class BatchScaling:
    """The scaled graph (None: the two graphs do not scale, `reason` says where)."""

    graph: Graph | None
    reason: str = ""


class _Mismatch(Exception):
    """The two graphs differ beyond a batch-proportional dim (the message says where)."""


def scale_by_batch(small: Graph, small_batch: int, large: Graph, large_batch: int
                   ) -> BatchScaling:
    """`small` traced at `small_batch` and `large` at `large_batch` as one graph in
    BATCH_SYMBOL. The result is for sizes and liveness: node attributes and imported costs
    (which hold numbers at one batch) are not carried over."""
    if small_batch == large_batch or min(small_batch, large_batch) < 1:
        return BatchScaling(None, f"batches {small_batch} and {large_batch} cannot tell a"
                                  " constant dim from one that scales")
    try:
        return BatchScaling(_Scaler(small_batch, large_batch).graph(small, large))
    except _Mismatch as mismatch:
        return BatchScaling(None, str(mismatch))


def peak_at_batch(scaled: Graph, batch: int) -> int:
    """The live-tensor peak of the scaled graph at `batch`: what the pipeline's liveness pass
    says of the step traced at that batch, where the step scales."""
    sizes = value_bytes(scaled, DimBinding({BATCH_SYMBOL: batch}, (), BATCH_SYMBOL))
    return int(analyze_liveness(scaled, sizes).peak_bytes)


def scaled_dim(small: Dim, small_batch: int, large: Dim, large_batch: int) -> Dim:
    """One dim of both graphs as the scaled graph's: equal, or `k * batch` at both batches
    with the same integer k; raises _Mismatch otherwise (an offset, a rounding, batch / 2)."""
    if small == large:
        if small is not None and BATCH_SYMBOL in small.free_symbols():
            raise _Mismatch(f"dim {small} is already in '{BATCH_SYMBOL}'")
        return small
    if small is None or large is None or not (small.is_constant and large.is_constant):
        raise _Mismatch(f"dim {small} at batch {small_batch} is {large} at {large_batch}")
    factor, rest = divmod(int(small), small_batch)
    if rest or factor < 1 or int(large) != factor * large_batch:
        raise _Mismatch(f"dim {small} at batch {small_batch} is {large} at {large_batch}:"
                        " not proportional to the batch")
    return SymInt.symbol(BATCH_SYMBOL) * factor


class _Scaler:
    """Walks both graphs in step, pairing values by position, building the scaled copy."""

    def __init__(self, small_batch: int, large_batch: int) -> None:
        self.small_batch, self.large_batch = small_batch, large_batch
        self.copies: dict[Value, Value] = {}  # a value of `small` -> its scaled copy
        self.pairs: dict[Value, Value] = {}  # a value of `small` -> its twin in `large`

    def graph(self, small: Graph, large: Graph) -> Graph:
        if len(small.values) != len(large.values) or len(small.nodes) != len(large.nodes):
            raise _Mismatch(f"{len(small.nodes)} nodes and {len(small.values)} values at batch"
                            f" {self.small_batch}, {len(large.nodes)} and {len(large.values)}"
                            f" at {self.large_batch}")
        for one, other in zip(small.values.values(), large.values.values(), strict=True):
            self.pair(one, other)
        nodes = [self.node(one, other) for one, other in zip(small.nodes, large.nodes,
                                                             strict=True)]
        self.link_values(small, large, nodes)
        scaled = Graph(large.name, [], {v.name: v for v in self.copies.values()},
                       self.twins(small.inputs, large.inputs, "graph inputs"),
                       self.twins(small.outputs, large.outputs, "graph outputs"),
                       large.opset, large.source_format, large.data_dims)
        for node in nodes:
            scaled.add_node(node)
        return scaled

    def pair(self, one: Value, other: Value) -> None:
        """Pair two values of the same position; the copy has the large graph's name."""
        if one.dtype is not other.dtype or one.role is not other.role:
            raise _Mismatch(f"{one.name} ({one.dtype.label}, {one.role}) is {other.name}"
                            f" ({other.dtype.label}, {other.role})")
        self.pairs[one] = other
        self.copies[one] = Value(other.name, other.dtype, self.shape(one, other), other.role)

    def shape(self, one: Value, other: Value) -> Shape | None:
        if one.shape is None or other.shape is None:
            if one.shape is not other.shape:
                raise _Mismatch(f"{one.name}'s rank is known at one batch only")
            return None
        if len(one.shape) != len(other.shape):
            raise _Mismatch(f"{one.name} has rank {len(one.shape)} at batch {self.small_batch},"
                            f" {other.name} rank {len(other.shape)} at {self.large_batch}")
        try:
            return tuple(scaled_dim(a, self.small_batch, b, self.large_batch)
                         for a, b in zip(one.shape, other.shape, strict=True))
        except _Mismatch as mismatch:
            raise _Mismatch(f"{one.name}: {mismatch}") from None

    def twin(self, one: Value | None, other: Value | None, where: str) -> Value | None:
        """The copy of `one`, checked to be paired with `other`."""
        if one is None or other is None:
            if one is not other:
                raise _Mismatch(f"{where}: a missing input at one batch only")
            return None
        if self.pairs.get(one) is not other:
            raise _Mismatch(f"{where}: {one.name} is {other.name} at batch {self.large_batch},"
                            " not the value in its position")
        return self.copies[one]

    def twins(self, ones: Sequence[Value | None], others: Sequence[Value | None],
              where: str) -> list[Value]:
        if len(ones) != len(others):
            raise _Mismatch(f"{where}: {len(ones)} at batch {self.small_batch}, {len(others)}"
                            f" at {self.large_batch}")
        copies = [self.twin(a, b, where) for a, b in zip(ones, others, strict=True)]
        return [v for v in copies if v is not None]

    def node(self, one: Node, other: Node) -> Node:
        if (one.op_type, one.domain, one.phase, one.module_path, one.subgraph_node_count) != (
                other.op_type, other.domain, other.phase, other.module_path,
                other.subgraph_node_count):
            raise _Mismatch(f"{one.describe()} is {other.describe()} at batch {self.large_batch}"
                            " (op, domain, phase or module differs)")
        where = other.describe()
        if len(one.inputs) != len(other.inputs):
            raise _Mismatch(f"{where}: {len(one.inputs)} inputs at batch {self.small_batch},"
                            f" {len(other.inputs)} at {self.large_batch}")
        inputs = [self.twin(a, b, where) for a, b in zip(one.inputs, other.inputs, strict=True)]
        outputs = self.twins(one.outputs, other.outputs, where)
        return Node(other.name, other.op_type, inputs, outputs, domain=other.domain,
                    module_path=other.module_path,
                    subgraph_node_count=other.subgraph_node_count, phase=other.phase,
                    needs_grad=other.needs_grad)

    def link_values(self, small: Graph, large: Graph, nodes: list[Node]) -> None:
        """Each copy's alias base and holder: the twins of the small graph's, checked."""
        small_at = {node: i for i, node in enumerate(small.nodes)}
        large_at = {node: i for i, node in enumerate(large.nodes)}
        for one, copy in self.copies.items():
            other = self.pairs[one]
            copy.alias_of = self.twin(one.alias_of, other.alias_of, f"{one.name}'s alias base")
            copy.held_until = self.holder(one, other, small_at, large_at, nodes)

    @staticmethod
    def holder(one: Value, other: Value, small_at: dict[Node, int], large_at: dict[Node, int],
               nodes: list[Node]) -> Node | None:
        """The scaled graph's node that holds `one` (None: held to its last use)."""
        if one.held_until is None and other.held_until is None:
            return None
        step = small_at.get(one.held_until) if one.held_until is not None else None
        if step is None or other.held_until is None or large_at.get(other.held_until) != step:
            raise _Mismatch(f"{one.name} is held until another node at each batch")
        return nodes[step]

