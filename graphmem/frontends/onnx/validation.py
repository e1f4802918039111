"""Validation of an untrusted ONNX model (untrusted.py's checks on the graph): broken graphs are
refused with one line naming the tensor or node before any engine trips over them: a tensor
written twice, inline data of the wrong size, an element type ONNX does not define, an absurd
rank, negative dims or sizes beyond 2**63 bytes; and in the main graph what the IR builder would
refuse only after shape inference: a graph output no node makes, a node reading a value before
any node makes it. All of it on one walk over the model's nodes (`_ModelWalk`), before the
model is copied or inferred: a graph of 10**6 empty nodes is refused at its reading.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import NamedTuple

import onnx
from onnx import AttributeProto, TensorProto, helper
from onnx.external_data_helper import uses_external_data

from graphmem.errors import GraphmemError
from graphmem.frontends.onnx.untrusted import (
    KNOWN_ELEMENT_TYPES,
    MAX_RANK,
    MAX_TENSOR_BYTES,
    TENSOR_ATTRIBUTES,
    attribute_tensors,
    clear_tensor_data,
    dtype_name,
    element_bits,
    expected_data,
    graph_tensors,
    held_data,
    node_label,
    node_tensors,
    quoted,
    sparse_tensors,
)

_FIX = "the model file is broken; re-export it"


# ----- validation --------------------------------------------------------------------------
def validate_graph(model: onnx.ModelProto) -> None:
    """Refuse, with one line naming the tensor or node, what would break graphmem's engines."""
    _validate(_ModelWalk(model))


def strip_and_validate(model: onnx.ModelProto,
                       trim: Callable[[onnx.NodeProto], bool] | None = None) -> Walked:
    """strip_external_data, then validate_graph, on one walk over the model's nodes (a
    decoder has tens of thousands; each walk over them took 0.005-0.02 s). Returns what that
    walk found, for read.py's later steps not to walk the nodes again. `trim`: called on each
    node of the main graph in the same walk (read.py drops what nothing reads), saying
    whether the node keeps a metadata entry."""
    walk = _ModelWalk(model, trim)
    _validate(walk, strip=True)
    alone = not model.functions and not model.training_info  # the walk saw every scope
    return Walked(walk.tensors, len(walk.graphs) - 1 if alone else None,
                  alone and not walk.compact, walk.graph_attributes,
                  ([graph for graph, _ in walk.graphs], walk.compact_nodes) if alone else None,
                  walk.op_types, walk.node_metadata)


class Walked(NamedTuple):
    """What validation's walk found: the tensors as model_tensors lists them; how many
    control-flow bodies the model has (None: not counted, the model has functions or training
    graphs); whether no tensor is in a compact form dense_forms.py expands (no sparse tensor,
    no Constant list attribute; False: not known); the graph and graphs attributes of the
    main graph's nodes, at any depth (counted whether or not the model has functions; a
    graphs attribute counts, holding no graph or several); every graph and the nodes
    with an attribute of a compact form's name, where the walk saw every scope (else None:
    dense_forms.py walks the model itself); the main graph's nodes' op types, in order, and
    whether one of them keeps a metadata entry after `trim` (True: not known, no `trim`)."""

    tensors: list[TensorProto]
    bodies: int | None
    dense: bool
    main_bodies: int
    compact: tuple[list[onnx.GraphProto], list[onnx.NodeProto]] | None
    op_types: list[str]
    node_metadata: bool


def _validate(walk: _ModelWalk, strip: bool = False) -> None:
    """The checks in validate_graph's order: every tensor (`strip`: its external data cut off
    first), then graph by graph its value infos, its single producers (the main graph: and its
    outputs' makers) and its attribute references."""
    _check_tensors(walk, strip)
    for (graph, reference), made in zip(walk.graphs, walk.made, strict=True):
        _check_value_infos(graph)
        defined = _check_single_producers(graph, made)
        if graph is walk.main:  # a body's output may be an outer value
            _check_outputs_made(graph, defined)
        if reference is not None:
            node, attribute = reference
            raise GraphmemError(
                f"attribute {quoted(attribute.name)} of {node_label(node)} refers to a"
                f" function attribute ({quoted(attribute.ref_attr_name)}) outside any"
                f" function: {_FIX}")


class _ModelWalk:
    """What validation reads, found in one walk over the nodes: the tensors in model_tensors'
    order, and every graph (the main one, then each body before the bodies inside it), each
    with its first node attribute that refers to a function attribute (`ref_attr_name`: a
    graph has none). A tensor's label is made only for an error (`label`): a decoder has
    10,000 initializers and 8,000 Constant values."""

    def __init__(self, model: onnx.ModelProto,
                 trim: Callable[[onnx.NodeProto], bool] | None = None) -> None:
        self.tensors: list[TensorProto] = []
        # by position in `tensors`: the label, or the attribute and node that make it (an
        # attribute's one tensor); none: an initializer, labelled by its name
        self.labels: dict[int, str | tuple[AttributeProto, onnx.NodeProto]] = {}
        self.graphs: list[tuple[onnx.GraphProto,
                                tuple[onnx.NodeProto, AttributeProto] | None]] = []
        self.made: list[list[str]] = []  # by graph: its nodes' outputs ('' included)
        self.main = model.graph
        self.compact = False  # a sparse tensor or a Constant list attribute seen
        self.compact_nodes: list[onnx.NodeProto] = []  # with an attribute of such a name
        self.graph_attributes = 0  # of the graph or graphs kind, in the main graph's walk
        # the main graph's op types, read once here for the importer's steps (importer.py,
        # graph_index.py), and whether a node keeps metadata (build.py reads it where one does)
        self.op_types: list[str] = []
        self.node_metadata = trim is None
        self._graph(model.graph, trim)
        for function in model.functions:
            for node in function.node:
                self._labelled(node_tensors(node))
        for info in model.training_info:
            self._labelled(graph_tensors(info.initialization))
            self._labelled(graph_tensors(info.algorithm))

    def label(self, index: int) -> str:
        """How an error names the tensor at `index` (model_tensors' label)."""
        label = self.labels.get(index)
        if label is None:
            return f"initializer {quoted(self.tensors[index].name)}"
        if isinstance(label, str):
            return label
        attribute, node = label
        return f"attribute {quoted(attribute.name)} of {node_label(node)}"

    def _labelled(self, tensors: Iterable[tuple[str, TensorProto]]) -> None:
        for label, tensor in tensors:
            self.labels[len(self.tensors)] = label
            self.tensors.append(tensor)

    def _graph(self, graph: onnx.GraphProto,
               trim: Callable[[onnx.NodeProto], bool] | None = None) -> None:
        """graph_tensors' walk, recording each graph before its bodies, with its nodes'
        outputs (the single-producer check's, gathered on the same walk: one walk over the
        nodes instead of two, 0.005-0.01 s at 22,000 nodes)."""
        index = len(self.graphs)
        self.graphs.append((graph, None))
        made: list[str] = []
        self.made.append(made)
        reference = None
        tensors = self.tensors
        tensors.extend(graph.initializer)
        for sparse in graph.sparse_initializer:
            self.compact = True
            self._labelled(sparse_tensors(f"sparse initializer {quoted(sparse.values.name)}",
                                          sparse))
        op_types = self.op_types if index == 0 else None  # the main graph's
        for node in graph.node:
            made.extend(node.output)
            if op_types is not None:
                op_types.append(node.op_type)
            if trim is not None and trim(node):
                self.node_metadata = True
            for attribute in node.attribute:
                if reference is None and attribute.ref_attr_name:
                    reference = (node, attribute)
                kind = attribute.type
                if attribute.name in _COMPACT_NAMES:  # of any type, on any op: looked at
                    self.compact = True
                    if not self.compact_nodes or self.compact_nodes[-1] is not node:
                        self.compact_nodes.append(node)
                if kind == AttributeProto.GRAPH:
                    self.graph_attributes += 1
                    self._graph(attribute.g)
                elif kind == AttributeProto.GRAPHS:
                    self.graph_attributes += 1
                    for body in attribute.graphs:
                        self._graph(body)
                elif kind == AttributeProto.TENSOR:  # labelled at an error only
                    self.labels[len(tensors)] = (attribute, node)
                    tensors.append(attribute.t)
                elif kind in TENSOR_ATTRIBUTES:
                    label = f"attribute {quoted(attribute.name)} of {node_label(node)}"
                    self._labelled(attribute_tensors(label, attribute))
        self.graphs[index] = (graph, reference)


# the attributes dense_forms.py expands (a Constant's sparse_value and list attributes)
_COMPACT_NAMES = frozenset({"sparse_value", "value_floats", "value_ints", "value_strings"})


def _check_tensors(walk: _ModelWalk, strip: bool) -> None:
    """_check_tensor on every tensor of the walk, in order (`strip`: external data cut off
    first). Its verdict is a function of the dtype, the dims, whether the data is external,
    whether it is raw and how much is held: a tensor of a key that passed passes, so each
    distinct key is checked once (a decoder: 11,532 tensors, 14 keys). A tensor of a dtype
    without a typed field is checked alone (refused: an unknown element type)."""
    passed: set[tuple[int, tuple[int, ...], int, bool, int]] = set()
    external = TensorProto.EXTERNAL
    for index, tensor in enumerate(walk.tensors):
        location = tensor.data_location
        field = _TYPED_FIELDS.get(tensor.data_type)
        if strip and (location == external or tensor.external_data):
            clear_tensor_data(tensor)
            location, raw, held = TensorProto.DEFAULT, False, 0  # no data field is set now
        elif field is not None:
            raw = tensor.HasField("raw_data")
            held = len(tensor.raw_data) if raw else len(getattr(tensor, field))
        key = None
        if field is not None:
            key = (tensor.data_type, tuple(tensor.dims), location, raw, held)
            if key in passed:
                continue
        _check_tensor(walk.label(index), tensor)
        if key is not None:
            passed.add(key)


# the typed field each element type ONNX defines keeps its data in (held_data)
_TYPED_FIELDS = {t: helper.tensor_dtype_to_field(t) for t in KNOWN_ELEMENT_TYPES}


def _check_tensor(label: str, tensor: TensorProto) -> None:
    if tensor.data_type not in KNOWN_ELEMENT_TYPES:
        raise GraphmemError(f"{label} has element type {tensor.data_type}, which ONNX does not"
                            f" define: {_FIX}")
    dims = [int(d) for d in tensor.dims]
    _check_dims(label, dims)
    size_bytes = math.prod(dims) * element_bits(tensor.data_type) // 8
    if size_bytes >= MAX_TENSOR_BYTES:
        raise GraphmemError(f"{label} of dims {dims} would take {size_bytes:,} bytes, beyond"
                            f" 2**63: {_FIX}")
    held = None if uses_external_data(tensor) else held_data(tensor)
    raw = tensor.HasField("raw_data")
    if held is not None and held != expected_data(tensor, raw):
        what = "bytes of raw_data" if raw else (
            f"entries of {helper.tensor_dtype_to_field(tensor.data_type)}")
        raise GraphmemError(f"{label} holds {held:,} {what}, but dims {dims} of"
                            f" {dtype_name(tensor.data_type)} need"
                            f" {max(expected_data(tensor, raw), 0):,}: {_FIX}")


def _check_dims(label: str, dims: list[int]) -> None:
    if len(dims) > MAX_RANK:
        raise GraphmemError(f"{label} has rank {len(dims)}, above the limit of {MAX_RANK}:"
                            f" {_FIX}")
    if any(d < 0 for d in dims):
        raise GraphmemError(f"{label} has a negative dim in {dims}: {_FIX}")


def _check_value_infos(graph: onnx.GraphProto) -> None:
    """Declared inputs, outputs and value_info: an element type ONNX defines (0: not said),
    a rank within MAX_RANK. Each distinct type (by its bytes) checked once, at its first
    value: the one an error names (10^5 inputs of one type: one check)."""
    checked: set[bytes] = set()
    for info in (*graph.input, *graph.output, *graph.value_info):
        key = info.type.SerializeToString()
        if key not in checked:
            checked.add(key)
            _check_value_type(info)


def _check_value_type(info: onnx.ValueInfoProto) -> None:
    if not info.type.HasField("tensor_type"):
        return
    tensor_type = info.type.tensor_type
    label = f"value {quoted(info.name)}"
    if tensor_type.elem_type and tensor_type.elem_type not in KNOWN_ELEMENT_TYPES:
        raise GraphmemError(f"{label} has element type {tensor_type.elem_type}, which ONNX"
                            f" does not define: {_FIX}")
    if tensor_type.HasField("shape") and len(tensor_type.shape.dim) > MAX_RANK:
        raise GraphmemError(f"{label} has rank {len(tensor_type.shape.dim)}, above the"
                            f" limit of {MAX_RANK}: {_FIX}")


def _check_single_producers(graph: onnx.GraphProto, made: list[str] | None = None) -> set[str]:
    """Each tensor has one definition: one initializer, or one node output, or a graph input
    (an initializer may be listed among the inputs too, as IR < 4 requires). Returns every
    name defined. `made`: the nodes' outputs in order, '' included, where a walk gathered
    them."""
    # the definition: a phrase, or the node writing it (labelled only for an error)
    defined: dict[str, str | onnx.NodeProto] = {i.name: "a graph input" for i in graph.input}
    initializers = [tensor.name for tensor in graph.initializer]
    if len(set(initializers)) == len(initializers):  # none defined twice: all at once
        defined.update(dict.fromkeys(initializers, "an initializer"))
    else:
        for name in initializers:
            if defined.get(name, "a graph input") != "a graph input":
                raise GraphmemError(f"initializer {quoted(name)} is defined twice: {_FIX}")
            defined[name] = "an initializer"
    # the nodes' outputs as one list (an optional output left out is ''): a name written
    # twice is looked for, node by node, only when there is one
    if made is None:
        made = [name for node in graph.node for name in node.output]
    names = set(made)
    names.discard("")
    if len(names) != len(made) - made.count("") or not names.isdisjoint(defined):
        _refuse_a_second_producer(graph, defined)
    names.update(defined)
    return names


def _refuse_a_second_producer(graph: onnx.GraphProto,
                              defined: dict[str, str | onnx.NodeProto]) -> None:
    """The error for the first node output already defined (an input, an initializer or an
    earlier node's output)."""
    for node in graph.node:
        for name in node.output:
            if not name:
                continue
            if name in defined:
                before = defined[name]
                already = (before if isinstance(before, str)
                           else f"written by {node_label(before)}")
                raise GraphmemError(f"tensor {quoted(name)} is written by {node_label(node)}"
                                    f" but is already {already}: {_FIX}")
            defined[name] = node


def _check_outputs_made(graph: onnx.GraphProto, defined: set[str]) -> None:
    """Every output of the main graph is made by a node, or is an input or an initializer
    (build.py refuses the same after shape inference: a file of 10**6 empty nodes took
    1,084 MiB and 13 CPU s to get there)."""
    for info in graph.output:
        if info.name not in defined:
            raise GraphmemError(
                f"graph output {quoted(info.name)} is produced by no node: the model is broken;"
                " re-export it or run onnx.checker on it")
