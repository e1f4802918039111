"""The planner's shapes of a graph of repeated layers, inferred for a few layers only.

ort_plan_shapes.py runs onnx's inference (without data propagation) over the whole file; a
decoder is the same layer hundreds of times (the onnx.helper decoder: 360 layers of 62 nodes,
the exports 133 and 150), and from its second layer on each layer's plan shapes are the last
one's. Here onnx infers the nodes before the repeated layers, their first `INFERRED_LAYERS`
layers and the nodes after them (which read the last layer: the last inferred one instead),
and every later layer takes the shapes of the last inferred layer, value for value. onnx's
C++ pass is about 4 us a node; this module's checks about 2 (the nodes read once as numbers).

Why that is onnx's answer. onnx infers the nodes in the file's order, each from its op, its
attributes, its inputs' types, the values of the initializers and Constants it reads (without
data propagation nothing else is a value to it), and the types the file declares for its
outputs; a dim nobody can size gets a fresh name `unk__N`.
- Node n and node n + period read and do the same (`_repeats`): op, domain, attributes; per
  input the same graph input, a value made as many nodes back (the same output of its node),
  an initializer or a Constant of the same bytes (but for the name), or a value made before
  the layers by another op, read by its type alone (those types are inferred, and compared
  place by place over every layer: `_same_types_before`); per output the same declared types.
  So layer l + 1 is layer l with its reads moved one layer on.
- If what layer l + 1 reads from layer l has the types of what layer l read from layer l - 1,
  but for names onnx made up inside the layers (renamed one to one, names made up before them
  the same), then layer l + 1 infers as layer l did, the same way renamed (its fresh names
  fresh in both), and so what layer l + 2 reads from layer l + 1 has again those types: by
  induction every later layer's types are the last inferred layer's, renamed. It is checked
  between the last two inferred layers (`_same_reads`); a layer reading further back than the
  layer before it is not taken. The planner reads a made-up name as None (unnamed), so
  renamed types are the same plan shapes.
- The nodes after the layers read the last layer only (anything earlier: not taken), renamed
  alike, so they infer as from the last inferred layer.
Where any of this cannot be checked (functions, graph attributes, initializers listed as
inputs, a file naming a dim `unk__...`, fewer than `MIN_LAYERS` layers), the caller infers the
whole graph. tests/test_plan_layers.py checks the result against the whole pass on random
layered graphs, the samples and the decoders.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from operator import attrgetter, eq, itemgetter
from typing import NamedTuple

import numpy as np
import onnx

from graphmem.core.ort_view import PlanShape
from graphmem.frontends.onnx.protobuf_wire import varint

INFERRED_LAYERS = 4  # layers 0-3 inferred: the last two compared (the first may differ)
MIN_LAYERS = 8  # fewer repeats: the whole pass is cheap enough
MIN_NODES = 2_000
DECLARED_SHARE = 8  # more value infos than one per this many nodes: the whole pass (dynamo)
_GRAPH_KINDS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
GENERATED = "unk__"
OUTPUTS = 16  # a value made by node n as its output k is numbered n * OUTPUTS + k
_REL = 1 << 60  # ... and read by node m (a later node of the run) as _REL + m*OUTPUTS - number
_BEFORE = -(1 << 59)  # a value a node before the run makes (not a Constant): read by its type

Shapes = dict[str, PlanShape | None]
Reader = Callable[[onnx.ModelProto], tuple[Shapes, dict[str, onnx.ValueInfoProto]] | None]


class LayerRun(NamedTuple):
    """A run of repeated layers (`find_layer_run`): each value a node makes numbered
    (`OUTPUTS`), the run's first node, its period (nodes a layer) and its count of layers;
    `start`: where `_repeats` began comparing; `before`: the places (node, input) reading a
    value made before the run by another op; `made`: each node's count of outputs (`numbers`
    lists the outputs in the nodes' order)."""

    numbers: dict[str, int]
    made: list[int]
    start: int
    first: int
    period: int
    layers: int
    before: list[tuple[int, int]]

    @property
    def kept_end(self) -> int:
        """One past the last node of the layers inferred."""
        return self.first + INFERRED_LAYERS * self.period

    @property
    def run_end(self) -> int:
        return self.first + self.layers * self.period


def layered_shapes(model: onnx.ModelProto, named: frozenset[str], infer: Reader
                   ) -> Shapes | None:
    """The planner's shapes of every value as `infer` gives them for the whole model (`infer`
    returns the plan shapes and the inferred types by name, None where onnx fails), from
    `infer` on the model cut to its first layers (module docstring); None where that is not
    shown to be the same."""
    graph = model.graph
    nodes = graph.node
    if len(graph.value_info) > len(nodes) // DECLARED_SHARE:
        return None  # reading each declared type costs what cutting the layers saves
    run = find_layer_run(model, named)
    if run is None:
        return None
    numbers, first, period = run.numbers, run.first, run.period
    kept_end, run_end = run.kept_end, run.run_end
    cut = cut_model(model, run)
    if cut is None:
        return None
    inferred = infer(cut)
    if inferred is None:  # onnx failed on the cut: the whole pass says what stands instead
        return None
    shapes, types = inferred
    last = kept_end - period
    if not _same_reads(nodes, numbers, run.start, last, period, first, types) \
            or not _same_types_before(nodes, run.before, first, run_end, period, types):
        return None
    _extend(shapes, nodes, numbers, last, kept_end, run_end, period)
    return shapes


def find_layer_run(model: onnx.ModelProto, named: frozenset[str], declared: bool = True,
                   probe: Callable[[LayerRun], bool] | None = None) -> LayerRun | None:
    """The longest run of at least `MIN_LAYERS` layers whose nodes a period apart read and do
    the same (module docstring), in a graph of at least `MIN_NODES` nodes with no function,
    no graph attribute and no dim of `named` (the file's) called `unk__...`; None where there
    is none. `declared` False: the file's value infos are not compared (a caller that infers
    without them). `probe`: asked of the run the node kinds alone show (from the first node
    they repeat at, nothing compared yet) before the nodes' reads are: False, None at once."""
    nodes = model.graph.node
    if len(nodes) < MIN_NODES or model.functions or any(n.startswith(GENERATED) for n in named):
        return None
    kinds = [(node.op_type, node.domain) for node in nodes]
    found = _period(kinds)
    if found is None or not _plain(model, kinds):
        return None
    start, period, end = found
    numbered = _numbers(nodes)
    if numbered is None:
        return None
    numbers, made = numbered
    layers = (min(end + period, len(nodes)) - start) // period
    if probe is not None and layers >= MIN_LAYERS \
            and not probe(LayerRun(numbers, made, start, start, period, layers, [])):
        return None
    repeats = _repeats(model, numbers, made, (start, period, end), declared)
    if repeats is None:
        return None
    same, before = repeats
    run = _layer_run(same, start, period)
    if run is None or run[1] < MIN_LAYERS:
        return None
    return LayerRun(numbers, made, start, run[0], period, run[1], before)


def _period(kinds: Sequence[tuple[str, str]]) -> tuple[int, int, int] | None:
    """The node kinds' period through the middle of the node list and the run it repeats over
    (first node, period, one past the last node with a match a period on)."""
    count = len(kinds)
    middle = count // 2
    for period in range(2, min(count // MIN_LAYERS, (count - middle) // 2) + 1):
        if kinds[middle] == kinds[middle + period] \
                and kinds[middle:middle + period] == kinds[middle + period:middle + 2 * period]:
            break
    else:
        return None
    start = middle
    while start > 0 and kinds[start - 1] == kinds[start - 1 + period]:
        start -= 1
    end = middle
    while end + period < count and kinds[end] == kinds[end + period]:
        end += 1
    return start, period, end


def _plain(model: onnx.ModelProto, kinds: Sequence[tuple[str, str]]) -> bool:
    """No node holds a graph (a body reads outer values by name): the nodes of a kind whose
    schema may hold one, or of a domain onnx does not know, are looked at."""
    versions = {entry.domain: entry.version for entry in model.opset_import}
    suspects = set()
    for kind in set(kinds):
        op, domain = kind
        if domain not in ("", "ai.onnx"):
            suspects.add(kind)
            continue
        try:
            schema = onnx.defs.get_schema(op, versions.get(domain, versions.get("", 1)), "")
        except onnx.defs.SchemaError:
            suspects.add(kind)
            continue
        if any(a.type in _GRAPH_KINDS for a in schema.attributes.values()):
            suspects.add(kind)
    nodes = model.graph.node
    return not any(a.type in _GRAPH_KINDS for position, kind in enumerate(kinds)
                   if kind in suspects for a in nodes[position].attribute)


def _numbers(nodes: Sequence[onnx.NodeProto]) -> tuple[dict[str, int], list[int]] | None:
    """Each value a node makes, numbered (`OUTPUTS`), and each node's count of outputs; None
    where a node makes too many, or leaves an output unnamed (an optional output skipped:
    two such nodes would look alike to `_repeats`)."""
    outputs = list(map(_OUTPUT, nodes))
    counts = list(map(len, outputs))
    if max(counts, default=0) > OUTPUTS:
        return None
    if min(counts, default=1) == 1 == max(counts, default=1):  # numbered in one C loop
        numbers = dict(zip(map(itemgetter(0), outputs),
                           range(0, len(outputs) * OUTPUTS, OUTPUTS), strict=True))
    else:
        numbers = {name: position * OUTPUTS + k for position, made in enumerate(outputs)
                   for k, name in enumerate(made)}
    if "" in numbers or len(numbers) != sum(counts):
        return None
    return numbers, counts


def _repeats(model: onnx.ModelProto, numbers: Mapping[str, int], made: Sequence[int],
             found: tuple[int, int, int], declared: bool = True
             ) -> tuple[list[bool], list[tuple[int, int]]] | None:
    """Per node from `start`, whether the node a period on does the same (module docstring):
    the same attributes and count of outputs (`made`); per input the same value not made by a
    node (a graph input), a value made as many nodes back (as the same output), an
    initializer or Constant of the same bytes, or a value made before the run (its type
    checked once inferred, with the places (node, input) where one is read:
    `_same_types_before`); per output the same declared types. None where an initializer is
    also an input, or a node reads a value a later node makes (onnx infers in order).
    `declared`: find_layer_run's."""
    start, period, end = found
    graph = model.graph
    nodes = graph.node
    code = {name: number if number >= start * OUTPUTS else _BEFORE
            for name, number in numbers.items()}
    contents: dict[bytes, int] = {}
    for position in range(start):
        node = nodes[position]
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            held = b"c" + b"".join(a.SerializeToString() for a in node.attribute)
            for name in node.output:
                code[name] = -3 - contents.setdefault(held, len(contents))
    for tensor in graph.initializer:  # the same bytes but for the name: the same number
        name = tensor.name
        if name in code:
            return None
        code[name] = -3 - contents.setdefault(_content(tensor, name), len(contents))
    for index, value in enumerate(graph.input):
        if value.name in code:
            return None  # an initializer listed as an input (IR < 4): its type is the input's
        code[value.name] = -3 - len(contents) - index
    stop = min(end + period, len(nodes))
    run = nodes[start:stop]
    inputs = list(map(_INPUT, run))
    counts = np.fromiter(map(len, inputs), np.int64, len(run))
    flat = _reads(inputs, code, int(counts.sum()))
    where = np.repeat(np.arange(start, stop, dtype=np.int64), counts)
    inside = flat >= start * OUTPUTS
    if np.any(flat[inside] >= where[inside] * OUTPUTS):
        return None  # a node reading what a later node makes: not in onnx's order
    flat[inside] = _REL + where[inside] * OUTPUTS - flat[inside]
    offsets = np.concatenate(([0], np.cumsum(counts)))
    pairs = len(run) - period
    shift = np.repeat(offsets[period:period + pairs] - offsets[:pairs], counts[:pairs])
    slots = int(offsets[pairs])
    partner = np.minimum(np.arange(slots) + shift, max(len(flat) - 1, 0))
    differs = np.concatenate(([0], np.cumsum(flat[:slots] != flat[partner])))
    outputs = np.asarray(made[start:stop], np.int64)
    same = ((counts[:pairs] == counts[period:]) & (outputs[:pairs] == outputs[period:])
            & (differs[offsets[1:pairs + 1]] - differs[offsets[:pairs]] == 0)).tolist()
    attributes = list(map(_ATTRIBUTE, run))
    same = [ok and alike for ok, alike in
            zip(same, map(eq, attributes, attributes[period:]), strict=False)]
    if (graph.value_info and declared) or graph.output:
        types = _declared(graph, numbers, start, period, stop, declared)
        same = [ok and types.get(i + start) == types.get(i + start + period)
                for i, ok in enumerate(same)]
    at = np.flatnonzero(flat == _BEFORE)
    node_of = np.searchsorted(offsets, at, side="right") - 1
    before = list(zip((node_of + start).tolist(), (at - offsets[node_of]).tolist(),
                      strict=True))
    return same, before


_INPUT, _OUTPUT, _ATTRIBUTE = attrgetter("input"), attrgetter("output"), attrgetter("attribute")


def _reads(inputs: Sequence[Sequence[str]], code: dict[str, int], count: int) -> np.ndarray:
    """The nodes' inputs, one after another, as numbers (`code`; '' -1; -2 a name nothing
    makes, nor an input or initializer: untyped, read alike)."""
    code[""] = -1
    try:
        return np.fromiter(map(code.__getitem__, chain.from_iterable(inputs)), np.int64, count)
    except KeyError:
        get = code.get
        return np.fromiter((get(name, -2) for name in chain.from_iterable(inputs)), np.int64,
                           count)


def _declared(graph: onnx.GraphProto, numbers: Mapping[str, int], start: int, period: int,
              stop: int, infos_too: bool = True) -> dict[int, list[tuple[int, int, bytes]]]:
    """Per node of the run that makes a value the file declares (a value info unless
    `infos_too` is False, a graph output): (its output, which list, the declared type's
    bytes)."""
    declared: dict[int, list[tuple[int, int, bytes]]] = {}
    for kind, infos in ((0, graph.value_info if infos_too else ()), (1, graph.output)):
        for info in infos:
            number = numbers.get(info.name)
            if number is not None and start * OUTPUTS <= number < stop * OUTPUTS:
                declared.setdefault(number // OUTPUTS, []).append(
                    (number % OUTPUTS, kind, info.type.SerializeToString()))
    return declared


def _content(tensor: onnx.TensorProto, name: str) -> bytes:
    """An initializer as inference reads it (`name` its name): its bytes but for its name
    field (tag 8, the name's length, the name), cut where those bytes occur once (then they
    are that field), else the tensor copied without its name."""
    data = tensor.SerializeToString()
    encoded = name.encode()
    size = len(encoded)
    field = b"\x42" + varint(size) + encoded
    if data.count(field) == 1:
        return b"i" + data.replace(field, b"", 1)
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    copy.ClearField("name")
    return b"i" + copy.SerializeToString()




def _layer_run(same: Sequence[bool], start: int, period: int) -> tuple[int, int] | None:
    """The longest run of whole layers (first node, layers) each node of which does what the
    node a period on does (`same`, from node `start`)."""
    best: tuple[int, int] | None = None
    offset = 0
    while offset + period <= len(same):
        if not all(same[offset:offset + period]):
            offset += 1
            continue
        layers = 1
        while offset + (layers + 1) * period <= len(same) and all(
                same[offset + layers * period:offset + (layers + 1) * period]):
            layers += 1
        run = (start + offset, layers + 1)  # the last layer matches the one before it
        if best is None or run[1] > best[1]:
            best = run
        offset += layers * period
    return best


def cut_model(model: onnx.ModelProto, run: LayerRun) -> onnx.ModelProto | None:
    """The model without the run's layers from `kept_end` to `run_end`, the nodes after them
    reading the last kept layer where they read the run's last (None where they read an
    earlier layer of the run: module docstring); only the initializers the nodes kept read."""
    numbers, first, period = run.numbers, run.first, run.period
    kept_end, run_end = run.kept_end, run.run_end
    graph = model.graph
    nodes = graph.node
    last_layer, run_stop = (run_end - period) * OUTPUTS, run_end * OUTPUTS
    moved = (run_end - kept_end) * OUTPUTS
    after = []
    for position in range(run_end, len(nodes)):
        node = nodes[position]
        made = [numbers.get(name, -1) for name in node.input]
        if any(first * OUTPUTS <= number < last_layer for number in made):
            return None
        if any(last_layer <= number < run_stop for number in made):
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            del copy.input[:]
            copy.input.extend(
                nodes[(number - moved) // OUTPUTS].output[(number - moved) % OUTPUTS]
                if last_layer <= number < run_stop else name
                for name, number in zip(node.input, made, strict=True))
            node = copy
        after.append(node)
    cut = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import)
    part = cut.graph
    part.node.extend(nodes[:kept_end])
    part.node.extend(after)
    read = {name for node in part.node for name in node.input}
    part.input.extend(graph.input)
    part.initializer.extend(t for t in graph.initializer if t.name in read)
    gone = range(kept_end * OUTPUTS, run_stop)
    part.output.extend(v for v in graph.output if numbers.get(v.name, -1) not in gone)
    part.value_info.extend(v for v in graph.value_info if numbers.get(v.name, -1) not in gone)
    return cut


def _extend(shapes: Shapes, nodes: Sequence[onnx.NodeProto], numbers: Mapping[str, int],
            last: int, kept_end: int, run_end: int, period: int) -> None:
    """Each value the skipped layers make takes the shape of its place in the last inferred
    layer (none where that one has none)."""
    like = {number: name for number, name in
            ((numbers[name], name) for position in range(last, kept_end)
             for name in nodes[position].output if name)}
    low, high, width = kept_end * OUTPUTS, run_end * OUTPUTS, period * OUTPUTS
    base = last * OUTPUTS
    get = shapes.get
    for name, number in numbers.items():
        if low <= number < high:
            same = like[base + (number - low) % width]
            shape = get(same, _ABSENT)
            if shape is not _ABSENT:
                shapes[name] = shape


_ABSENT = ("absent",)


def _same_types_before(nodes: Sequence[onnx.NodeProto], before: Sequence[tuple[int, int]],
                       first: int, run_end: int, period: int,
                       types: Mapping[str, onnx.ValueInfoProto]) -> bool:
    """Whether each place of the layers that reads a value made before the run reads, in
    every layer, values of the same type (inferred: made before the run, they are in the
    cut model). Without data propagation a value a node makes is read by its type alone."""
    seen: dict[tuple[int, int], bytes | None] = {}
    for position, slot in before:
        if not first <= position < run_end:
            continue
        info = types.get(nodes[position].input[slot])
        kind = None if info is None else info.type.SerializeToString()
        if seen.setdefault(((position - first) % period, slot), kind) != kind:
            return False
    return True


def _same_reads(nodes: Sequence[onnx.NodeProto], numbers: Mapping[str, int], start: int,
                last: int, period: int, first: int,
                types: Mapping[str, onnx.ValueInfoProto]) -> bool:
    """Whether the last inferred layer (from node `last`) reads from the layer before it
    values of the types the layer before read from its own previous layer, but for names made
    up inside the run, one to one (names in the types of values made before the run: the
    same). A read reaching further back than the previous layer: not shown, False."""
    fixed = {d.dim_param for position in range(first) for name in nodes[position].output
             if name in types for d in types[name].type.tensor_type.shape.dim
             if d.dim_param}
    mine: dict[str, str] = {}
    theirs: dict[str, str] = {}
    for offset in range(period):
        node, earlier = nodes[last + offset], nodes[last - period + offset]
        for name, other in zip(node.input, earlier.input, strict=True):
            if name == other:
                continue  # the same value: a graph input, one made before the run
            source = numbers.get(name)
            if source is None or source < start * OUTPUTS:
                continue  # initializers, Constants of the same bytes, values made before
                # the layers of the same types (`_repeats`, `_same_types_before`)
            if source >= last * OUTPUTS:
                continue  # made inside the layer: inferred from its reads
            if source < (last - period) * OUTPUTS:
                return False
            a, b = types.get(name), types.get(other)
            if a is None or b is None:
                if a is not b:
                    return False
                continue
            if not _renamed(a.type, b.type, fixed, mine, theirs):
                return False
    return True


def _renamed(a: onnx.TypeProto, b: onnx.TypeProto, fixed: set[str], mine: dict[str, str],
             theirs: dict[str, str]) -> bool:
    """Whether `a` is `b` but for made-up names (not in `fixed`) renamed one to one."""
    if a.WhichOneof("value") != "tensor_type" or b.WhichOneof("value") != "tensor_type":
        return a == b
    x, y = a.tensor_type, b.tensor_type
    if x.elem_type != y.elem_type or x.HasField("shape") != y.HasField("shape") \
            or len(x.shape.dim) != len(y.shape.dim):
        return False
    for p, q in zip(x.shape.dim, y.shape.dim, strict=True):
        if p.HasField("dim_value") or q.HasField("dim_value"):
            if not (p.HasField("dim_value") and q.HasField("dim_value")
                    and p.dim_value == q.dim_value):
                return False
            continue
        m, n = p.dim_param, q.dim_param
        made_up = m.startswith(GENERATED)
        if m == n and (not made_up or m in fixed):
            continue  # a file's name, a name made before the run: the same
        if not (made_up and n.startswith(GENERATED)) or m in fixed or n in fixed:
            return False
        if mine.setdefault(m, n) != n or theirs.setdefault(n, m) != m:
            return False  # one to one, a name kept as it was included
    return True
