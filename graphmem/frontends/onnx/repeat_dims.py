"""Grouped-query attention written with Tile and Reshape, followed by onnx's inference.

A graph written by hand repeats each key/value head by `Tile` on an axis it has just added
(`Unsqueeze`) and folds the copies in with `Reshape(x, [0, heads, -1, head_dim])` (the
exporters use Expand and a computed shape). onnx's Tile rule leaves every symbolic dim unknown,
even where its repeat is 1, and its Reshape rule has no symbolic arithmetic for the -1, so all
that follows (the residual stream: every later layer of a decoder) came out unknown and went to
onnxruntime's rules at about 80 us a node. Two structural facts give onnx the shapes:

- a Tile whose every repeated axis was added by the Unsqueeze before it (size 1) is an Expand
  by the same repeats, which onnx follows; the copy inference runs on has the Expand, and the
  graph keeps its Tile (`expand_tiles`, restored as fold.py's folded nodes are);
- a Reshape with a constant target, or one computed from shapes (shape_vectors.py): 0 copies
  the input's dim (allowzero unset), a positive entry is itself, a dim read from a shape is
  that dim, and the -1 is the input's size over the rest where that quotient is a number or a
  single dim of the input, each dim name an atom (`reshape_dims`, for the second pass; a
  third where only the second typed a Reshape's input: the repeat of a rotary output).

These are the shapes onnxruntime's rules compute for the same nodes (the quotient is sympy's
exact division); anything else is left to the engines.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

import onnx
from onnx import helper

from graphmem.frontends.onnx.graph_index import GraphIndex
from graphmem.frontends.onnx.shape_vectors import Dim, ShapeVectors
from graphmem.frontends.onnx.value_types import constant_tensor, int_values

_MAX_TARGET = 16  # entries of a reshape target or repeats vector read
_TILE_PRODUCERS = frozenset({"Unsqueeze", "Constant"})


def expand_tiles(model: onnx.ModelProto,
                 index: GraphIndex | None = None) -> dict[str, onnx.NodeProto]:
    """Turn each Tile of `model` whose repeated axes an Unsqueeze just added into an Expand by
    the same repeats, in place; returns the Tiles by their output's name (for restore).
    `index`: the graph's (graph_index.py), where the caller has it: the Tiles and the
    producers are read from it instead of a walk, and it is told of the Expands."""
    graph = model.graph
    tiles: list[onnx.NodeProto] = []
    # the only producers read: Unsqueezes (_unsqueezed_axes) and the Constants of repeats and
    # axes (int_constants), by their first output
    producer: Mapping[str, onnx.NodeProto]
    if index is not None:
        tiles = [node for node in index.nodes("Tile") if _tiles(node)]
        producer = _FirstOutputs(index.producer)
    else:
        walked: dict[str, onnx.NodeProto] = {}
        for node in graph.node:
            op_type = node.op_type
            if op_type == "Tile":
                if _tiles(node):
                    tiles.append(node)
            elif op_type in _TILE_PRODUCERS and node.output and node.output[0]:
                walked[node.output[0]] = node
        producer = walked
    if not tiles:
        return {}
    # only the repeats and the Unsqueeze axes are read (a decoder has thousands of others)
    sources = [producer.get(tile.input[0]) for tile in tiles]
    wanted = {tile.input[1] for tile in tiles}
    wanted.update(name for source in sources if source is not None for name in source.input[1:])
    constants = int_constants(graph, wanted, producer,
                              None if index is None else index.initializer)
    replaced: dict[str, onnx.NodeProto] = {}
    for node in tiles:
        repeats = constants.get(node.input[1])
        added = _unsqueezed_axes(producer.get(node.input[0]), constants)
        if repeats is None or added is None or any(r < 1 for r in repeats):
            continue
        if all(axis in added for axis, r in enumerate(repeats) if r != 1):
            original = onnx.NodeProto()
            original.CopyFrom(node)
            replaced[node.output[0]] = original
            node.op_type = "Expand"
    if index is not None and replaced:
        tiles_at = zip(index.positions["Tile"], index.nodes("Tile"), strict=True)
        index.retyped({p: "Tile" for p, node in tiles_at if node.op_type == "Expand"})
    return replaced


def _tiles(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx") and len(node.input) == 2


class _FirstOutputs(Mapping[str, onnx.NodeProto]):
    """The Unsqueeze and Constant nodes of a graph's producers (graph_index.py), each by its
    first output only: what expand_tiles's walk maps."""

    def __init__(self, producer: Mapping[str, onnx.NodeProto]) -> None:
        self._producer = producer

    def __getitem__(self, name: str) -> onnx.NodeProto:
        node = self._producer[name]
        if node.op_type not in _TILE_PRODUCERS or not name or node.output[0] != name:
            raise KeyError(name)
        return node

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._producer if name in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _unsqueezed_axes(node: onnx.NodeProto | None,
                     constants: dict[str, list[int]]) -> set[int] | None:
    """The axes an Unsqueeze adds (nonnegative, from its input or attribute), else None."""
    if node is None or node.op_type != "Unsqueeze" or node.domain not in ("", "ai.onnx"):
        return None
    axes = constants.get(node.input[1]) if len(node.input) > 1 else next(
        (list(a.ints) for a in node.attribute if a.name == "axes"), None)
    return set(axes) if axes is not None and all(a >= 0 for a in axes) else None


def reshape_dims(graph: onnx.GraphProto, inferred: onnx.GraphProto,
                 index: GraphIndex | None = None,
                 types: Mapping[str, onnx.ValueInfoProto] | None = None
                 ) -> list[onnx.ValueInfoProto]:
    """Each Reshape output onnx left unknown whose input it typed, typed by the rule above;
    `types`: `inferred`'s types by name where the caller has them (read only)."""
    if types is None:
        types = {v.name: v for v in (*inferred.input, *inferred.value_info, *inferred.output)}
    index = index or GraphIndex(graph)
    known = index.known
    nodes = [n for n in index.nodes("Reshape") if n.domain in ("", "ai.onnx")
             and len(n.input) == 2 and not known(types.get(n.output[0]))
             and known(types.get(n.input[0]))]
    if not nodes:
        return []
    constants = int_constants(graph, {n.input[1] for n in nodes}, index.producer,
                              index.initializer)
    # a target computed from shapes (shape_vectors.py)
    vectors = ShapeVectors(graph, types, index)
    typed = []
    for node in nodes:
        source = types[node.input[0]]
        numbers = constants.get(node.input[1])
        target = list[Dim](numbers) if numbers is not None else vectors.target(node.input[1])
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param
                for d in source.type.tensor_type.shape.dim]
        shape = _reshaped(node, dims, target) if target is not None else None
        if shape is not None:
            typed.append(helper.make_tensor_value_info(
                node.output[0], source.type.tensor_type.elem_type, shape))
    return typed


def _reshaped(node: onnx.NodeProto, dims: list[Dim], target: list[Dim]) -> list[Dim] | None:
    if any(a.name == "allowzero" and a.i for a in node.attribute) or target.count(-1) != 1:
        return None
    shape: list[Dim] = []
    for axis, entry in enumerate(target):
        if isinstance(entry, str):  # a dim read from a shape: the rules' symbol for it
            shape.append(entry)
        elif entry == 0 and axis < len(dims):
            shape.append(dims[axis])
        elif entry > 0 or entry == -1:
            shape.append(entry)
        else:
            return None
    quotient = _divided(dims, [d for d in shape if d != -1])
    if quotient is None:
        return None
    shape[shape.index(-1)] = quotient
    return shape


def _divided(numerator: list[Dim], denominator: list[Dim]) -> Dim | None:
    """prod(numerator) / prod(denominator) where it is a number or one dim name, else None."""
    (top, names), (bottom, cancelled) = _product(numerator), _product(denominator)
    if bottom == 0 or top % bottom or cancelled - names:
        return None
    left = names - cancelled
    if not left:
        return top // bottom
    if top == bottom and left.total() == 1:
        return next(iter(left))
    return None


def _product(dims: list[Dim]) -> tuple[int, Counter[str]]:
    number, names = 1, Counter[str]()
    for dim in dims:
        if isinstance(dim, int):
            number *= dim
        else:
            names[dim] += 1
    return number, names


def int_constants(graph: onnx.GraphProto, wanted: set[str] | None = None,
                  producer: Mapping[str, onnx.NodeProto] | None = None,
                  initializers: Mapping[str, onnx.TensorProto] | None = None
                  ) -> dict[str, list[int]]:
    """Small 1-D int64 initializers and Constant nodes (those in `wanted`, if given; their
    Constant nodes found through `producer`, the graph's, and the initializers through
    `initializers`, the graph's by name, where given); a Constant's value over an
    initializer's of the same name."""
    if wanted is not None and initializers is not None:
        tensors = [(name, initializers[name]) for name in wanted if name in initializers]
    else:
        tensors = [(t.name, t) for t in graph.initializer if wanted is None or t.name in wanted]
    nodes = graph.node if wanted is None or producer is None else [
        node for name in wanted if (node := producer.get(name)) is not None]
    tensors.extend((n.output[0], t) for n in nodes
                   if n.op_type == "Constant" and n.output
                   and (wanted is None or n.output[0] in wanted)
                   and (t := constant_tensor(n)) is not None)  # value or value_ints
    values: dict[str, list[int]] = {}
    for name, tensor in tensors:
        if tensor.data_type == onnx.TensorProto.INT64 and len(tensor.dims) == 1 \
                and tensor.dims[0] <= _MAX_TARGET \
                and tensor.data_location != onnx.TensorProto.EXTERNAL:
            decoded = int_values(tensor)  # None: data of the wrong size, the engines will say so
            if decoded is not None:
                values[name] = decoded
    return values
