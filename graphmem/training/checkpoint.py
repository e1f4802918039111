"""Activation checkpointing in the training expansion (graphmem/training/expand.py).

A checkpointed segment runs as `torch.utils.checkpoint.checkpoint(fn, x, use_reentrant=False)`
runs it:
- forward: the segment's nodes run, but autograd keeps nothing they save except the tensors
  that enter the segment from outside (the checkpoint's frame holds the function's inputs until
  the segment's backward is done). A tensor made inside that a node OUTSIDE the segment saves
  (the next LayerNorm's input) is still saved by that node, as in PyTorch;
- backward: just before the first backward node that reads a tensor made inside the segment,
  the segment's forward runs again ("recompute" nodes, named `<node>/recompute`, with the
  forward node's module path, so their FLOPs are counted where the forward's are) up to the
  last node that makes a tensor backward needs (torch's early stop), and each recomputed tensor
  is freed once the backward nodes that read it have run.

A segment is named by a module path (every forward node whose module path is it or under it:
`h.0`, `layer1.0`) or by a range of forward node names, `FIRST..LAST` (ONNX graphs without
module paths), or one node's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from graphmem.core.ir import RESIDENT_ROLES, Node, Value
from graphmem.errors import GraphmemError

RANGE_SEPARATOR = ".."
RECOMPUTE_SUFFIX = "/recompute"


@dataclass(eq=False)
class CheckpointSegment:
    label: str
    nodes: tuple[Node, ...]  # forward nodes, in forward order
    members: frozenset[Node] = frozenset()
    # original forward value -> its recomputed copy (empty until backward recomputes it)
    recomputed: dict[Value, Value] = field(default_factory=dict)
    done: bool = False

    def makes(self, value: Value) -> bool:
        """The value is made inside the segment (so backward reads a recomputed copy)."""
        return value.producer in self.members

    def entering(self) -> list[Value]:
        """Activations read by the segment and made outside it (the checkpoint's inputs)."""
        found: dict[Value, None] = {}
        for node in self.nodes:
            for value in node.present_inputs:
                if not self.makes(value) and value.storage.role not in RESIDENT_ROLES:
                    found[value] = None
        return list(found)


def resolve_segments(forward: list[Node], specs: tuple[str, ...]) -> list[CheckpointSegment]:
    """The forward nodes each spec names (see the module docstring); segments may not overlap."""
    owner: dict[Node, str] = {}
    segments = []
    for spec in specs:
        nodes = _nodes_named(forward, spec)
        for node in nodes:
            if node in owner:
                raise GraphmemError(f"checkpoint segments {owner[node]} and {spec} overlap at"
                                    f" {node.describe()}: give segments that do not nest")
            owner[node] = spec
        segments.append(CheckpointSegment(spec, tuple(nodes), frozenset(nodes)))
    return segments


def _nodes_named(forward: list[Node], spec: str) -> list[Node]:
    by_module = [n for n in forward
                 if n.module_path == spec or n.module_path.startswith(spec + ".")]
    if by_module:
        return by_module
    position = {node.name: step for step, node in reversed(list(enumerate(forward)))}
    first, _, last = spec.partition(RANGE_SEPARATOR)
    last = last or first
    if first in position and last in position and position[first] <= position[last]:
        return forward[position[first]: position[last] + 1]
    raise GraphmemError(
        f"checkpoint {spec}: no forward node has this module path or name; give a module path"
        f" (h.0) or a range of node names FIRST{RANGE_SEPARATOR}LAST in forward order")


def segment_index(segments: list[CheckpointSegment]) -> dict[Node, CheckpointSegment]:
    return {node: segment for segment in segments for node in segment.nodes}


def recompute_stop(segment: CheckpointSegment, saved: dict[Node, list[Value]]) -> int:
    """How many of the segment's nodes the recomputation runs: up to the last one that makes a
    tensor the segment's backward reads (torch's early stop); 0: nothing to recompute."""
    needed = {value.producer for node in segment.nodes for value in saved.get(node, ())
              if segment.makes(value)}
    stops = [step + 1 for step, node in enumerate(segment.nodes) if node in needed]
    return max(stops, default=0)
