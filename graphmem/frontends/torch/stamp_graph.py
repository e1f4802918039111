"""The step of L decoder layers built from the step traced with 3 (stamp.py).

The 3-layer graph is the template: its layer 0 nodes are the first layer's, its layer 2
nodes the top layer's, and its layer 1 nodes (the middle) are repeated for layers 1 .. L-2,
where they stand in the trace: each run of middle nodes once per middle layer, upwards
where the run follows layer 0's nodes (forward, parameters, the optimizer's lists), downwards
where it follows the top layer's (backward). A reference from a layer's node to another's is
relative (the previous layer's residual, the next layer's gradient: a difference of at most
one layer). The middle and top layers' blocks are alike node for node, so a middle copy
reads the next copy's node at the same position of its block; layer 0's block may differ
(with the embedding frozen, LoRA: no input gradient, one `detach` fewer), so a layer reads
the one below as the template does: the layer above layer 0 as the middle reads it, any
other as the top layer reads the middle (`_read_as`). A node every layer shares reads the
first and top layers' nodes as they are; its lists (the optimizer's foreach lists over every
parameter, the KV cache's outputs) are stamped with the layers. Names are given by torch.fx's
own namespace in trace order, so every node gets the name a whole trace gives it (`mm_29`,
`getitem_412`); the step counters' constants are numbered again in order. Built at 2 and 3
layers the result must be the traces themselves (stamp.py checks it), else nothing is
stamped.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from graphmem.frontends.torch.kernel_choice import KernelChoice
from graphmem.frontends.torch.stamp_labels import Labels, NotStampable, layer_pattern
from graphmem.frontends.torch.trace import MODULE_KEY, TracedStep

FIRST, MIDDLE, TOP = 0, 1, 2  # the template's layers
_NUMBERED = re.compile(r"^(.*)_(\d+)$")
_COUNTED = re.compile(r"^(.*?)(\d+)$")
Slot = tuple[torch.fx.Node, int | None]  # a template node in one layer of the result


@dataclass(frozen=True)
class Template:
    step: TracedStep  # traced with 3 layers
    labels: Labels
    prefix: str  # the layers' module path, `model.layers`
    kernels: tuple[KernelChoice, ...]  # counted at 2 layers: the per-layer counts follow


class _Builder:
    def __init__(self, template: Template, layers: int) -> None:
        self.t = template
        self.layers = layers
        self.layer = template.labels.layer
        self.nodes = list(template.step.graph_module.graph.nodes)
        self.graph = torch.fx.Graph()
        self.made: dict[Slot, torch.fx.Node] = {}
        self.counters: dict[str, int] = {}
        self.attributes: dict[str, Any] = {}
        self.spread: dict[torch.fx.Node, dict[tuple[int, int | None], int]] = {}
        self.roles: list[tuple[Any, str]] = []
        self.pattern = layer_pattern(template.prefix)
        self.leaf_index = {n: i for i, n in enumerate(n for n in self.nodes
                                                         if n.op == "placeholder")}
        self.corr = _correspondence(self.nodes, self.layer)
        self.corr_index = {(self.layer[n], s, i): n for n, (s, i) in self.corr.items()}
        self.by_name = {n.name: n for n in self.nodes}

    # ----- order -------------------------------------------------------------------------
    def slots(self) -> Iterator[Slot]:
        index = 0
        while index < len(self.nodes):
            node = self.nodes[index]
            if self.layer[node] != MIDDLE:
                yield node, self._place(self.layer[node])
                index += 1
                continue
            end = index
            while end < len(self.nodes) and self.layer[self.nodes[end]] == MIDDLE:
                end += 1
            run = self.nodes[index:end]
            for copy in self._copies(index, end):
                for member in run:
                    yield member, copy
            index = end

    def _place(self, label: int | None) -> int | None:
        return None if label is None else (0 if label == FIRST else self.layers - 1)

    def _copies(self, start: int, end: int) -> range:
        middles = range(1, self.layers - 1)
        before = [self.layer[n] for n in self.nodes[:start] if self.layer[n] is not None]
        after = [self.layer[n] for n in self.nodes[end:] if self.layer[n] is not None]
        side = (before[-1] if before else None, after[0] if after else None)
        if side[0] == FIRST or (side[0] is None and side[1] == TOP):
            return middles
        if side[0] == TOP or (side[0] is None and side[1] == FIRST):
            return middles[::-1]
        raise NotStampable("a run of middle-layer nodes between nodes of no layer")

    # ----- nodes -------------------------------------------------------------------------
    def build(self) -> TracedStep:
        pending = []
        for node, copy in self.slots():
            made = self._emit(node, copy)
            self.made[(node, copy)] = made
            pending.append((node, copy, made))
        released = self._released(pending)
        module = _graph_module(self.attributes, self.graph)
        step = self.t.step
        return replace(step, graph_module=module, leaf_roles=self.roles, released_after=released,
                       kernels=_kernels(self.t.kernels, step.kernels, self.layers))

    def _emit(self, node: torch.fx.Node, copy: int | None) -> torch.fx.Node:
        if node.op == "placeholder":
            name = self._numbered(node.name, start=1)
            role, label = self.t.step.leaf_roles[self.leaf_index[node]]
            self.roles.append((role, self._relabel(label, copy)))
            made = self.graph.create_node("placeholder", name, name=name)
        elif node.op == "get_attr":
            target = self._counted(str(node.target))
            self.attributes[target] = getattr(self.t.step.graph_module, str(node.target))
            made = self.graph.create_node("get_attr", target, name=target)
        else:
            pattern = self._spread_pattern(node, copy)
            args = self._map(node.args, node, copy, pattern)
            kwargs = self._map(node.kwargs, node, copy, pattern)
            if _is_unpacking(node) and node.args[0] in self.spread:  # a foreach op's item
                parent, index = node.args
                args = (args[0], self.spread[parent][(index, copy)])  # type: ignore[index]
            made = self.graph.create_node(node.op, node.target, args, kwargs,
                                          name=_base(node.name))
            if pattern is not None:
                self.spread[node] = {slot: i for i, slot in enumerate(pattern)}
        made.meta = self._meta(node, copy)
        return made

    def _meta(self, node: torch.fx.Node, copy: int | None) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if "val" in node.meta:
            val = node.meta["val"]
            pattern = self._spread_pattern(node, copy)
            meta["val"] = self._spread_plain(val, pattern) if pattern is not None else val
        if "custom" in node.meta:
            custom = dict(node.meta["custom"])
            if MODULE_KEY in custom:
                custom[MODULE_KEY] = self._relabel(str(custom[MODULE_KEY]), copy)
            meta["custom"] = custom
        return meta

    def _relabel(self, text: str, copy: int | None) -> str:
        if copy is None:
            return text
        return self.pattern.sub(lambda m: m.group(0).replace(m.group(1), str(copy)), text, 1)

    def _numbered(self, name: str, start: int) -> str:
        found = _NUMBERED.match(name)
        if found is None:
            raise NotStampable(f"{name}: a placeholder name without a number")
        count = self.counters.get(found.group(1), start - 1) + 1
        self.counters[found.group(1)] = count
        return f"{found.group(1)}_{count}"

    def _counted(self, target: str) -> str:
        found = _COUNTED.match(target)
        if found is None:
            raise NotStampable(f"{target}: a constant's name without a number")
        count = self.counters.get("attr:" + found.group(1), -1) + 1
        self.counters["attr:" + found.group(1)] = count
        return f"{found.group(1)}{count}"

    # ----- references --------------------------------------------------------------------
    def _spread_pattern(self, node: torch.fx.Node, copy: int | None
                        ) -> list[tuple[int, int | None]] | None:
        """A shared node's first list holding middle-layer nodes: each position of the result
        as (template position, layer)."""
        if copy is not None or self.layer[node] is not None:
            return None
        for arg in (*node.args, *node.kwargs.values()):
            if isinstance(arg, list | tuple) and any(
                    isinstance(x, torch.fx.Node) and self.layer[x] == MIDDLE for x in arg):
                return self._pattern([self.layer[x] if isinstance(x, torch.fx.Node) else None
                                      for x in arg])
        return None

    def _pattern(self, labels: list[int | None]) -> list[tuple[int, int | None]]:
        out: list[tuple[int, int | None]] = []
        index = 0
        while index < len(labels):
            if labels[index] != MIDDLE:
                out.append((index, self._place(labels[index])))
                index += 1
                continue
            end = index
            while end < len(labels) and labels[end] == MIDDLE:
                end += 1
            before = next((x for x in reversed(labels[:index]) if x is not None), None)
            copies = range(1, self.layers - 1)
            order = copies if before != TOP else copies[::-1]
            out.extend((i, c) for c in order for i in range(index, end))
            index = end
        return out

    def _spread_plain(self, items: Any, pattern: list[tuple[int, int | None]]) -> Any:
        width = max(i for i, _ in pattern) + 1
        if isinstance(items, list | tuple) and len(items) == width:
            return type(items)(items[i] for i, _ in pattern)
        return items

    def _map(self, tree: Any, node: torch.fx.Node, copy: int | None,
             pattern: list[tuple[int, int | None]] | None) -> Any:
        if isinstance(tree, torch.fx.Node):
            return self._resolve(tree, node, copy)
        if isinstance(tree, list | tuple):
            width = max(i for i, _ in pattern) + 1 if pattern is not None else -1
            if pattern is not None and len(tree) == width:
                return type(tree)(self._at(tree[i], layer) for i, layer in pattern)
            return type(tree)(self._map(x, node, copy, pattern) for x in tree)
        if isinstance(tree, dict):
            return {k: self._map(v, node, copy, pattern) for k, v in tree.items()}
        return tree

    def _at(self, item: Any, layer: int | None) -> Any:
        if not isinstance(item, torch.fx.Node):
            return item
        return self.made[(item, layer)]

    def _resolve(self, ref: torch.fx.Node, node: torch.fx.Node, copy: int | None
                 ) -> torch.fx.Node:
        return self.made[self._slot(ref, node, copy)]

    def _slot(self, ref: torch.fx.Node, node: torch.fx.Node, copy: int | None) -> Slot:
        target = self.layer[ref]
        if target is None:
            return ref, None
        own = self.layer[node]
        if own is None or copy is None:
            if target == MIDDLE:
                raise NotStampable(f"{node.name}: a shared node reads a middle layer's node")
            return ref, self._place(target)
        step = target - own
        if abs(step) > 1:
            raise NotStampable(f"{node.name}: reads a node {step} layers away")
        layer = copy + step
        cls = self._class(layer)
        if cls == target:
            return ref, layer
        if step < 0:  # the layer below is not the template's: read as the other class reads
            return self._read_as(node, ref, TOP if own == MIDDLE else MIDDLE, cls), layer
        return self._counterpart(ref, cls), layer

    def _class(self, layer: int) -> int:
        return FIRST if layer == 0 else TOP if layer == self.layers - 1 else MIDDLE

    def _read_as(self, node: torch.fx.Node, ref: torch.fx.Node, other: int, below: int
                 ) -> torch.fx.Node:
        """What `node`'s like node in the `other` class (the top layer's for a middle node,
        the middle's for the top one) reads where `node` reads `ref`: a node of the `below`
        class. The layer above layer 0 reads it as the template's middle layer does, any
        other layer reads the one below as the top layer reads the middle: layer 0's block
        may differ from the others' (a frozen embedding: no input gradient), which are
        alike node for node."""
        mine, theirs = self._reads(node), self._reads(self._counterpart(node, other))
        if len(mine) != len(theirs):
            raise NotStampable(f"{node.name}: its layers read differently")
        found = {b for a, b in zip(mine, theirs, strict=True) if a is ref}
        if len(found) != 1:
            raise NotStampable(f"{node.name}: its layers read differently")
        read = found.pop()
        if self.layer[read] != below or not _alike(read, ref):
            raise NotStampable(f"{node.name}: reads {ref.name} of a fixed layer")
        return read

    def _counterpart(self, ref: torch.fx.Node, cls: int) -> torch.fx.Node:
        """The node at `ref`'s place in another layer's block (the stamp asks only between
        the middle and top layers': layer 0's may differ)."""
        section, index = self.corr[ref]
        found = self.corr_index.get((cls, section, index))
        if found is None or not _alike(found, ref):
            raise NotStampable(f"{ref.name}: no like node in the other layers' blocks")
        return found

    def check_relative(self) -> None:
        """A middle node that reads the top layer's node (or is released at it) reads the next
        layer's, not the top layer's as such, when a like node of layer 0 reads the middle's
        node at that place. Past 3 layers the middle copies rely on this: else NotStampable.
        (A read of layer 0's node is checked where it is stamped: `_read_as`.)"""
        readers: dict[tuple[torch.fx.Node, int], list[torch.fx.Node]] = {}
        for node in self.nodes:
            if self.layer[node] == FIRST:
                for place, ref in enumerate(self._reads(node)):
                    readers.setdefault((ref, place), []).append(node)
        for node in self.nodes:
            if self.layer[node] != MIDDLE:
                continue
            for place, ref in enumerate(self._reads(node)):
                if self.layer[ref] != TOP:
                    continue
                below = self._counterpart(ref, MIDDLE)
                if not any(_alike(first, node) for first in readers.get((below, place), ())):
                    raise NotStampable(f"{node.name}: reads {ref.name} of a fixed layer")

    def _reads(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        """The nodes `node` reads, in order, then the node it is released at."""
        found: list[torch.fx.Node] = []
        torch.fx.node.map_arg((node.args, node.kwargs), found.append)
        point = self.t.step.released_after.get(node.name)
        return found + ([self.by_name[point]] if point is not None else [])

    def _released(self, pending: list[tuple[torch.fx.Node, int | None, torch.fx.Node]]
                  ) -> dict[str, str]:
        by_name = self.by_name
        released = self.t.step.released_after
        out: dict[str, str] = {}
        for node, copy, made in pending:
            point = released.get(node.name)
            if point is None:
                continue
            slot = self._slot(by_name[point], node, copy)
            if slot not in self.made:
                raise NotStampable(f"{node.name}: released at a node the result lacks")
            out[made.name] = self.made[slot].name
        return out


def _correspondence(nodes: list[torch.fx.Node], layer: dict[torch.fx.Node, int | None]
                    ) -> dict[torch.fx.Node, tuple[str, int]]:
    """Each labelled node's position among its layer's nodes of its section (op and phase)."""
    counts: dict[tuple[int | None, str], int] = {}
    out: dict[torch.fx.Node, tuple[str, int]] = {}
    for node in nodes:
        if layer[node] is None:
            continue
        section = f"{node.op}:{node.meta.get('custom', {}).get('graphmem_phase')}"
        key = (layer[node], section)
        out[node] = (section, counts.get(key, 0))
        counts[key] = counts.get(key, 0) + 1
    return out


def _alike(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    """The same op on the same kind of tensor (leaves and constants are named by order)."""
    named = a.op in ("placeholder", "get_attr")
    same_val = val_spec(a.meta.get("val")) == val_spec(b.meta.get("val"))
    return a.op == b.op and (named or a.target == b.target) and same_val


def val_spec(val: Any) -> Any:
    if isinstance(val, torch.Tensor):
        return tuple(val.shape), val.dtype, tuple(val.stride()), val.device.type
    if isinstance(val, list | tuple):
        return type(val).__name__, tuple(val_spec(v) for v in val)
    return repr(val) if val is None or isinstance(val, int | float | bool) else type(val).__name__


def _is_unpacking(node: torch.fx.Node) -> bool:
    return (node.op == "call_function" and node.target is operator.getitem
            and len(node.args) == 2 and isinstance(node.args[0], torch.fx.Node)
            and isinstance(node.args[1], int))


def _base(name: str) -> str:
    found = _NUMBERED.match(name)
    return found.group(1) if found else name


def _graph_module(attributes: dict[str, Any], graph: torch.fx.Graph) -> torch.fx.GraphModule:
    from torch.fx._lazy_graph_module import _make_graph_module, _use_lazy_graph_module

    with _use_lazy_graph_module(True):
        return _make_graph_module(attributes, graph)


def _kernels(at_two: tuple[KernelChoice, ...], at_three: tuple[KernelChoice, ...],
             layers: int) -> tuple[KernelChoice, ...]:
    """Each kernel's count at `layers`: the count at 2 plus one layer's for each more."""
    two = {(k.op, k.kernel, k.detail): k.count for k in at_two}
    if set(two) != {(k.op, k.kernel, k.detail) for k in at_three}:
        raise NotStampable("the kernels chosen differ between 2 and 3 layers")
    return tuple(replace(k, count=two[(k.op, k.kernel, k.detail)]
                         + (layers - 2) * (k.count - two[(k.op, k.kernel, k.detail)]))
                 for k in at_three)


def stamp(template: Template, layers: int) -> TracedStep:
    """The step at `layers` layers (2 or more) from the 3-layer template."""
    builder = _Builder(template, layers)
    if layers > 3:
        builder.check_relative()
    return builder.build()
