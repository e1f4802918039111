"""What onnx's third pass (infer.py `_second_pass`) makes of the second pass's result, without
running it over the whole graph.

The third pass is the second pass's model with the Reshape outputs `repeat_dims.py` typed from
the second pass's types (a grouped-query repeat of a rotary output) added to the value infos
it is given. A node's inferred type is a function of its inputs' types, the values data
propagation carries into it (0-D and 1-D tensors only: shape vectors and scalars), its
attributes and the type it is given; so only the Reshapes and what reads what they change can
come out differently, the rest as the second pass typed it. Here:

- each Reshape's type is onnx's merge (`mergeInDimensionInfo` in onnx's shape_inference.h: a
  number inferred wins, then the given dim, then an inferred name) of the type it is given into
  the second pass's inferred one, computed in Python;
- the nodes reading a changed value are inferred again by onnx, in a model of those nodes only,
  their other inputs typed as the second pass typed them, level by level until nothing changes.

It gives up (the caller runs the whole pass) wherever that argument does not hold: a changed
or recomputed value of rank 0 or 1 (data propagation carries values of those), a recomputed
node reading a 0-D or 1-D value computed elsewhere (its propagated value is not in the small
model), a Reshape downstream of another, or a dim left unknown anywhere (onnx numbers its
`unk__N` names in graph order: the numbers would shift). tests/test_third_pass.py checks the
result equals the whole pass, byte for byte, on the decoders, the samples and the tests'
models.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import onnx

from graphmem.frontends.onnx.graph_index import GraphIndex
from graphmem.frontends.onnx.scalar_reshapes import AXES

Inference = Callable[[onnx.ModelProto], "onnx.ModelProto | None"]
_MAX_LEVELS = 64  # a chain of changes longer than this: the whole pass is as cheap


class _Unsure(Exception):
    """The shortcut's argument does not hold for this model: run the whole pass."""


def third_pass(copy: onnx.ModelProto, second: onnx.ModelProto,
               reshaped: list[onnx.ValueInfoProto],
               types: Mapping[str, onnx.ValueInfoProto], infer: Inference,
               index: GraphIndex | None = None) -> onnx.ModelProto | None:
    """onnx's inference of `copy` with `reshaped` added to its value infos, made from `second`
    (onnx's inference of `copy` as it is; `types`: its inputs', value infos' and outputs'
    entries by name) in place; None where unsure (module docstring): `second` is then
    unchanged. `copy` is not changed. `index`: the model's (graph_index.py), where the caller
    has it: `copy`'s nodes are the model's as indexed but for the scalar reshapes (Unsqueezes
    whose targets, of rank 1, no level reads), so their readers and Constant nodes are read
    from it by position, and its initializers are the model's but the reshapes' AXES."""
    try:
        changes = _Types(copy, types, reshaped)
        _propagate(changes, copy, infer, index)
        changes.check_known(second)
    except _Unsure:
        return None
    changes.apply()
    return second


class _Types:
    """The second pass's types and the third pass's changes to them."""

    def __init__(self, copy: onnx.ModelProto, types: Mapping[str, onnx.ValueInfoProto],
                 reshaped: list[onnx.ValueInfoProto]) -> None:
        self.given = {v.name: v for v in copy.graph.value_info}
        self.declared_outputs = {v.name: v for v in copy.graph.output}
        self.reshaped = {v.name: v for v in reshaped}
        self.infos = types
        given_count = len(copy.graph.value_info)
        if len(self.given) != given_count or len(self.reshaped) != len(reshaped) \
                or not self.reshaped.keys().isdisjoint(self.given) \
                or not self.reshaped.keys().isdisjoint(self.declared_outputs):
            raise _Unsure
        self.new: dict[str, onnx.TypeProto] = {}
        for name, info in self.reshaped.items():
            inferred = self.infos.get(name)
            if inferred is None:
                raise _Unsure
            self.new[name] = _merged(info.type, inferred.type)

    def current(self, name: str) -> onnx.TypeProto | None:
        found = self.new.get(name)
        if found is not None:
            return found
        info = self.infos.get(name)
        return info.type if info is not None else None

    def check_known(self, second: onnx.ModelProto) -> None:
        """Every dim of every value known after the change: no `unk__N` whose number a
        whole pass would give differently. Counted in bytes: none in the changed types, and
        as many in the second pass's graph as in the changed values' old types (0.005 CPU s
        on a 22,000-node decoder, where reading each value's dims takes 0.1); an `unk__` in
        a name counts as one left."""
        new = b"".join(t.SerializeToString() for t in self.new.values())
        old = b"".join(self.infos[name].type.SerializeToString() for name in self.new)
        # an unnamed dim: onnx's parts name theirs, and _merged refuses one left so
        if b"unk__" in new or second.graph.SerializeToString().count(b"unk__") \
                != old.count(b"unk__"):
            raise _Unsure

    def apply(self) -> None:
        """The changed types written into the second pass's value infos and outputs, where
        they are: the whole pass lists the reshaped ones earlier (with those it is given),
        an order nothing reads (build.py keys the types by name)."""
        for name, type_proto in self.new.items():
            self.infos[name].type.CopyFrom(type_proto)

def _propagate(types: _Types, copy: onnx.ModelProto, infer: Inference,
               index: GraphIndex | None) -> None:
    """Infer again the nodes reading a changed value (of rank 2 or more: _merged,
    _infer_level) until none changes."""
    nodes = copy.graph.node
    context = _Context(copy, index)
    consumers = context.consumers
    changed = {name for name, type_proto in types.new.items()
               if type_proto != types.infos[name].type}
    for _ in range(_MAX_LEVELS):
        level = sorted({p for name in changed for p in consumers.get(name, ())})
        if not level:
            return
        changed = _infer_level(types, [nodes[p] for p in level], context, infer)
    raise _Unsure


class _Context:
    """What a small model of some of `copy`'s nodes takes from it."""

    def __init__(self, copy: onnx.ModelProto, index: GraphIndex | None = None) -> None:
        self.copy = copy
        self.declared_inputs = {v.name for v in copy.graph.input}
        self._index = index
        consumers: Mapping[str, list[int]] | None = None if index is None else index.consumers
        if consumers is None:  # a value's readers, by position
            walked: dict[str, list[int]] = {}
            for position, node in enumerate(copy.graph.node):
                for name in node.input:
                    walked.setdefault(name, []).append(position)
            consumers = walked
        self.consumers = consumers
        # built on the first question (most parts read neither)
        self._initializers: dict[str, onnx.TensorProto] | None = None
        self._constants: dict[str, onnx.NodeProto] | None = None

    def initializer(self, name: str) -> onnx.TensorProto | None:
        # the copy's initializers are the indexed model's, the scalar reshapes' AXES added
        # (11,531 on a decoder: not mapped again for the few the levels read)
        if self._index is not None and name != AXES:
            return self._index.initializer.get(name)
        if self._initializers is None:
            self._initializers = {t.name: t for t in self.copy.graph.initializer}
        return self._initializers.get(name)

    def constant(self, name: str) -> onnx.NodeProto | None:
        """The Constant node making `name`."""
        if self._constants is None:
            graph_nodes = self.copy.graph.node
            nodes: Iterable[onnx.NodeProto] = graph_nodes if self._index is None else [
                graph_nodes[p] for p in self._index.positions.get("Constant", ())]  # indexed
            self._constants = {n.output[0]: n for n in nodes
                               if n.op_type == "Constant" and len(n.output) == 1}
        return self._constants.get(name)


def _infer_level(types: _Types, level: list[onnx.NodeProto], context: _Context,
                 infer: Inference) -> set[str]:
    """Infer `level`'s nodes in a model of their own; the names whose type changed."""
    made = [name for node in level for name in node.output if name]
    if not types.reshaped.keys().isdisjoint(made):
        raise _Unsure  # a Reshape whose input changed: its merge above read a stale type
    result = infer(_part(types, level, made, context))
    if result is None:
        raise _Unsure
    inferred = {v.name: v.type for v in (*result.graph.value_info, *result.graph.output)}
    changed = set()
    for name in made:
        found = inferred.get(name)
        if found is None or _rank(found) < 2:
            raise _Unsure
        if found != types.current(name):
            types.new[name] = found
            changed.add(name)
    return changed


def _part(types: _Types, level: list[onnx.NodeProto], made: list[str],
          context: _Context) -> onnx.ModelProto:
    """`level`'s nodes (`made`: their outputs), their other inputs typed as now (initializers
    and Constant nodes themselves: onnx reads their values); the types they are given as in
    the whole pass."""
    copy = context.copy
    part = onnx.ModelProto()
    part.ir_version = copy.ir_version
    part.opset_import.extend(copy.opset_import)
    graph = part.graph
    inside = set(made)
    read = dict.fromkeys(name for node in level for name in node.input
                         if name and name not in inside)
    constants = []
    for name in read:
        type_proto = types.current(name)
        if type_proto is not None and _rank(type_proto) >= 2:  # no value propagated: an input
            info = graph.input.add(name=name)
            info.type.CopyFrom(type_proto)
            continue
        tensor = context.initializer(name) if type_proto is None else None
        constant = context.constant(name) if tensor is None else None
        if tensor is not None and name not in context.declared_inputs:
            graph.initializer.append(tensor)
        elif constant is not None:
            constants.append(constant)
        else:  # a shape vector or scalar computed elsewhere, or an initializer typed by an
            raise _Unsure  # input: onnx's value of it is not in the small model
    graph.node.extend(constants)
    graph.node.extend(level)
    for name in made:
        if name in types.given:
            graph.value_info.append(types.given[name])
        elif name in types.declared_outputs:
            graph.output.append(types.declared_outputs[name])
    return part


def _rank(type_proto: onnx.TypeProto | None) -> int:
    if type_proto is None or type_proto.WhichOneof("value") != "tensor_type" \
            or not type_proto.tensor_type.HasField("shape"):
        return -1
    return len(type_proto.tensor_type.shape.dim)


def _merged(given: onnx.TypeProto, inferred: onnx.TypeProto) -> onnx.TypeProto:
    """onnx's merge of an inferred tensor type into the one a value is given, per dim: the
    inferred number, else the given number or name, else the inferred name (an `unk__N` the
    second pass numbered counts as no name: the third pass would not have made it)."""
    if _rank(given) != _rank(inferred) or _rank(given) < 2 \
            or given.tensor_type.elem_type != inferred.tensor_type.elem_type:
        raise _Unsure
    merged = onnx.TypeProto()
    merged.CopyFrom(given)
    pairs = zip(inferred.tensor_type.shape.dim, merged.tensor_type.shape.dim, strict=True)
    for source, target in pairs:
        if source.HasField("dim_value"):
            if target.HasField("dim_value") and target.dim_value != source.dim_value:
                raise _Unsure  # onnx would report the node's error
            target.dim_value = source.dim_value
        elif not target.HasField("dim_value") and not target.dim_param:
            if source.dim_param.startswith("unk__") or not source.dim_param:
                raise _Unsure  # left unknown
            target.dim_param = source.dim_param
    return merged
