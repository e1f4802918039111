"""The importer's types of a graph of repeated layers, inferred for a few layers only.

The importer's inference (infer.py `import_types`) folds shape arithmetic on constants
(fold.py), turns Tiles of added axes into Expands (repeat_dims.py), then runs onnx's inference
with data propagation over the whole graph two or three times, with graphmem's rules between
the passes (fold.py's refold, kept_slices.py, seq_dims.py, repeat_dims.py, scalar_reshapes.py,
third_pass.py), reading every value's type back each time: on a decoder, the same layer
hundreds of times. Here all of that runs once on the model cut as plan_layers.py cuts it for
the planner (the nodes before the repeated layers, their first `INFERRED_LAYERS` layers, the
nodes after them reading the last of those), and every later layer takes the types of the
last inferred layer, value for value; the model's own nodes are never folded or turned.

Why that is the whole inference's answer. Each step of it types a node (or gives onnx a type
for it, or folds it) from the node's op and attributes, its inputs' types, the values data
propagation carries into it (0-D and 1-D tensors), the constants it reads, and (seq_dims.py's
broadcasts, third_pass.py's readers) whether some reader of its output is of a kind: all of
them the same, a layer on, where
- the nodes a period apart read and do the same (plan_layers.py `find_layer_run`); a value
  made before the layers by another op is read by name, the same in every layer, so its type
  and its propagated value are the same too, or is one of values of the same floating-point
  type too large for a value to be read of it (`_same_before`);
- what a layer reads from the layer before carries no propagated value (`_cross_reads`: a
  known rank of 2 or more) or one made in that layer from its types (Shape, Size) and
  constants, so it is known by the layer's types alone;
- the inferred layers' types are the same, value for value, byte for byte (the second, third
  and fourth layers: `_same_layers`; the first reads from the nodes before the layers, which
  may differ; the fourth is read by the nodes after the layers, as the last one is), with no
  dim onnx made up (`unk__N`: numbered in graph order, a made-up name would shift with the
  layers cut) anywhere in the cut's answer.
By induction each later layer reads, and so infers, what the last inferred layer did, and the
nodes after the layers read from the last layer what they read from the last inferred one
(plan_layers.py `cut_model`: nothing earlier). Where any of this fails, or the cut is not
typed by onnx alone (onnxruntime's rules would run on it), the caller infers the whole graph.
tests/test_layer_types.py checks the result against the whole inference on random layered
graphs, the samples, benchmarks/helper_llama.py's decoder and (slow) the exported decoders,
and that each check above refuses a graph it alone stands between and the wrong types.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate, compress

import onnx

from graphmem.frontends.onnx.fold import MAX_FOLDED_ELEMENTS
from graphmem.frontends.onnx.plan_layers import (
    INFERRED_LAYERS,
    OUTPUTS,
    LayerRun,
    cut_model,
    find_layer_run,
)
from graphmem.frontends.onnx.protobuf_wire import varint
from graphmem.frontends.onnx.value_types import JudgedInfos

GENERATED = b"unk__"
_FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                     onnx.TensorProto.BFLOAT16})
ONNX_ONLY = "onnx shape inference"  # infer.py's engine name where onnx typed every value
# the cut inferred (infer.py infer_types without the layers): the typed model, its engine
# and its judged value infos (None where onnx did not type every value)
CutInference = Callable[[onnx.ModelProto], tuple[onnx.ModelProto, str, JudgedInfos | None]]


def layered_types(model: onnx.ModelProto, infer: CutInference
                  ) -> tuple[onnx.ModelProto, JudgedInfos] | None:
    """`model` typed (every value's type as the whole inference gives it: module docstring,
    its value infos and outputs changed in place) and its value infos judged, from `infer` on
    the model cut to its first layers; None where that is not shown to be the same."""
    graph = model.graph
    if graph.sparse_initializer:
        return None
    named = frozenset(d.dim_param for v in graph.input for d in v.type.tensor_type.shape.dim
                      if d.dim_param)
    probed: dict[tuple[int, int], tuple[onnx.ModelProto, str, JudgedInfos | None]] = {}

    def probe(guess: LayerRun) -> bool:
        """The cut the node kinds show, inferred before the reads are compared (0.1 s at
        20,000 nodes): where onnxruntime's rules would run on it (the 80-layer Llama-3-70B
        graph's grouped-query Where), not cut; else kept for the run found, if the same."""
        cut = cut_model(model, guess)
        if cut is None:
            return True  # the run found decides
        probed[guess.first, guess.layers] = inferred = infer(cut)
        return inferred[1] == ONNX_ONLY

    run = find_layer_run(model, named, declared=False, probe=probe)
    if run is None or _outputs_cut(graph, run):
        return None
    found = probed.get((run.first, run.layers))
    if found is None:
        cut = cut_model(model, run)
        if cut is None:
            return None
        found = infer(cut)
    typed, engine, judged = found
    if engine != ONNX_ONLY or judged is None or any(GENERATED in key for key in judged.types) \
            or [v.name for v in typed.graph.output] != [v.name for v in graph.output] \
            or any(GENERATED in v.type.SerializeToString() for v in typed.graph.output):
        return None
    nodes = graph.node
    keys = judged.keys
    if not _same_before(nodes, run, keys) or not _cross_reads(nodes, run, keys) \
            or not _same_layers(nodes, run, keys):
        return None
    added = _extend(judged, run)
    graph.ClearField("value_info")
    graph.value_info.extend(typed.graph.value_info)
    graph.MergeFromString(_value_infos(added))  # the left-out layers' (a parse, not 10^4 adds)
    del graph.output[:]
    graph.output.extend(typed.graph.output)
    return model, judged


def _outputs_cut(graph: onnx.GraphProto, run: LayerRun) -> bool:
    """Whether a graph output is made by a layer the cut leaves out (its type would be onnx's
    merge of the declared one: not taken from the inferred layer)."""
    low, high = run.kept_end * OUTPUTS, run.run_end * OUTPUTS
    return any(low <= run.numbers.get(v.name, -1) < high for v in graph.output)


def _same_before(nodes: Sequence[onnx.NodeProto], run: LayerRun,
                 keys: Mapping[str, bytes]) -> bool:
    """Whether each place of the layers reading a value made before them by another op reads
    the same value in every layer, or values of the same floating-point type with more than
    `MAX_FOLDED_ELEMENTS` (or an unknown count of) elements (a TorchScript export's Identity
    copies of each layer's weights): data propagation carries integer tensors only, and fold.py
    evaluates none so large."""
    seen: dict[tuple[int, int], str] = {}
    alike: set[tuple[int, int]] = set()  # places reading other values, of one type
    for position, slot in run.before:
        if not run.first <= position < run.run_end:
            continue
        name = nodes[position].input[slot]
        place = ((position - run.first) % run.period, slot)
        other = seen.setdefault(place, name)
        if other == name:
            continue
        key = keys.get(name)
        if key is None or key != keys.get(other):
            return False
        if place not in alike:
            if not _large_float(key):
                return False
            alike.add(place)
    return True


def _large_float(key: bytes) -> bool:
    """A serialized tensor type of a floating-point element type, with more than
    `MAX_FOLDED_ELEMENTS` elements or dims not all numbers."""
    type_proto = onnx.TypeProto.FromString(key)
    if type_proto.WhichOneof("value") != "tensor_type":
        return False
    tensor_type = type_proto.tensor_type
    if tensor_type.elem_type not in _FLOATS or not tensor_type.HasField("shape"):
        return False
    dims = tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        return True
    return math.prod(d.dim_value for d in dims) > MAX_FOLDED_ELEMENTS


def _cross_reads(nodes: Sequence[onnx.NodeProto], run: LayerRun,
                 keys: Mapping[str, bytes]) -> bool:
    """Whether what the last inferred layer reads from the layer before it carries no value
    but one its types give: a tensor of a known rank of 2 or more (no value data propagation
    carries), or a value made in that layer from shapes (`_from_shapes`); nothing read from
    further back."""
    last = run.kept_end - run.period
    window = ((last - run.period) * OUTPUTS, last * OUTPUTS)
    numbers = run.numbers
    for position in range(last, run.kept_end):
        for name in nodes[position].input:
            number = numbers.get(name, -1)
            if number < run.start * OUTPUTS or number >= window[1]:
                continue  # made before the layers (read by name), or inside this layer
            if number < window[0]:
                return False
            key = keys.get(name)
            if (key is None or _rank(key) < 2) and not _from_shapes(name, nodes, run, window):
                return False
    return True


def _from_shapes(name: str, nodes: Sequence[onnx.NodeProto], run: LayerRun,
                 window: tuple[int, int]) -> bool:
    """Whether `name` is made in `window` (the numbers of a layer's values) from Constant
    nodes, initializers, graph inputs and the Shape or Size of values of that layer (or of
    values not made in the run): its value is then a function of that layer's types, the
    same a layer on."""
    numbers = run.numbers
    low, high = window
    pending, seen = [name], {name}
    while pending:
        number = numbers.get(pending.pop())
        if number is None:
            continue  # a graph input or an initializer (read alike: find_layer_run)
        node = nodes[number // OUTPUTS]
        if node.domain not in ("", "ai.onnx"):
            return False
        if node.op_type == "Constant":
            continue  # of the same bytes a layer on (find_layer_run)
        if not low <= number < high:
            return False
        if node.op_type in ("Shape", "Size"):
            source = numbers.get(node.input[0], -1)
            if run.start * OUTPUTS <= source < low:
                return False  # the type of a value further back in the run
            continue
        for read in node.input:
            if read and read not in seen:
                seen.add(read)
                pending.append(read)
    return True


def _rank(key: bytes) -> int:
    """The rank of a serialized tensor type (-1: none known)."""
    type_proto = onnx.TypeProto.FromString(key)
    if type_proto.WhichOneof("value") != "tensor_type" \
            or not type_proto.tensor_type.HasField("shape"):
        return -1
    return len(type_proto.tensor_type.shape.dim)


def _same_layers(nodes: Sequence[onnx.NodeProto], run: LayerRun,
                 keys: Mapping[str, bytes]) -> bool:
    """Whether the inferred layers after the first type each value as the one a period back
    (both untyped, or the same bytes)."""
    first, period = run.first, run.period
    for layer in range(2, INFERRED_LAYERS):
        for position in range(first + layer * period, first + (layer + 1) * period):
            earlier = nodes[position - period].output
            for name, other in zip(nodes[position].output, earlier, strict=True):
                if keys.get(name) != keys.get(other):
                    return False
    return True


def _extend(judged: JudgedInfos, run: LayerRun) -> list[tuple[str, bytes]]:
    """Each value a left-out layer makes typed as its place in the last inferred layer (none
    where that one is untyped), its verdict with it: the names read off `run.numbers` (in the
    nodes' order) at the layers' offsets, not from the nodes. Returns the (name, type) added."""
    last = run.kept_end - run.period
    offsets = [0, *accumulate(run.made)]
    names = list(run.numbers)
    template = names[offsets[last]:offsets[run.kept_end]]
    left_out = names[offsets[run.kept_end]:offsets[run.run_end]]
    repeats = len(left_out) // len(template) if template else 0
    keys, known = judged.keys, judged.known
    like = list(map(keys.get, template)) * repeats
    added = [(name, key) for name, key in zip(left_out, like, strict=True) if key is not None]
    keys.update(added)
    known.update(compress(left_out, [name in known for name in template] * repeats))
    return added


def _value_infos(typed: Sequence[tuple[str, bytes]]) -> bytes:
    """A GraphProto's serialized value_info field (13), one ValueInfoProto per (name, type
    bytes): its name (field 1) and type (field 2), each tag, length, bytes."""
    parts = []
    for name, key in typed:
        encoded = name.encode()
        body = b"".join((b"\x0a", varint(len(encoded)), encoded, b"\x12", varint(len(key)),
                         key))
        parts.append(b"j" + varint(len(body)) + body)  # b"j": field 13, length-delimited
    return b"".join(parts)


