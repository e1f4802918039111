"""Which decoder layer each node of a traced step belongs to (stamp.py's blocks).

A step traced with k layers (k = 2 or 3) is labelled node by node with the layer it belongs
to, or None for what every layer shares (embedding, final norm, loss, the optimizer's foreach
ops themselves):
- a placeholder by its leaf label (`model.layers.1.mlp.up_proj.weight`, `exp_avg[...]`);
- a forward node by the module running when it was traced (trace.py MODULE_KEY);
- a backward node carries no module path (module hooks do not run in backward, except in a
  checkpoint's recomputation, which is labelled by its module): it belongs to the layer of the
  forward op that made the autograd node it runs for (grad_fns.py numbers it), whatever is
  trainable; what the engine runs between nodes (a sum of a tensor's gradients, the loss's
  seed) belongs to the last op's layer: the sum of layer k's input's gradients is layer k's.
  A parameter's gradient (found by its position in the optimizer's foreach lists) labelled
  with another layer than its parameter's is refused. (Labelled from the first parameter
  gradient, as before 2026-11-29, a layer whose MLP trains no parameter, LoRA on the
  attention only, had its MLP backward labelled as the layer above's.);
- a constant by the node that reads it, the optimizer's (the per-parameter step counters) by
  its position in the list it is passed in; an optimizer node by the position it unpacks
  from a foreach op's list (`getitem`).
Every list the optimizer passes is over the trainable parameters in one order: `positions`.
"""

from __future__ import annotations

import bisect
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from graphmem.frontends.torch.grad_fns import OUTSIDE
from graphmem.frontends.torch.trace import MODULE_KEY, PHASE_KEY, TracedStep


class NotStampable(Exception):
    """The step cannot be stamped exactly: the reason; the caller traces every layer."""


@dataclass(frozen=True)
class Labels:
    layer: dict[torch.fx.Node, int | None]  # every node of the graph
    positions: tuple[int | None, ...]  # the layer of each trainable parameter, list order


def layer_pattern(prefix: str) -> re.Pattern[str]:
    """`prefix.N` followed by a dot or the end, at the start or after `[` (a state label)."""
    return re.compile(rf"(?:^|\[){re.escape(prefix)}\.(\d+)(?=\.|$|\])")


def labels_of(step: TracedStep, prefix: str) -> Labels:
    pattern = layer_pattern(prefix)
    nodes = list(step.graph_module.graph.nodes)
    layer: dict[torch.fx.Node, int | None] = {}
    placeholders = [n for n in nodes if n.op == "placeholder"]
    if len(placeholders) != len(step.leaf_roles):
        raise NotStampable("placeholders and leaf roles differ")
    for node, (_, label) in zip(placeholders, step.leaf_roles, strict=True):
        layer[node] = _match(pattern, label)
    positions = _positions(nodes, layer)
    anchors = _anchors(nodes, layer, positions)
    backward = []
    for node in nodes:
        if node in layer:
            continue
        custom = node.meta.get("custom", {})
        module = custom.get(MODULE_KEY)
        if custom.get(PHASE_KEY) == "backward":
            backward.append(node)
        elif custom.get(PHASE_KEY) == "optimizer" or node.op == "get_attr":
            layer[node] = _optimizer_label(node, anchors, positions)
        else:
            layer[node] = _match(pattern, str(module)) if module is not None else None
    _label_backward(backward, nodes, layer, pattern)
    for node, position in anchors.items():  # a parameter's gradient is its layer's
        if node in backward and layer[node] != position:
            raise NotStampable(f"{node.name}: a gradient of layer {position} made in another")
    for node in nodes:  # a constant a layer reads (not a step counter): that layer's
        if node.op == "get_attr" and node not in anchors and node.users:
            layer[node] = layer[next(iter(node.users))]
    return Labels(layer, positions)


def _label_backward(backward: list[torch.fx.Node], nodes: list[torch.fx.Node],
                    layer: dict[torch.fx.Node, int | None], pattern: re.Pattern[str]) -> None:
    """A backward op's layer: its module's in a checkpoint's recomputation, else the layer of
    the forward op that made the autograd node it runs for (grad_fns.py); the engine's own ops
    between nodes (a gradient sum, the loss's seed) the last op's before them."""
    made = _makers(nodes, set(backward), layer)
    current: int | None = None
    for node in backward:
        module = node.meta.get("custom", {}).get(MODULE_KEY)
        number = node.meta.get("seq_nr", OUTSIDE)
        if module is not None:
            current = _match(pattern, str(module))
        elif number != OUTSIDE:
            current = made(number)
        layer[node] = current


def _makers(nodes: list[torch.fx.Node], backward: set[torch.fx.Node],
            layer: dict[torch.fx.Node, int | None]) -> Callable[[int], int | None]:
    """The layer of the op that made autograd node `number`: the first op traced with that
    number (ops that make none carry the last one made); where none has it (a custom
    autograd.Function's node is made after its forward's ops, which make none) the last op
    traced before it: that forward's."""
    first: dict[int, torch.fx.Node] = {}
    last: dict[int, torch.fx.Node] = {}
    for node in nodes:
        number = node.meta.get("seq_nr")
        if node in backward or node.op != "call_function" or not isinstance(number, int):
            continue
        first.setdefault(number, node)
        last[number] = node
    numbers = sorted(last)

    def made(number: int) -> int | None:
        if number in first:
            return layer[first[number]]
        before = bisect.bisect_left(numbers, number)
        if before == 0:
            raise NotStampable(f"autograd node {number}: made by no traced op")
        return layer[last[numbers[before - 1]]]

    return made


def _match(pattern: re.Pattern[str], text: str) -> int | None:
    found = pattern.search(text)
    return int(found.group(1)) if found else None


def _list_args(node: torch.fx.Node) -> list[list[object]]:
    return [list(a) for a in (*node.args, *node.kwargs.values()) if isinstance(a, list | tuple)
            and any(isinstance(x, torch.fx.Node) for x in a)]


def _positions(nodes: list[torch.fx.Node], layer: dict[torch.fx.Node, int | None]
               ) -> tuple[int | None, ...]:
    """The layer of each optimizer list position, from the first list of placeholders."""
    for node in nodes:
        if node.meta.get("custom", {}).get(PHASE_KEY) != "optimizer":
            continue
        for items in _list_args(node):
            if all(isinstance(x, torch.fx.Node) and x.op == "placeholder" for x in items):
                return tuple(layer[x] for x in items)  # type: ignore[index]
    return ()


def _anchors(nodes: list[torch.fx.Node], layer: dict[torch.fx.Node, int | None],
             positions: tuple[int | None, ...]) -> dict[torch.fx.Node, int | None]:
    """Each node an optimizer list holds, with the layer of its position."""
    found: dict[torch.fx.Node, int | None] = {}
    for node in nodes:
        if node.meta.get("custom", {}).get(PHASE_KEY) != "optimizer" or node.op == "get_attr":
            continue
        for items in _list_args(node):
            if len(items) != len(positions):
                raise NotStampable(f"{node.name}: a list of {len(items)}, not one per parameter")
            for item, position in zip(items, positions, strict=True):
                if not isinstance(item, torch.fx.Node):
                    continue
                known = layer.get(item, found.get(item, position))
                if found.setdefault(item, position) != position or known != position:
                    raise NotStampable(f"{item.name}: in lists at positions of two layers")
    return found


def _optimizer_label(node: torch.fx.Node, anchors: dict[torch.fx.Node, int | None],
                     positions: tuple[int | None, ...]) -> int | None:
    if node in anchors:
        return anchors[node]
    if node.op == "call_function" and node.target is operator.getitem:
        parent, index = node.args
        if isinstance(parent, torch.fx.Node) and _list_args(parent) and isinstance(index, int):
            return positions[index]
    return None
