"""The part of a model onnxruntime's symbolic rules run on (infer.py): the nodes onnx's inference
left not fully known, what the graph outputs need, and the small tensors the rules read the
values of, back to the Shape nodes they start from; every other tensor it reads is a graph
input of the part, typed as onnx inferred it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import onnx

from graphmem.frontends.onnx.ort_engine import (
    STATIC_TYPES_KEY,
    STATIC_TYPES_TOKEN,
    static_value_infos,
)
from graphmem.frontends.onnx.seq_dims import is_expression
from graphmem.frontends.onnx.value_types import constant_tensor, fully_known_names, small_value

# Ops whose output value is their input's shape: the input's own value is never needed.
_SHAPE_OPS = frozenset({"Shape", "Size"})


def unknown_part(inferred: onnx.ModelProto, declared_inputs: Iterable[onnx.ValueInfoProto],
                 known_infos: set[str] | None = None) -> onnx.ModelProto:
    """The model onnxruntime's rules run on: the nodes of `inferred` (onnx's result) with an
    output not fully known, the producers of the graph outputs, and the producers of the
    small tensors those read, back to Shape nodes, and of what they read with a dim named by
    an expression (seq_dims.py); inputs: the model's own (always, so their
    dims are checked and their symbols registered as in a whole run), then every other
    tensor the part reads, typed as onnx inferred it. `known_infos`:
    `fully_known_names(graph.value_info)` where the caller has it (typed_by_onnx's)."""
    graph = inferred.graph
    types = {v.name: v for v in (*graph.value_info, *graph.output)}
    known = _known_names(graph, types, known_infos)
    nodes = list(graph.node)
    outputs = [node.output for node in nodes]
    producer = {name: index for index, names in enumerate(outputs) for name in names}
    pending = _unknown_producers(nodes, outputs, producer, producer.keys() - known)
    pending.extend(producer[v.name] for v in graph.output if v.name in producer)
    chosen: set[int] = set()
    small: dict[str, bool] = {}  # by value name: most are read by several nodes
    # a dim named by an expression (seq_dims.py) is no symbol the rules can read back: its
    # producer computes it in the part
    expressed: dict[str, bool] = {}
    while pending:
        index = pending.pop()
        if index in chosen:
            continue
        chosen.add(index)
        reads_shape = nodes[index].op_type in _SHAPE_OPS
        for name in nodes[index].input:
            source = producer.get(name)
            if source is None or source in chosen:
                continue
            if name not in small:
                small[name] = small_value(types.get(name))
                expressed[name] = _has_expression(types.get(name))
            if expressed[name] or (small[name] and not reads_shape):
                pending.append(source)
    part = [nodes[index] for index in sorted(chosen)]  # the model's (topological) order
    return _part_model(inferred, part, types, declared_inputs)


def _known_names(graph: onnx.GraphProto, types: Mapping[str, onnx.ValueInfoProto],
                 known_infos: set[str] | None) -> set[str]:
    """`fully_known_names(types.values())`: the value infos' verdicts taken from
    `known_infos` where no name is given twice (each name's type is then its one info: the
    outputs judged alone), not judged again (0.02 CPU s at 22,000 values)."""
    if known_infos is None or len(types) != len(graph.value_info) + len(graph.output):
        return fully_known_names(types.values())
    return known_infos | fully_known_names(graph.output)


def _unknown_producers(nodes: list[onnx.NodeProto], outputs: Sequence[Sequence[str]],
                       producer: Mapping[str, int], unknown: set[str]) -> list[int]:
    """The positions of the nodes other than Constant with an output (named) not fully known,
    in the graph's order; `unknown`: the names made that are not fully known ("" among them
    where an output is unnamed), `producer`: each name's (last) maker. Where every name is
    made by one node (the table holds as many names as the nodes make), those nodes are the
    unknown names' producers: a decoder's one or two, instead of a walk over every node (0.03
    CPU s at 22,000 nodes); the walk where a name is made twice."""
    unknown.discard("")
    if not unknown:
        return []
    if len(producer) == sum(map(len, outputs)):
        return sorted({index for name in unknown
                       if nodes[index := producer[name]].op_type != "Constant"})
    return [index for index, node in enumerate(nodes) if node.op_type != "Constant"
            and any(name in unknown for name in outputs[index])]


def _has_expression(info: onnx.ValueInfoProto | None) -> bool:
    return info is not None and info.type.WhichOneof("value") == "tensor_type" \
        and any(is_expression(d) for d in info.type.tensor_type.shape.dim)


def _part_model(inferred: onnx.ModelProto, nodes: list[onnx.NodeProto],
                types: Mapping[str, onnx.ValueInfoProto],
                declared_inputs: Iterable[onnx.ValueInfoProto]) -> onnx.ModelProto:
    graph = inferred.graph
    made = {name for node in nodes for name in node.output}
    initializers = {t.name: t for t in graph.initializer}
    inputs = list(declared_inputs)
    given = {v.name for v in inputs} | made | initializers.keys()
    read: dict[str, None] = {}
    for node in nodes:
        read.update((name, None) for name in node.input if name and name not in given)
    inputs.extend(types[name] for name in read if name in types)
    part = onnx.ModelProto()
    for field in ("ir_version", "opset_import", "producer_name", "producer_version", "domain"):
        value = getattr(inferred, field)
        if field == "opset_import":
            part.opset_import.extend(value)
        else:
            setattr(part, field, value)
    used = {name for node in nodes for name in node.input}
    part.graph.name = graph.name
    # Constant nodes go in as initializers: the rules read their values either way, and an
    # initializer costs the engine nothing per node
    part.graph.node.extend(n for n in nodes if constant_tensor(n) is None)
    part.graph.input.extend(inputs)
    part.graph.initializer.extend(t for name, t in initializers.items() if name in used)
    for node in nodes:
        tensor = constant_tensor(node)
        if tensor is not None:
            initializer = part.graph.initializer.add()
            initializer.CopyFrom(tensor)
            initializer.name = node.output[0]
    part.graph.output.extend(v for v in graph.output if v.name in made)
    # the types onnx gave with numbers only: the engine takes them instead of its own
    # one-node inference (ort_engine.py); it reads no value infos otherwise
    part.graph.value_info.extend(static_value_infos(types, part.graph.node))
    part.metadata_props.add(key=STATIC_TYPES_KEY, value=STATIC_TYPES_TOKEN)
    return part
