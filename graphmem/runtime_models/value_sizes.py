"""Every value's size at a probe's dims, by the value's place in the graph.

A largest-batch search runs onnxruntime's model at each batch it probes, on one graph
(graphmem/pipeline/device_total.py `DeviceTotalProbe`). The sizes are a few hundred distinct
polynomials (passes/dims.py `SizeTable`); binding those gives every value's size, and the
plan's buffers (numbered once per layout, ort_cpu.py `EventSteps`) read theirs by position:
per probe, one list of the distinct sizes bound, and one list of the buffers' bytes. Read by
name, `ValueSizes` is the mapping `value_bytes` returns (the same sizes, the same error for a
size too large): the fill of unknown sizes and the notes read it so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from graphmem.core.ir import Graph
from graphmem.core.symbolic import SymInt
from graphmem.core.units import MAX_BYTES
from graphmem.passes.dims import SizeTable, check_sizes_fit


class ProbeSizes(SizeTable):
    """A graph's size table that binds to `ValueSizes` (`at`): made once per search."""

    def __init__(self, graph: Graph, table: SizeTable | None = None) -> None:
        """`table`: the passes' table of `graph` (`value_bytes`'), if at hand: its distinct
        sizes and positions are taken, not found again (a walk over every value: 8 ms at
        22,000 nodes)."""
        if table is not None and table.graph is graph and len(table.names) == len(graph.values):
            self.graph, self.names, self.index, self.sizes = (
                graph, table.names, table.index, table.sizes)
        else:
            super().__init__(graph)
        self._position: dict[str, int] | None = None  # value name -> place, when read by name
        self._outputs: tuple[int, ...] | None = None  # the distinct sizes of node outputs
        # per plan layout (EventSteps, by id, held with the answer): each buffer's size index
        self._buffers: dict[int, tuple[object, list[int]]] = {}

    def at(self, dims: Mapping[str, int]) -> ValueSizes:
        """The sizes at `dims`; a GraphmemError naming the first tensor over 4 EiB."""
        bound: list[SymInt | None] = [size.bind(dims) for size in self.sizes]
        largest = max((int(s) for s in bound if s is not None and s.is_constant), default=0)
        bound.append(None)  # index -1: the values of unknown size
        sizes = ValueSizes(self, bound)
        if largest > MAX_BYTES:
            check_sizes_fit(sizes, dims)
        return sizes

    def position(self, name: str) -> int:
        if self._position is None:
            self._position = {name: i for i, name in enumerate(self.names)}
        return self._position[name]

    def output_sizes(self) -> tuple[int, ...]:
        """The distinct size indices of the graph's node outputs (the values onnxruntime
        allocates)."""
        if self._outputs is None:
            # the node outputs are the values with a producer (core/ir.py keeps the links)
            values = self.graph.values.values()
            self._outputs = tuple({i for i, value in zip(self.index, values, strict=True)
                                   if value.producer is not None})
        return self._outputs

    def buffer_sizes(self, key: object, positions: Sequence[int]) -> list[int]:
        """The size index of each value at `positions` (a plan layout's buffer owners),
        kept per `key` (the layout's own object)."""
        kept = self._buffers.get(id(key))
        if kept is None or kept[0] is not key:
            index = self.index
            kept = self._buffers[id(key)] = (key, [index[p] for p in positions])
        return kept[1]

    def of_layout(self, key: object) -> bool:
        """Whether a plan layout (`buffer_sizes`' key) was sized from this table."""
        kept = self._buffers.get(id(key))
        return kept is not None and kept[0] is key

    def of(self, graph: Graph) -> bool:
        """Whether the table's positions are `graph`'s values (the graph it was made from,
        unchanged in size since)."""
        return graph is self.graph and len(graph.values) == len(self.names)


class ValueSizes(Mapping[str, SymInt | None]):
    """Every value's size at one probe's dims: the table's distinct sizes bound (`bound`,
    its last entry None for the values of unknown size), read by position or by name."""

    def __init__(self, table: ProbeSizes, bound: list[SymInt | None]) -> None:
        self.table = table
        self.bound = bound
        self._numbers: list[int] | None = None

    def __getitem__(self, name: str) -> SymInt | None:
        return self.bound[self.table.index[self.table.position(name)]]

    def __iter__(self) -> Iterator[str]:
        return iter(self.table.names)

    def __len__(self) -> int:
        return len(self.table.names)

    def numbers(self) -> list[int]:
        """Each distinct size in bytes, 0 where it is not a number (a plan's buffer then
        counts 0 bytes, as one read by name does)."""
        if self._numbers is None:
            self._numbers = [int(s) if s is not None and s.is_constant else 0
                             for s in self.bound]
        return self._numbers

    def outputs_are_numbers(self) -> bool:
        """Whether every node output of the table's graph has a size that is a number."""
        bound = self.bound
        return all((size := bound[i]) is not None and size.is_constant
                   for i in self.table.output_sizes())
