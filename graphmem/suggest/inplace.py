"""Elementwise ops that could write into their input, and what that saves at the peak.

An op can run in place when its input dies at that op: no later node reads the input (or a
view of it), the input is an ordinary activation (not saved for backward, not a graph input,
output or weight) and the output has the input's size and dtype. Only `add`/`mul` can write
into either operand (`y.add_(x)` for `x + y`); other ops write into input 0. A Python variable
that still holds the input (`Value.held_until`) without reading it does not stop it: the shared
storage then lives as long as the variable, which liveness counts. What it saves is re-computed,
not assumed: liveness runs again with the op's output given as an alias of its input (sharing
its storage, as `relu_` does; the graph itself is not changed). The saving is the drop of the
peak: zero when the input and output are not both live at the peak step (the op still saves
memory at its own step, but the peak is elsewhere). For ONNX graphs the runtime's memory
planner may already reuse such buffers; the figure is what graphmem's model-order peak gains.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from graphmem.core.ir import Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.ops import op_name, traits_of
from graphmem.passes.liveness import analyze_liveness

MAX_CANDIDATES = 200  # liveness re-runs per analysis


@dataclass(frozen=True)
class InplaceCandidate:
    node: str
    op: str  # relu, Add...
    module_path: str
    input_name: str  # the dying input the output would overwrite
    saves_bytes: int  # drop of the model-order peak; 0 when not live at the peak
    new_peak_bytes: int


def find_inplace(graph: Graph, sizes: Mapping[str, SymInt | None], nodes: Sequence[Node],
                 dims: Mapping[str, int] | None = None) -> list[InplaceCandidate]:
    """Each op of `nodes` (e.g. the forward pass) that could run in place, with its saving."""
    position = {node: step for step, node in enumerate(graph.nodes)}
    readers = _readers_by_storage(graph)
    outputs = {v.storage for v in graph.outputs}
    base = _peak(graph, sizes, dims)
    found = []
    for node in nodes:
        victim = _dying_input(node, readers, position, outputs, sizes)
        if victim is None:
            continue
        new_peak = _peak_with_alias(graph, sizes, node.outputs[0], victim, dims)
        found.append(InplaceCandidate(node.name, op_name(node), node.module_path, victim.name,
                                      base - new_peak, new_peak))
        if len(found) >= MAX_CANDIDATES:
            break
    return found


def _readers_by_storage(graph: Graph) -> dict[Value, list[Node]]:
    readers: dict[Value, list[Node]] = {}
    for value in graph.values.values():
        readers.setdefault(value.storage, []).extend(value.consumers)
    return readers


def _dying_input(node: Node, readers: Mapping[Value, list[Node]], position: Mapping[Node, int],
                 outputs: set[Value], sizes: Mapping[str, SymInt | None]) -> Value | None:
    # ops with an in-place form (PyTorch's `relu_`, `add_`), in either vocabulary
    traits = traits_of(node)
    if not traits.inplace_variant or len(node.outputs) != 1:
        return None
    out = node.outputs[0]
    if out.alias_of is not None:
        return None
    # either operand of add/mul can take the result (`y.add_(x)` for `x + y`); others input 0
    operands = node.present_inputs if traits.commutative else node.inputs[:1]
    for value in operands:
        if value is None or value.alias_of is not None or value.role is not Role.ACTIVATION \
                or value in outputs:
            continue  # a view, saved for backward, an input, a weight or a graph output
        if value.dtype is not out.dtype or sizes.get(value.name) != sizes.get(out.name):
            continue
        # no later reader of it or of a view of it; a Python variable may still hold it
        # (`Value.held_until`): liveness keeps the shared storage that long
        if all(position[reader] <= position[node] for reader in readers.get(value, [])):
            return value
    return None


def _peak(graph: Graph, sizes: Mapping[str, SymInt | None], dims: Mapping[str, int] | None,
          aliases: Mapping[Value, Value] | None = None) -> int:
    peak = analyze_liveness(graph, sizes, dims=dims, aliases=aliases).peak_bytes
    return int(peak) if peak.is_constant else int(peak.evaluate(dict(dims or {})))


def _peak_with_alias(graph: Graph, sizes: Mapping[str, SymInt | None], out: Value,
                     victim: Value, dims: Mapping[str, int] | None) -> int:
    """The peak if `out` shared `victim`'s storage (a what-if: the graph is not changed)."""
    return _peak(graph, sizes, dims, aliases={out: victim})
