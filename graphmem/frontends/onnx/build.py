"""Building graphmem's IR from an inferred ONNX model: values with their dims as SymInts (the
model's own dim names), nodes linked through Graph.append_new (add_node's links), module
paths where the exporter recorded them, control-flow bodies (If/Loop/Scan) built as graphs
of their own with their trip counts (graphmem/ops/control_flow.py; costed by
graphmem/passes/control_flow.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import onnx
from onnx import AttributeProto, TensorProto

from graphmem.core.ir import AttributeValue, DType, Graph, Node, Role, Shape, Sizes, Value
from graphmem.core.ir import value_sizes as sizes_of
from graphmem.core.symbolic import SymInt, parse_size
from graphmem.errors import GraphmemError
from graphmem.frontends.onnx.control_flow import TripCounter
from graphmem.frontends.onnx.fold import default_opset
from graphmem.frontends.onnx.module_paths import module_path, path_from_scopes
from graphmem.frontends.onnx.untrusted import subgraphs
from graphmem.frontends.onnx.value_types import JudgedInfos
from graphmem.ops.control_flow import (
    BODY_SCRATCH_SUFFIX,
    ControlFlowNode,
    body_peak_bytes,
    largest_at_probe,
)

_DTYPES: dict[int, DType] = {
    TensorProto.FLOAT: DType.FLOAT32,
    TensorProto.FLOAT16: DType.FLOAT16,
    TensorProto.BFLOAT16: DType.BFLOAT16,
    TensorProto.DOUBLE: DType.FLOAT64,
    TensorProto.INT64: DType.INT64,
    TensorProto.INT32: DType.INT32,
    TensorProto.INT16: DType.INT16,
    TensorProto.INT8: DType.INT8,
    TensorProto.UINT64: DType.UINT64,
    TensorProto.UINT32: DType.UINT32,
    TensorProto.UINT16: DType.UINT16,
    TensorProto.UINT8: DType.UINT8,
    TensorProto.BOOL: DType.BOOL,
    TensorProto.COMPLEX64: DType.COMPLEX64,
    TensorProto.COMPLEX128: DType.COMPLEX128,
    TensorProto.STRING: DType.STRING,
    TensorProto.FLOAT8E4M3FN: DType.FLOAT8,
    TensorProto.FLOAT8E4M3FNUZ: DType.FLOAT8,
    TensorProto.FLOAT8E5M2: DType.FLOAT8,
    TensorProto.FLOAT8E5M2FNUZ: DType.FLOAT8,
    TensorProto.INT4: DType.INT4,
    TensorProto.UINT4: DType.UINT4,
}

# a type's dtype, dims and sizes (value_sizes: each value of the type is handed them)
Kind = tuple[DType, Shape | None, Sizes]
_UNTYPED: Kind = (DType.UNKNOWN, None, sizes_of(None, DType.UNKNOWN))  # no value info types
_CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})
_ONNX_DOMAINS = frozenset({"", "ai.onnx"})
# BatchNormalization inputs 3 and 4 are running statistics: buffers, not parameters.
_BUFFER_INPUTS = {"BatchNormalization": (3, 4)}


def build_graph(model: onnx.ModelProto, default_name: str, dim_names: Mapping[str, str],
                judged: JudgedInfos | None = None, node_metadata: bool = True) -> Graph:
    """The IR of `model`; `judged`: its value infos' type keys, where inference judged them
    (infer.py `Inferred`), not serialized again; `node_metadata` False: no node of the main
    graph has a metadata entry (read.py `ReadModel`: the file's nodes had none kept, and no
    step after adds one), so none is read (22,000 reads: 0.004-0.01 CPU s)."""
    onnx_graph = model.graph
    graph = Graph(name=onnx_graph.name or default_name, nodes=[], values={}, inputs=[],
                  outputs=[], opset=default_opset(model), source_format="onnx")
    values = graph.values
    _add_initializers(onnx_graph, values)
    op_types = _add_constant_nodes(onnx_graph, values)
    reader = _ShapeReader(dim_names)
    inputs = [_input_value(v, values, reader) for v in onnx_graph.input]
    _add_nodes(graph, onnx_graph, reader.type_keys(onnx_graph, judged), reader, op_types,
               node_metadata)
    graph.inputs = [v for v in inputs if v.role is Role.INPUT]
    graph.outputs = [_mark_output(values, v) for v in onnx_graph.output]
    _mark_buffers(graph.nodes)
    return graph


def _add_initializers(graph: onnx.GraphProto, values: dict[str, Value]) -> None:
    """A value per initializer; its dtype, dims, role and sizes made once per distinct
    (element type, dims): a decoder's 11,500 initializers have 14 (values of one shape share
    the tuple, as the typed values do)."""
    kinds: dict[tuple[int, tuple[int, ...]], tuple[DType, Shape, Role, Sizes]] = {}
    for tensor in graph.initializer:
        key = (tensor.data_type, tuple(tensor.dims))
        kind = kinds.get(key)
        if kind is None:
            kind = kinds[key] = _initializer_kind(*key)
        name = tensor.name
        values[name] = Value(name, kind[0], kind[1], kind[2], _nbytes_cache=kind[3])


def _initializer_kind(data_type: int, dims: tuple[int, ...]
                      ) -> tuple[DType, Shape, Role, Sizes]:
    dtype = _DTYPES.get(data_type, DType.UNKNOWN)
    shape: Shape = tuple(SymInt.const(int(d)) for d in dims)
    numel = 1
    for d in dims:
        numel *= int(d)
    role = Role.PARAMETER if dtype.is_float and numel > 1 else Role.CONSTANT
    return dtype, shape, role, sizes_of(shape, dtype)


def _add_constant_nodes(graph: onnx.GraphProto, values: dict[str, Value]) -> list[str]:
    """Constant nodes become constant values (onnxruntime turns them into initializers too);
    a tensor's dtype and dims made once per distinct (element type, dims), as initializers'
    (a TorchScript decoder: 8,325 Constants). Returns the nodes' op types, in order, read
    once for _add_nodes too."""
    kinds: dict[tuple[int, tuple[int, ...]], tuple[DType, Shape, Sizes]] = {}
    op_types = [node.op_type for node in graph.node]
    nodes = graph.node
    for index in [i for i, op_type in enumerate(op_types) if op_type == "Constant"]:
        node = nodes[index]
        if node.domain in _ONNX_DOMAINS and node.output:
            name = node.output[0]
            dtype, shape, sizes = _constant_type(node, kinds)
            values[name] = Value(name, dtype, shape, Role.CONSTANT, _nbytes_cache=sizes)
    return op_types


def _constant_type(node: onnx.NodeProto,
                   kinds: dict[tuple[int, tuple[int, ...]], tuple[DType, Shape, Sizes]]
                   ) -> tuple[DType, Shape, Sizes]:
    attributes = node.attribute
    attribute = attributes[0] if attributes else None
    if attribute is not None and attribute.type == AttributeProto.TENSOR:
        tensor = attribute.t
        key = (tensor.data_type, tuple(tensor.dims))
        kind = kinds.get(key)
        if kind is None:
            dtype = _DTYPES.get(key[0], DType.UNKNOWN)
            shape: Shape = tuple(SymInt.const(int(d)) for d in key[1])
            kind = kinds[key] = (dtype, shape, sizes_of(shape, dtype))
        return kind
    if attribute is not None and attribute.name.endswith("s"):  # value_ints, value_floats
        count = len(onnx.helper.get_attribute_value(attribute))
        dtype = DType.INT64 if attribute.name == "value_ints" else DType.FLOAT32
        shape = (SymInt.const(count),)
        return dtype, shape, sizes_of(shape, dtype)
    is_int = attribute is not None and attribute.name == "value_int"
    dtype = DType.INT64 if is_int else DType.FLOAT32
    return dtype, (), sizes_of((), dtype)


def _kind(dtype: DType, shape: Shape | None) -> Kind:
    return dtype, shape, sizes_of(shape, dtype)


def _input_value(info: onnx.ValueInfoProto, values: dict[str, Value],
                 reader: _ShapeReader) -> Value:
    if info.name in values:  # IR < 4 lists initializers among the inputs
        return values[info.name]
    value = reader.value(info, Role.INPUT)
    values[info.name] = value
    return value


class _ShapeReader:
    """Dims of the inferred model as SymInts: the aliases mapped back to the model's dim
    names, each distinct text parsed once (a large decoder repeats a few texts thousands of
    times)."""

    def __init__(self, dim_names: Mapping[str, str]) -> None:
        self.dim_names = dim_names
        self.parsed: dict[str, SymInt | None] = {}
        # a decoder's layers repeat a few hundred distinct types (10^5 hostile outputs: one):
        # each is read once, keyed by its serialized bytes (one C call instead of a Python
        # walk over its dims)
        self.types: dict[bytes, Kind] = {}
        self.unread: dict[bytes, onnx.TypeProto] = {}  # type_keys' types, by their bytes
        # nodes with the same attributes share one dict (the IR never changes a node's
        # attributes in place): a decoder's 22,000 nodes have a few hundred distinct ones
        self.attributes: dict[tuple[tuple[str, AttributeValue], ...],
                              dict[str, AttributeValue]] = {}
        self.no_attributes: dict[str, AttributeValue] = {}
        self.attributes[()] = self.no_attributes  # a node whose attributes are all bodies

    def value(self, info: onnx.ValueInfoProto, role: Role) -> Value:
        type_proto = info.type
        key = type_proto.SerializeToString()
        known = self.types.get(key)
        if known is None:
            known = self.types[key] = self._read(type_proto)
        return Value(info.name, known[0], known[1], role, _nbytes_cache=known[2])

    def type_keys(self, graph: onnx.GraphProto,
                  judged: JudgedInfos | None = None) -> dict[str, bytes]:
        """The serialized type of each value `graph` types (value_info, then its outputs: the
        last of a name wins), in the one walk that finds their names; each distinct type is
        kept to be read when a node's output first has it (`typed`). `judged`: the value
        infos' keys and types as judged_infos found them (in the same order), taken over."""
        unread = self.unread
        keys: dict[str, bytes] = {}
        infos: Iterable[onnx.ValueInfoProto] = (*graph.value_info, *graph.output)
        if judged is not None:  # (a graph's own: taken, not copied)
            keys, infos = judged.keys, graph.output
            for key, type_proto in judged.types.items():
                unread.setdefault(key, type_proto)
        for info in infos:
            type_proto = info.type
            key = keys[info.name] = type_proto.SerializeToString()
            if key not in unread:
                unread[key] = type_proto
        return keys

    def typed(self, key: bytes | None) -> Kind:
        """The dtype, dims and sizes of a type `type_keys` found (None: a value it did not
        type)."""
        if key is None:
            return _UNTYPED
        known = self.types.get(key)
        if known is None:
            known = self.types[key] = self._read(self.unread[key])
        return known

    def _read(self, type_proto: onnx.TypeProto) -> Kind:
        if not type_proto.HasField("tensor_type"):
            return _kind(DType.UNKNOWN, None)
        tensor_type = type_proto.tensor_type
        shape = None
        if tensor_type.HasField("shape"):
            shape = tuple(self.dim(d) for d in tensor_type.shape.dim)
        return _kind(_DTYPES.get(tensor_type.elem_type, DType.UNKNOWN), shape)

    def dim(self, dim: onnx.TensorShapeProto.Dimension) -> SymInt | None:
        if dim.HasField("dim_value") and dim.dim_value >= 0:
            return SymInt.const(int(dim.dim_value))
        text = dim.dim_param
        # `unk__N` is onnxruntime's name for a size it could not infer: an unknown, not a dim.
        if not text or text.startswith("unk__"):
            return None
        if text not in self.parsed:
            self.parsed[text] = parse_size(text, self.dim_names)
        return self.parsed[text]


def _add_nodes(
    graph: Graph,
    proto_graph: onnx.GraphProto,
    type_keys: dict[str, bytes],
    reader: _ShapeReader,
    op_types: list[str],
    node_metadata: bool = True,
) -> None:
    """The nodes of `proto_graph` but its Constants (values already), built and linked in
    order; `op_types`: theirs, as _add_constant_nodes read them; `node_metadata` False: no
    node has metadata (build_graph)."""
    values = graph.values
    types = reader.types  # each distinct type read once (reader.typed), then looked up here
    used_names: set[str] = set()
    trips: TripCounter | None = None  # made at the first Loop/Scan: most graphs have none
    no_attributes = reader.no_attributes
    activation = Role.ACTIVATION
    # a node's inputs looked up by map, an optional input left out ('': no value) by
    # _inputs after the KeyError (a graph with a value named '' looks up every node there)
    value_of: Callable[[str], Value | None] = (
        values.__getitem__ if "" not in values else _no_value)
    for index, proto in enumerate(proto_graph.node):  # 10^5 nodes: kept to plain steps
        op_type, domain = op_types[index], proto.domain
        onnx_domain = domain in _ONNX_DOMAINS
        if op_type == "Constant" and onnx_domain:
            continue
        proto_name = proto.name
        name = proto_name or f"{op_type}_{index}"
        if name in used_names:
            name = _unique_name(name, used_names)
        else:
            used_names.add(name)
        control_flow = op_type in _CONTROL_FLOW_OPS and onnx_domain
        if proto.attribute:
            attributes, has_subgraph = _attributes(proto)
            attributes = _shared(reader.attributes, attributes)
        else:  # most nodes: one shared empty dict
            attributes, has_subgraph = no_attributes, False
        try:
            inputs = [*map(value_of, proto.input)]
        except KeyError:
            inputs = _inputs(name, proto.input, values)
        metadata = proto.metadata_props if node_metadata else None  # module_path_of
        path = (module_path(metadata, proto_name) if metadata
                else path_from_scopes(proto_name.rpartition("/")[0])
                if proto_name.startswith("/") else "")
        # phase: Node's default, Phase.NONE (an exported graph is inference: training is
        # training/expand.py's)
        node = (ControlFlowNode if control_flow else Node)(
            name, op_type, inputs, [], attributes, domain, path)
        if control_flow or has_subgraph:
            _attach_subgraphs(node, proto, values)
        outputs = node.outputs
        for output_name in proto.output:
            if output_name:
                key = type_keys.get(output_name)
                known = _UNTYPED if key is None else types.get(key) or reader.typed(key)
                value = values[output_name] = Value(output_name, known[0], known[1],
                                                    activation, _nbytes_cache=known[2])
                outputs.append(value)  # a new value: the graph makes node its producer
        if isinstance(node, ControlFlowNode):
            trips = trips or TripCounter(proto_graph, values, graph.opset)
            _build_bodies(node, proto, graph, reader, trips)
            graph.add_node(node)
        else:
            graph.append_new(node)


def _no_value(name: str) -> Value | None:
    raise KeyError(name)


def _inputs(node_name: str, names: Iterable[str], values: dict[str, Value]) -> list[Value | None]:
    """A node's inputs, '' (an optional input left out) as None; the error for a name no
    value has."""
    try:
        return [values[n] if n else None for n in names]
    except KeyError as missing:
        raise _unproduced(node_name, missing.args[0]) from None


def _unproduced(node_name: str, missing: str) -> GraphmemError:
    return GraphmemError(
        f"node {node_name} reads '{missing}' before any node produces it: the graph"
        " is not topologically sorted or is broken; re-export it or run onnx.checker on it")


def _unique_name(name: str, used: set[str]) -> str:
    candidate, suffix = name, 1
    while candidate in used:
        suffix += 1
        candidate = f"{name}#{suffix}"
    used.add(candidate)
    return candidate


def _shared(seen: dict[tuple[tuple[str, AttributeValue], ...], dict[str, AttributeValue]],
            attributes: dict[str, AttributeValue]) -> dict[str, AttributeValue]:
    """The one dict of nodes with equal attributes; `attributes` itself where a value cannot
    be a key (a TypeProto: Optional's `type`, a list of them)."""
    key = tuple(attributes.items())
    try:
        return seen.setdefault(key, attributes)
    except TypeError:
        return attributes


def _attributes(proto: onnx.NodeProto) -> tuple[dict[str, AttributeValue], bool]:
    """The node's attributes as values (graphs and tensors left out), and whether it has a
    graph attribute (one walk over them: a decoder has tens of thousands of nodes)."""
    result: dict[str, AttributeValue] = {}
    has_subgraph = False
    for attribute in proto.attribute:
        kind = attribute.type
        if kind in _GRAPH_KINDS:
            has_subgraph = True
            continue
        if kind in _TENSOR_KINDS:
            continue
        field = _VALUE_FIELDS.get(kind)
        if field is None or attribute.ref_attr_name:  # rare kinds; onnx refuses a reference
            value = onnx.helper.get_attribute_value(attribute)
            result[attribute.name] = tuple(value) if isinstance(value, list) else value
        elif kind in _LIST_KINDS:
            result[attribute.name] = tuple(getattr(attribute, field))
        else:
            result[attribute.name] = getattr(attribute, field)
    return result, has_subgraph


# what onnx.helper.get_attribute_value reads of the common kinds (its field, a list as a
# tuple), read here without its walk through the kinds (one protobuf access each)
_VALUE_FIELDS = {AttributeProto.FLOAT: "f", AttributeProto.INT: "i", AttributeProto.STRING: "s",
                 AttributeProto.FLOATS: "floats", AttributeProto.INTS: "ints",
                 AttributeProto.STRINGS: "strings"}
_LIST_KINDS = frozenset({AttributeProto.FLOATS, AttributeProto.INTS, AttributeProto.STRINGS})


_GRAPH_KINDS = frozenset({AttributeProto.GRAPH, AttributeProto.GRAPHS})
_TENSOR_KINDS = frozenset({AttributeProto.TENSOR, AttributeProto.SPARSE_TENSOR})


def _attach_subgraphs(node: Node, proto: onnx.NodeProto, values: dict[str, Value]) -> None:
    """Count a control-flow node's body and make the outer values it reads its inputs.

    The body is not analysed op by op: the node is flagged, and every outer tensor the body
    reads stays live until the node runs (the conservative, never-too-small choice).
    """
    for body in subgraphs(proto):
        node.subgraph_node_count += _count_nodes(body)
        for name in sorted(_outer_references(body)):
            if name in values and values[name] not in node.inputs:
                node.inputs.append(values[name])


def _build_bodies(node: ControlFlowNode, proto: onnx.NodeProto, graph: Graph,
                  reader: _ShapeReader, trips: TripCounter) -> None:
    """Each body as a graph of its own (nested control flow recursively), the trip count, and
    the bodies' own peak as one transient output of the node (freed at its step). A body that
    cannot be built (a broken model) leaves the node counted conservatively, as before."""
    try:
        bodies = tuple((name, _body_graph(f"{node.name}.{name}", body, graph, reader))
                       for name, body in _named_subgraphs(proto))
    except (GraphmemError, RecursionError):
        node.notes.append("a body could not be read: counted conservatively")
        return
    node.bodies = bodies
    node.trip_count, node.trip_note = trips.trips(proto)
    # a trip count the data sets, here or in a body: a dim --dim binds
    graph.data_dims = graph.data_dims.union(trips.data_dims, *(b.data_dims for _, b in bodies))
    if not bodies:
        return
    peak = largest_at_probe(body_peak_bytes(body) for _, body in bodies)
    if peak.is_constant and int(peak) == 0:
        return
    scratch = Value(node.name + BODY_SCRATCH_SUFFIX, DType.UINT8, (peak,), Role.TEMPORARY)
    graph.values[scratch.name] = scratch
    node.add_output(scratch)


def _named_subgraphs(proto: onnx.NodeProto) -> list[tuple[str, onnx.GraphProto]]:
    """The bodies by attribute name, an If's then_branch first (onnx.helper sorts attributes
    by name, so files often hold else_branch first)."""
    bodies = [(a.name, a.g) for a in proto.attribute if a.type == AttributeProto.GRAPH]
    return sorted(bodies, key=lambda body: body[0] != "then_branch")


def _body_graph(name: str, body: onnx.GraphProto, outer: Graph, reader: _ShapeReader) -> Graph:
    """A body's nodes as a graph: its inputs, and a copy of each outer tensor it reads (as an
    input: the body's own use-def links stay out of the outer graph)."""
    graph = Graph(name=name, nodes=[], values={}, inputs=[], outputs=[], opset=outer.opset,
                  source_format="onnx")
    outer_reads = []
    for ref in sorted(_outer_references(body)):
        value = outer.values.get(ref)
        if value is not None:
            graph.values[ref] = Value(ref, value.dtype, value.shape, Role.INPUT)
            outer_reads.append(graph.values[ref])
    _add_initializers(body, graph.values)
    op_types = _add_constant_nodes(body, graph.values)
    inputs = [_input_value(v, graph.values, reader) for v in body.input]
    _add_nodes(graph, body, reader.type_keys(body), reader, op_types)
    graph.inputs = [v for v in (*inputs, *outer_reads) if v.role is Role.INPUT]
    graph.outputs = [_mark_output(graph.values, v) for v in body.output]
    return graph


def _count_nodes(graph: onnx.GraphProto) -> int:
    total = len(graph.node)
    for proto in graph.node:
        total += sum(_count_nodes(g) for g in subgraphs(proto))
    return total


def _outer_references(graph: onnx.GraphProto) -> set[str]:
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    used: set[str] = set()
    for proto in graph.node:
        used.update(n for n in proto.input if n)
        for body in subgraphs(proto):
            used |= _outer_references(body)
        defined.update(proto.output)
    return used - defined


def _mark_output(values: dict[str, Value], info: onnx.ValueInfoProto) -> Value:
    value = values.get(info.name)
    if value is None:
        raise GraphmemError(
            f"graph output '{info.name}' is produced by no node: the model is broken;"
            " re-export it or run onnx.checker on it"
        )
    if value.role is Role.ACTIVATION:
        value.role = Role.OUTPUT
    return value


def _mark_buffers(nodes: list[Node]) -> None:
    for node in [n for n in nodes if n.op_type in _BUFFER_INPUTS]:  # most graphs: none
        for index in _BUFFER_INPUTS[node.op_type]:
            value = node.input(index)
            if value is not None and value.role is Role.PARAMETER:
                value.role = Role.BUFFER
