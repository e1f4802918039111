"""Checkpoint candidates of an ONNX training step (graphmem/training/expand.py's expansion).

Where the exporter left module paths (`h.0`, `layer1.0`), the candidates are the modules, as
for a traced PyTorch step (graphmem/suggest/candidates.py `find_candidates`). Without
them, the candidates are the stretches of forward nodes between single-tensor cuts (float
tensors every input-to-logits path passes through: dominators of the logits in the forward
dataflow graph, found with networkx; the loss's targets would bypass them all), named
`FIRST..LAST` by their node names:
- depth 1: runs of ceil(sqrt(n)) consecutive stretches, Chen et al. 2016's sqrt(n)
  segmentation of a chain of n cut-separated layers;
- depth 2: runs of two stretches (an op and the one after it: Linear then ReLU);
- depth 3: every stretch between two consecutive cuts.
Each candidate's first-order saving is net of the tensors entering it that nothing saved
before (the checkpoint's frame holds them): a segment whose input is as large as what it
frees saves nothing.
The search (graphmem/suggest/search.py) takes the cheapest re-analysed plan of
any depth.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from graphmem.core.ir import RESIDENT_ROLES, Graph, Node, Role
from graphmem.core.symbolic import SymInt
from graphmem.passes.costs import CostReport
from graphmem.suggest.candidates import (
    SegmentCandidate,
    find_candidates,
    forward_nodes,
    saved_inside,
    single_tensor_cuts,
)
from graphmem.training.checkpoint import RANGE_SEPARATOR
from graphmem.training.steps import LOSS_PREFIX

CHEN_DEPTH = 1  # runs of ceil(sqrt(n)) stretches
PAIR_DEPTH = 2  # runs of two stretches
STRETCH_DEPTH = 3  # one stretch between two cuts


def onnx_candidates(graph: Graph, costs: CostReport, sizes: Mapping[str, SymInt | None]
                    ) -> list[SegmentCandidate]:
    """Modules where the graph has module paths, else stretches between single-tensor cuts;
    each with its net first-order saving (`net_saved_bytes`), those that save nothing left
    out."""
    found = find_candidates(graph, costs, sizes) or cut_candidates(graph, costs, sizes)
    forward = forward_nodes(graph)
    netted = [replace(c, saved_bytes=net_saved_bytes(
        forward[c.first_step: c.last_step + 1], c.saved_bytes, sizes)) for c in found]
    return [c for c in netted if c.saved_bytes > 0]


def net_saved_bytes(nodes: list[Node], saved_inside_bytes: int,
                    sizes: Mapping[str, SymInt | None]) -> int:
    """The saved activations a segment makes and keeps to itself, less the tensors entering it
    that nothing saved before: the checkpoint's frame now holds them until its backward."""
    inside = set(nodes)
    held = {value.storage for node in nodes for value in node.present_inputs
            if value.storage.producer not in inside
            and value.storage.role not in RESIDENT_ROLES
            and value.storage.role is not Role.SAVED_ACTIVATION}
    return saved_inside_bytes - sum(_int(sizes.get(v.name) or SymInt()) for v in held)


def model_forward(graph: Graph) -> list[Node]:
    """The forward nodes of the model: the forward phase less the loss (its nodes are named
    `loss/...`, graphmem/training/steps.py)."""
    return [n for n in forward_nodes(graph) if not n.name.startswith(LOSS_PREFIX)]


def cut_stretches(graph: Graph) -> list[list[Node]]:
    """The model's forward nodes split after each single-tensor cut's producer."""
    forward = model_forward(graph)
    cuts = single_tensor_cuts(graph, forward, float_only=True)  # the logits as the sink
    step = {node: index for index, node in enumerate(forward)}
    ends = sorted({step[c.producer] for c in cuts if c.producer in step})
    if not ends or ends[-1] != len(forward) - 1:
        ends.append(len(forward) - 1)
    stretches, start = [], 0
    for end in ends:
        stretches.append(forward[start: end + 1])
        start = end + 1
    return [s for s in stretches if s]


def cut_candidates(graph: Graph, costs: CostReport, sizes: Mapping[str, SymInt | None]
                   ) -> list[SegmentCandidate]:
    stretches = cut_stretches(graph)
    flops = {cost.name: cost.flops for cost in costs.nodes}
    # steps in forward_nodes' order, as find_candidates counts them
    step = {node: index for index, node in enumerate(forward_nodes(graph))}
    sqrt_n = math.ceil(math.sqrt(len(stretches))) if stretches else 1
    lengths = {CHEN_DEPTH: sqrt_n, PAIR_DEPTH: 2, STRETCH_DEPTH: 1}
    found: list[SegmentCandidate] = []
    tried: set[int] = set()
    for depth, length in sorted(lengths.items()):
        if length in tried:
            continue  # sqrt(n) is 1 or 2: those runs are already a depth
        tried.add(length)
        for start in range(0, len(stretches), length):
            nodes = [n for stretch in stretches[start: start + length] for n in stretch]
            saved = saved_inside(nodes, sizes)
            if saved <= 0:
                continue
            found.append(SegmentCandidate(
                path=segment_label(nodes), depth=depth, first_step=step[nodes[0]],
                last_step=step[nodes[-1]], saved_bytes=saved,
                forward_flops=sum(_int(flops.get(n.name, SymInt())) for n in nodes),
                single_tensor_input=True))
    return found


def segment_label(nodes: list[Node]) -> str:
    first, last = nodes[0].name, nodes[-1].name
    return first if first == last else f"{first}{RANGE_SEPARATOR}{last}"


def _int(value: SymInt) -> int:
    return int(value) if value.is_constant else 0
