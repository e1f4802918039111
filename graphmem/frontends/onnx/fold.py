"""Fold the small integer computations of an ONNX graph into constants, for shape inference.

TorchScript exports compute shapes with chains of tiny integer ops on constants (nn.
MultiheadAttention: `Mod(Constant, Constant) -> Reshape -> Slice(Shape(x), ...) -> Concat ->
Reshape`). onnxruntime's symbolic inference has no rule that evaluates `Mod`, so the slice's
length, the Concat's and the Reshape's output shape stay unknown, and with them every shape
downstream. Evaluating such nodes once with onnx's reference runtime, on inputs that are
already constants, hands the inference engines literal values instead.

Only a copy used for inference is folded: the graph graphmem analyses keeps the model's own
nodes (`restore_nodes`).
"""

from __future__ import annotations

import heapq
import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphmem.frontends.onnx.graph_index import GraphIndex
from graphmem.frontends.onnx.untrusted import has_inline_data, tensor_numel

# ops that compute shapes and indices; all cheap and deterministic
FOLDABLE_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Max", "Min", "Reshape", "Concat",
    "Unsqueeze", "Squeeze", "Cast", "Gather", "Slice", "Range", "Equal", "Less", "Greater",
    "Not", "Where", "Identity", "Floor", "Ceil", "Sqrt", "Transpose",
})
MAX_FOLDED_ELEMENTS = 64  # shape vectors and scalars, never real tensors
MAX_FOLDED_RANK = 8  # (numel alone would multiply any number of dims first)
_SHAPE_READERS = frozenset({"Shape", "Size", "Gather"})  # what _evaluate_shape folds
_DECODED_KEY_BYTES = 1024  # Constants above this are decoded each time (none is folded)


# A value's dims where shape inference knows them as numbers (None: symbolic or unknown).
StaticDims = Mapping[str, tuple[int | None, ...]]


def fold_constants(model: onnx.ModelProto, shapes: StaticDims | None = None,
                   index: GraphIndex | None = None) -> dict[str, onnx.NodeProto]:
    """Replace foldable nodes of `model` (in place) by Constant nodes with the same outputs;
    returns the replaced nodes by their first output's name. `index`: the graph's
    (graph_index.py), told which nodes became Constants.

    With `shapes` (what a first inference found), `Shape(x)` of an x whose dims are numbers
    folds too, and so does `Gather(Shape(x), i)` where dim i is a number though others are
    symbolic (a decoder's `x.size(-1) // 2` for rotate_half: 64, whatever the sequence)."""
    if index is None:
        return _fold(model, shapes, refolding=False)
    folding = _Folding(model, shapes, index.initializer)
    folded: dict[int, str] = {}  # position: the op type it had
    for position, node in enumerate(model.graph.node):
        op_type = node.op_type
        if folding.visit(node, refolding=False):
            folded[position] = op_type
    index.retyped(folded)
    return folding.replaced


def refold_constants(model: onnx.ModelProto, shapes: StaticDims,
                     index: GraphIndex | None = None) -> dict[str, onnx.NodeProto]:
    """fold_constants with `shapes`, on a model fold_constants already folded: a node can fold
    now only if it reads a shape (Shape, Size, Gather of a shape vector) or a value folded in
    this call, since every other node's inputs are what they were then and folding is
    deterministic; only those are evaluated (a decoder has thousands of others). `index`:
    the graph's (graph_index.py), where the caller has it: only those nodes are visited, in
    the graph's order, instead of every node; it is told which nodes became Constants."""
    if index is None:
        return _fold(model, shapes, refolding=True)
    folding = _Folding(model, shapes, index.initializer)
    nodes = model.graph.node
    constants = index.positions.get("Constant", [])
    pending = sorted(p for op in _SHAPE_READERS for p in index.positions.get(op, ()))
    queued, registered = set(pending), 0
    folded: dict[int, str] = {}  # position: the op type it had
    while pending:
        position = heapq.heappop(pending)
        # the Constant nodes before it, registered as the walk over every node does
        while registered < len(constants) and constants[registered] < position:
            folding.visit(nodes[constants[registered]], refolding=True)
            registered += 1
        node = nodes[position]
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            continue  # registered above when a node after it is visited
        op_type = node.op_type
        if not folding.visit(node, refolding=True):
            continue
        folded[position] = op_type
        for reader in index.consumers_of(node.output[0]):
            if reader > position and reader not in queued:  # what the walk visits later
                queued.add(reader)
                heapq.heappush(pending, reader)
    index.retyped(folded)
    return folding.replaced


def _fold(model: onnx.ModelProto, shapes: StaticDims | None,
          refolding: bool) -> dict[str, onnx.NodeProto]:
    folding = _Folding(model, shapes)
    for node in model.graph.node:
        folding.visit(node, refolding)
    return folding.replaced


class _Folding:
    """One fold's state: the values known so far, what it replaced."""

    def __init__(self, model: onnx.ModelProto, shapes: StaticDims | None,
                 initializers: Mapping[str, onnx.TensorProto] | None = None) -> None:
        self.known = _KnownValues(model.graph, initializers)
        self.shapes = shapes
        self.partial: dict[str, tuple[int | None, ...]] = {}  # shape vectors, some dims known
        self.replaced: dict[str, onnx.NodeProto] = {}
        self.fresh: set[str] = set()  # values folded in this call
        self.opset = default_opset(model) or 17  # a model without one still folds
        self.tensors: dict[tuple[str, tuple[int, ...], bytes], onnx.TensorProto] = {}

    def visit(self, node: onnx.NodeProto, refolding: bool) -> bool:
        """Fold `node` in place where its values are known; whether it was."""
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            self.known.add_constant(node)
            return False
        values = None
        if not refolding or not self.fresh.isdisjoint(node.input):
            values = _evaluate(node, self.known, self.opset)
        if values is None and self.shapes is not None:
            values = _evaluate_shape(node, self.known, self.partial, self.shapes, self.opset)
        if values is None:
            return False
        self.fresh.update(node.output)
        for name, value in zip(node.output, values, strict=True):
            self.known[name] = value
        original = onnx.NodeProto()
        original.CopyFrom(node)
        self.replaced[node.output[0]] = original
        _make_constant(node, values[0], self.tensors)
        return True


def _make_constant(node: onnx.NodeProto, value: np.ndarray,
                   tensors: dict[tuple[str, tuple[int, ...], bytes], onnx.TensorProto]) -> None:
    """Turn `node` into the Constant node of its first output holding `value`, in place: what
    `helper.make_node("Constant", [], [output], name=node.name, value=tensor)` makes.
    `tensors`: numpy_helper.from_array's tensors by numeric dtype, shape and bytes, which
    are all it reads (the dynamo decoder folds 3,905 nodes to a few hundred values)."""
    name, output = node.name, node.output[0]
    node.Clear()
    node.op_type = "Constant"
    if name:  # as make_node: an empty name is left unset
        node.name = name
    node.output.append(output)
    attribute = node.attribute.add()
    attribute.name = "value"
    if value.dtype.kind not in "biufc":  # strings, objects: their bytes are not their value
        attribute.t.CopyFrom(numpy_helper.from_array(value))
    else:
        key = (value.dtype.str, value.shape, value.tobytes())
        tensor = tensors.get(key)
        if tensor is None:
            tensor = tensors[key] = numpy_helper.from_array(value)
        attribute.t.CopyFrom(tensor)
    attribute.type = onnx.AttributeProto.TENSOR


def restore_nodes(model: onnx.ModelProto, replaced: dict[str, onnx.NodeProto],
                  positions: Mapping[str, int] | None = None) -> None:
    """Put the model's own nodes back in place of the Constant nodes fold_constants made (and
    of the nodes others changed for inference: repeat_dims.py's Expands), by output name.
    `positions`: each value's producer's position in the graph as indexed (graph_index.py),
    where the caller has them: `model`'s nodes are read there, and walked only where one is
    not the node making that name first (onnxruntime's rules may order the nodes anew; a
    valid graph has one producer a name, validation.py)."""
    if not replaced:  # nothing folded (10^5 Adds of inputs): no walk
        return
    if positions is not None and _restored_at(model.graph.node, replaced, positions):
        return
    for node in model.graph.node:
        if node.output and node.output[0] in replaced:
            node.CopyFrom(replaced[node.output[0]])


def _restored_at(nodes: Sequence[onnx.NodeProto], replaced: Mapping[str, onnx.NodeProto],
                 positions: Mapping[str, int]) -> bool:
    """restore_nodes at `positions`, where each names its node's first output; else False
    and nothing restored."""
    found = []
    for name, original in replaced.items():
        position = positions.get(name)
        if position is None or position >= len(nodes):
            return False
        node = nodes[position]
        if not node.output or node.output[0] != name:
            return False
        found.append((node, original))
    for node, original in found:
        node.CopyFrom(original)
    return True


class _KnownValues:
    """Values known so far, by name: a small initializer's or a Constant node's value decoded
    only when a foldable node reads it (a decoder has thousands of each that no foldable node
    reads; decoding every one was most of the folding time, and folding runs twice)."""

    def __init__(self, graph: onnx.GraphProto,
                 initializers: Mapping[str, onnx.TensorProto] | None = None) -> None:
        self.values: dict[str, np.ndarray] = {}
        # the graph's initializers by name (a copy: taken out as they are decoded)
        self.initializers = {tensor.name: tensor for tensor in graph.initializer} \
            if initializers is None else dict(initializers)
        self.constants: dict[str, onnx.NodeProto] = {}
        # decoded values by the Constant's attribute bytes: a decoder's layers hold the same
        # few (axes [0], [1]...) thousands of times
        self.decoded: dict[bytes, np.ndarray | None] = {}

    def add_constant(self, node: onnx.NodeProto) -> None:
        if node.output:
            self.constants[node.output[0]] = node

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self.constants.pop(name, None)
        self.initializers.pop(name, None)
        self.values[name] = value

    def get(self, name: str) -> np.ndarray | None:
        node = self.constants.pop(name, None)
        if node is not None:  # decoded now; a value it cannot give leaves what was known
            value = self._decode(node)
            if value is not None:
                self.initializers.pop(name, None)
                self.values[name] = value
        tensor = self.initializers.pop(name, None)
        if tensor is not None and _small_known(tensor):
            self.values[name] = numpy_helper.to_array(tensor)
        return self.values.get(name)

    def _decode(self, node: onnx.NodeProto) -> np.ndarray | None:
        """_constant_node_value, remembered for a node of one small attribute (its only
        input); each caller gets its own array, writeable as the decoded one is."""
        if len(node.attribute) != 1 or node.attribute[0].ByteSize() > _DECODED_KEY_BYTES:
            return _constant_node_value(node)
        key = node.attribute[0].SerializeToString()
        if key not in self.decoded:
            self.decoded[key] = _constant_node_value(node)
        decoded = self.decoded[key]
        if decoded is None:
            return None
        value = decoded.copy()
        value.flags.writeable = decoded.flags.writeable
        return value


def _evaluate(node: onnx.NodeProto, known: _KnownValues,
              opset: int) -> list[np.ndarray] | None:
    if node.domain not in ("", "ai.onnx") or node.op_type not in FOLDABLE_OPS:
        return None
    if len(node.output) != 1:
        return None
    feeds: dict[str, np.ndarray] = {}
    for name in node.input:
        if name:
            value = known.get(name)
            if value is None:
                return None
            feeds[name] = value
    if any(value.size > MAX_FOLDED_ELEMENTS for value in feeds.values()):
        return None
    if node.op_type == "Range" and not _small_range(*(feeds[n] for n in node.input if n)):
        return None  # its length comes from values: refuse before numpy allocates it
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")  # an overflowing int product is the model's
            values = _run_one(node, feeds, opset)
    except Exception:  # noqa: BLE001 - an op the reference runtime refuses stays as it is
        return None
    if any(v.size > MAX_FOLDED_ELEMENTS for v in values):
        return None
    return values


def _evaluate_shape(node: onnx.NodeProto, known: _KnownValues,
                    partial: dict[str, tuple[int | None, ...]], shapes: StaticDims,
                    opset: int) -> list[np.ndarray] | None:
    """Shape, Size and Gather from a shape vector, where the dims they give are numbers."""
    if node.op_type not in _SHAPE_READERS or node.domain not in ("", "ai.onnx") \
            or len(node.output) != 1 or not node.input:
        return None
    if node.op_type in ("Shape", "Size"):
        dims = shapes.get(node.input[0])
        if dims is None:
            return None
        if node.op_type == "Size":
            bound = [d for d in dims if d is not None]
            return [np.array(math.prod(bound), np.int64)] if len(bound) == len(dims) else None
        dims = _shape_range(node, dims, opset)
        if None in dims:
            partial[node.output[0]] = dims
            return None
        return [np.array(dims, np.int64)]
    if node.op_type == "Gather" and len(node.input) == 2 and node.input[0] in partial:
        return _gather_dims(node, partial[node.input[0]], known.get(node.input[1]))
    return None


def _shape_range(node: onnx.NodeProto, dims: tuple[int | None, ...],
                 opset: int) -> tuple[int | None, ...]:
    """Shape's `start`/`end` (opset 15): a slice of the dims, negative from the end."""
    if opset < 15:
        return dims
    attributes = {a.name: a.i for a in node.attribute if a.type == onnx.AttributeProto.INT}
    rank = len(dims)
    start, end = attributes.get("start", 0), attributes.get("end", rank)
    start, end = (max(0, min(rank, v + rank if v < 0 else v)) for v in (start, end))
    return dims[start:end]


def _gather_dims(node: onnx.NodeProto, dims: tuple[int | None, ...],
                 indices: np.ndarray | None) -> list[np.ndarray] | None:
    """Gather(shape vector, indices) along axis 0, where every picked dim is a number."""
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    if indices is None or axis not in (0, -1) or indices.dtype.kind not in "iu":
        return None
    rank = len(dims)
    if indices.size > MAX_FOLDED_ELEMENTS or not all(-rank <= int(i) < rank for i in indices.flat):
        return None
    picked = [dims[int(i)] for i in indices.flat]
    if None in picked:
        return None
    return [np.array(picked, np.int64).reshape(indices.shape)]


def _small_range(*operands: np.ndarray) -> bool:
    """Range(start, limit, delta) yields at most MAX_FOLDED_ELEMENTS values."""
    if len(operands) != 3 or any(o.size != 1 for o in operands):
        return False
    start, limit, delta = (float(o.reshape(())) for o in operands)
    if not all(np.isfinite((start, limit, delta))) or delta == 0:
        return False
    return max(np.ceil((limit - start) / delta), 0) <= MAX_FOLDED_ELEMENTS


def _run_one(node: onnx.NodeProto, known: dict[str, np.ndarray],
             opset: int) -> list[np.ndarray]:
    fast = _run_simple(node, known, opset)
    if fast is None:
        fast = _run_integer_division(node, known)
    if fast is not None:
        return [fast]
    key = _signature(node, known, opset)
    remembered = _REFERENCE_RESULTS.get(key)
    if remembered is None:
        remembered = _run_reference(node, known, opset)
        if len(_REFERENCE_RESULTS) >= _MAX_REMEMBERED:
            _REFERENCE_RESULTS.clear()
        _REFERENCE_RESULTS[key] = remembered
    return [value.copy() for value in remembered]  # each caller its own, as the runtime's


# The reference runtime's results by node signature (_signature): a decoder's layers fold the
# same few computations on the same constants once per layer (the dynamo export: 2,103
# evaluators built for a few dozen signatures). The folded values are at most
# MAX_FOLDED_ELEMENTS elements.
_REFERENCE_RESULTS: dict[tuple[object, ...], list[np.ndarray]] = {}
_MAX_REMEMBERED = 4096


def _signature(node: onnx.NodeProto, known: Mapping[str, np.ndarray],
               opset: int) -> tuple[object, ...]:
    """What the reference runtime's result depends on: the op, its attributes, the opset, and
    each input slot's value (dtype, shape, bytes), an omitted optional input as None."""
    values = tuple((known[name].dtype.str, known[name].shape, known[name].tobytes())
                   if name else None for name in node.input)
    attributes = tuple(a.SerializeToString() for a in node.attribute)
    return node.op_type, node.domain, opset, len(node.output), attributes, values


def _run_reference(node: onnx.NodeProto, known: Mapping[str, np.ndarray],
                   opset: int) -> list[np.ndarray]:
    inputs = [name for name in node.input if name]
    graph = helper.make_graph(
        [node], "fold",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(known[name].dtype),
                                       known[name].shape) for name in inputs],
        [helper.make_empty_tensor_value_info(node.output[0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    from onnx.reference import ReferenceEvaluator  # 0.1 s to import: only when a node folds

    feeds = {name: known[name] for name in inputs}
    return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, feeds)]


_INTEGER_TYPES: dict[int, type[np.integer]] = {
    onnx.TensorProto.INT8: np.int8, onnx.TensorProto.INT16: np.int16,
    onnx.TensorProto.INT32: np.int32, onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.UINT16: np.uint16,
    onnx.TensorProto.UINT32: np.uint32, onnx.TensorProto.UINT64: np.uint64,
}
_INTEGER_ARITHMETIC = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}


def _run_simple(node: onnx.NodeProto, known: Mapping[str, np.ndarray],
                opset: int) -> np.ndarray | None:
    """The few ops a decoder's shape arithmetic folds by the thousand (Unsqueeze of a dim,
    integer Cast, integer Add/Sub/Mul), computed with numpy as onnx's reference runtime
    computes them (tests/test_onnx_fold.py checks each against it); None: ask the reference
    runtime, which builds an evaluator per node (0.3 ms), and imports onnx.reference (0.1 s:
    an exporter's Identity of a small weight, of any dtype, is its copy here)."""
    if node.op_type == "Identity" and len(node.input) == 1 and node.input[0] in known:
        return known[node.input[0]].copy()
    inputs = [known[name] for name in node.input if name]
    if len(inputs) != len(node.input) or any(v.dtype.kind not in "iu" for v in inputs):
        return None
    attributes = {a.name: a for a in node.attribute}
    try:
        if node.op_type == "Unsqueeze":
            axes = inputs[1] if opset >= 13 and len(inputs) == 2 else None
            if opset < 13 and len(inputs) == 1 and "axes" in attributes:
                axes = np.asarray(attributes["axes"].ints, np.int64)
            if axes is None or axes.ndim > 1:
                return None
            return np.expand_dims(inputs[0], tuple(int(a) for a in axes.flat))
        if node.op_type == "Cast" and len(inputs) == 1 and "to" in attributes:
            target = _INTEGER_TYPES.get(attributes["to"].i)
            return None if target is None else inputs[0].astype(target)
        arithmetic = _INTEGER_ARITHMETIC.get(node.op_type)
        if arithmetic is not None and len(inputs) == 2 and inputs[0].dtype == inputs[1].dtype:
            return np.asarray(arithmetic(inputs[0], inputs[1]), inputs[0].dtype)
    except (ValueError, IndexError, TypeError):  # numpy's AxisError is both of the first
        return None  # the reference runtime says what it makes of it
    return None


def _run_integer_division(node: onnx.NodeProto,
                          known: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """Div of two integer tensors of one dtype (a decoder's `head_dim // 2`, once per layer),
    computed as onnx's reference runtime computes it (onnx/reference/ops/op_div.py: the
    quotient truncated toward zero, C-style); None for anything else."""
    if node.op_type != "Div" or len(node.input) != 2 or not all(node.input) or node.attribute:
        return None  # (opset 6's `broadcast` and `axis` attributes: the reference decides)
    x, y = known[node.input[0]], known[node.input[1]]
    if x.dtype != y.dtype or x.dtype.kind not in "iu":
        return None
    try:
        quotient = np.floor_divide(x, y)
        remainder = np.remainder(x, y)
    except ValueError:  # shapes that do not broadcast: the reference runtime refuses them
        return None
    needs_adjust = (remainder != 0) & ((x < 0) ^ (y < 0))
    return np.asarray(quotient + needs_adjust.astype(quotient.dtype))


def _constant_values(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The small initializers whose value the file holds; data-less (external or dropped) or
    wrongly sized ones are unknown values, never read."""
    return {tensor.name: numpy_helper.to_array(tensor) for tensor in graph.initializer
            if _small_known(tensor)}


def _constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    for attribute in node.attribute:
        tensor = attribute.type == onnx.AttributeProto.TENSOR
        if attribute.name == "value" and tensor:
            return numpy_helper.to_array(attribute.t) if _small_known(attribute.t) else None
        if attribute.name in ("value_int", "value_ints"):
            return np.asarray(helper.get_attribute_value(attribute), dtype=np.int64)
    return None


def _small_known(tensor: onnx.TensorProto) -> bool:
    """A shape-sized tensor holding its own value (onnx_untrusted.has_inline_data: never an
    external file, never data of the wrong size)."""
    if tensor.data_type == onnx.TensorProto.STRING or len(tensor.dims) > MAX_FOLDED_RANK:
        return False
    return tensor_numel(tensor) <= MAX_FOLDED_ELEMENTS and has_inline_data(tensor)


def default_opset(model: onnx.ModelProto) -> int:
    """The version of the default ("" / ai.onnx) domain the model imports; 0 when none."""
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
