"""Dims the data sets within an input's extent: a Slice of data starts/ends, and its kin.

Some ops take the length of an output axis from the data, yet never beyond what they read:
a Slice whose starts, ends or steps are tensors computed at run time (an EmbeddingBag's
`ids[offsets[i]:offsets[i+1]]`, as the TorchScript exporter writes it in a Loop body) keeps
at most the input's extent along each axis; shape inference can only name a new dim for it
(onnxruntime: `Slice_0_6_o0__d0`). `extent_bounds` finds every such dim, in control-flow
bodies too, and its bound, what the runtime models plan it at (data_bounds.py), as they do a
NonZero's count. The rule is the op's, from the ONNX spec, never an exporter's names:

| op | output axis the data sets | at most |
|---|---|---|
| Slice (starts/ends/axes/steps tensors) | any axis | the input's extent there |
| Split (a `split` tensor) | `axis` | the input's extent there |
| TopK (a computed K) | `axis` of both outputs | X's extent there |
| Compress | `axis` (none: the flat output) | X's extent there (none: X's elements) |
| Unique | Y along `axis`, indices and counts (none: all flat) | X's extent (none: elements) |
| NonZero | n of [rank, n] | the input's elements |
| NonMaxSuppression | n of [n, 3] | batches x classes x boxes |
| Loop (a `cond` that may stop it early) | a scan output's first axis | the trip count `M` |

A dim is taken only where it is a lone symbol the node's inputs do not have (new at that
node): a dim written in terms of the inputs' is shape inference's, not the data's. Steps
are not read (graphmem imports no constant's values): a stepped slice is planned at the
input's whole extent, an upper bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from graphmem.core.ir import Graph, Node, Value
from graphmem.core.symbolic import SymInt
from graphmem.ops.control_flow import BODY_SCRATCH_SUFFIX, ControlFlowNode, own_input_count
from graphmem.passes.dims import bare_dim

# op type -> whether every output axis may be the data's (else only the op's `axis`)
_ANY_AXIS = frozenset({"Slice"})
_ALONG_AXIS = {"Split": 0, "TopK": -1, "Compress": None, "Unique": None}
EXTENT_BOUNDED_OPS = frozenset({*_ANY_AXIS, *_ALONG_AXIS, "NonZero", "NonMaxSuppression",
                                "Loop"})


@dataclass(frozen=True)
class ExtentDim:
    """One dim the data sets at `node` (op `op_type`), axis `axis` of its output `tensor`, at
    most `bound` elements: a product of the extents in `extents` (a dim's formula each;
    several for elements, NMS's count)."""

    dim: str
    node: str
    op_type: str
    extents: tuple[SymInt, ...]
    tensor: str = ""
    axis: int = 0

    def bound(self, dims: Mapping[str, int]) -> int | None:
        """The bound at `dims`; None where an extent is not a number there."""
        total = 1
        for extent in self.extents:
            value = extent.bind(dims)
            if not value.is_constant:
                return None
            total *= int(value)
        return total


def extent_dims(graph: Graph) -> tuple[ExtentDim, ...]:
    """Every dim an op of EXTENT_BOUNDED_OPS makes new, in graph order, bodies in place."""
    # most graphs have none: their Slices' outputs keep their inputs' dims or the graph's
    # own (`seq`), found by looking at those ops alone (a 22k-node decoder's 1,443 Slices:
    # 9 ms); only where another is left is every dim met followed (there: about 20 ms)
    inputs = set(graph.input_dims_in_order())
    if not any(map(_MakesNew(inputs), _extent_nodes(graph))):
        return ()
    return tuple(_found(graph, set()))


class _MakesNew:
    """Whether a node makes a dim not among `seen` (`_node_dims`); a Slice's answer found once
    per its tensors' shapes (a decoder's 1,443 Slices hold a few dozen shape tuples, shared
    by identity: the values keep them alive meanwhile), read from those alone."""

    def __init__(self, seen: set[str]) -> None:
        self.seen = seen
        self.slices: dict[tuple[int, ...], bool] = {}

    def __call__(self, node: Node) -> bool:
        if node.op_type not in _ANY_AXIS:
            return next(_node_dims(node, self.seen), None) is not None
        key = (*(id(v.shape) if v is not None else 0 for v in node.inputs),
               -1, *(id(v.shape) for v in node.outputs))
        found = self.slices.get(key)
        if found is None:
            found = self.slices[key] = next(_node_dims(node, self.seen), None) is not None
        return found


def _extent_nodes(graph: Graph) -> Iterator[Node]:
    """The nodes of EXTENT_BOUNDED_OPS, in bodies too."""
    for node in graph.nodes:
        if node.op_type in EXTENT_BOUNDED_OPS and node.domain in ("", "ai.onnx"):
            yield node
        if isinstance(node, ControlFlowNode):
            for _, body in node.bodies:
                yield from _extent_nodes(body)


def extent_bounds(found: tuple[ExtentDim, ...], dims: Mapping[str, int]
                  ) -> tuple[dict[str, int], tuple[ExtentDim, ...]]:
    """({dim: its bound} at `dims`, the ExtentDims bound) for the dims not in `dims`; in
    order, so a bound found sizes the extents after it (a Slice of a Slice). The first
    bound of a dim named twice is kept: shape inference named them equal."""
    known = dict(dims)
    bound: dict[str, int] = {}
    used: list[ExtentDim] = []
    for item in found:
        if item.dim in known:
            continue
        size = item.bound(known)
        if size is None:
            continue
        known[item.dim] = bound[item.dim] = size
        used.append(item)
    return bound, tuple(used)


def _found(graph: Graph, seen: set[str]) -> Iterator[ExtentDim]:
    """The new dims of `graph`'s nodes; `seen`: every dim met so far (the graph's inputs' and
    constants', then each node's outputs'), so a dim is new where it is first met, and the
    graph's own input dims (`seq` a Slice's ends read from a Shape) never are."""
    seen |= _symbols(graph.inputs)
    seen |= _symbols(v for v in graph.values.values() if v.producer is None)
    for node in graph.nodes:
        if node.op_type in EXTENT_BOUNDED_OPS and node.domain in ("", "ai.onnx"):
            yield from _node_dims(node, seen)
        if isinstance(node, ControlFlowNode):
            for _, body in node.bodies:
                yield from _found(body, seen)
        seen |= _symbols(node.outputs)


def _node_dims(node: Node, seen: set[str]) -> Iterator[ExtentDim]:
    """The dims `node` makes new, each with the extents that bound it."""
    x = node.input(0)
    if x is None or x.shape is None or not node.outputs:
        return
    taken: set[str] | None = None  # the inputs' dims, found where a candidate needs them
    for value, axis, extents in _candidates(node, x.shape):
        shape = value.shape
        dim = bare_dim(shape[axis]) if shape is not None and -len(shape) <= axis < len(
            shape) else None
        if dim is None or dim in seen:
            continue
        taken = _symbols(node.present_inputs) if taken is None else taken
        known = tuple(extent for extent in extents if extent is not None)
        if dim not in taken and len(known) == len(extents):
            yield ExtentDim(dim, node.name, node.op_type, known, value.name, axis)


Candidate = tuple[Value, int, tuple[SymInt | None, ...]]


def _candidates(node: Node, shape: tuple[SymInt | None, ...]) -> Iterator[Candidate]:
    """(output, axis, extents bounding it) for each output axis the op lets the data set."""
    op, rank = node.op_type, len(shape)
    if op in _ANY_AXIS:
        out = node.outputs[0]
        if out.shape is not None and len(out.shape) == rank:
            yield from ((out, axis, (shape[axis],)) for axis in range(rank))
        return
    if op == "NonZero":
        yield node.outputs[0], 1, tuple(shape)
        return
    if op == "NonMaxSuppression":
        yield from _nms(node, shape)
        return
    if op == "Loop":  # each iteration adds one slice to a scan output: at most M of them
        if isinstance(node, ControlFlowNode) and node.trip_count is not None:
            trips = node.trip_count
            yield from ((out, 0, (trips,)) for out in _scan_outputs(node)
                        if out.shape and not out.name.endswith(BODY_SCRATCH_SUFFIX))
        return
    yield from _along_axis(node, shape)


def _along_axis(node: Node, shape: tuple[SymInt | None, ...]) -> Iterator[Candidate]:
    """Split, TopK, Compress, Unique: the op's `axis` (Compress and Unique without one: their
    flat outputs, over every element)."""
    op, rank = node.op_type, len(shape)
    axis = _axis(node, _ALONG_AXIS[op])
    if axis is None:
        outputs = node.outputs[:1] if op == "Compress" else _unique_counted(node)
        yield from ((out, 0, tuple(shape)) for out in outputs)
        return
    if not -rank <= axis < rank:
        return
    extent = shape[axis % rank]
    if op == "Unique":
        first = node.outputs[:1]
        yield from ((out, axis % rank, (extent,)) for out in first)
        yield from ((out, 0, (extent,)) for out in _unique_counted(node)[1:])
        return
    yield from ((out, axis % rank, (extent,)) for out in node.outputs)


def _scan_outputs(node: ControlFlowNode) -> list[Value]:
    """A Loop's scan outputs: those after its N loop-carried values (a carried value may
    grow by more than one slice an iteration), N its body's own inputs less the iteration
    number and condition."""
    if len(node.bodies) != 1:
        return []
    carried = own_input_count(node, node.bodies[0][1]) - 2
    return node.outputs[max(carried, 0):]


def _axis(node: Node, default: int | None) -> int | None:
    """The node's `axis` attribute, else `default` (None: no axis)."""
    if "axis" in node.attributes:
        return node.attr_int("axis", 0)
    return default


def _unique_counted(node: Node) -> list[Value]:
    """Unique's Y, indices and counts (not inverse_indices: one per input element)."""
    outputs = node.outputs
    return [outputs[i] for i in (0, 1, 3) if i < len(outputs)]


def _nms(node: Node, boxes: tuple[SymInt | None, ...]) -> Iterator[Candidate]:
    """selected_indices [n, 3]: at most one per (batch, class, box); boxes [B, N, 4] and
    scores [B, C, N]."""
    scores = node.input(1)
    if scores is None or scores.shape is None or len(scores.shape) != 3 or len(boxes) != 3:
        return
    yield node.outputs[0], 0, (scores.shape[0], scores.shape[1], boxes[1])


def _symbols(values: Iterable[Value]) -> set[str]:
    names: set[str] = set()
    for value in values:
        for dim in value.shape or ():
            if dim is not None:
                names |= dim.free_symbols()
    return names
