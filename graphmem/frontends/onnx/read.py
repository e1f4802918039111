"""Reading an ONNX file: parse the protobuf without the weight bytes, check it, and prepare its
dims for shape inference.

External data is never read (a missing data file is fine: graphmem/frontends/onnx/untrusted.py
cuts it off), unnamed dynamic input dims get names so `--dim` can bind them, and every dim
name is replaced by a safe alias before inference prints expressions over it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import onnx
from google.protobuf.message import DecodeError

from graphmem.errors import GraphmemError, first_line
from graphmem.frontends.onnx.dense_forms import densify
from graphmem.frontends.onnx.lean_read import KEEP_BYTES, read_lean_model_bytes
from graphmem.frontends.onnx.limits import check_nesting
from graphmem.frontends.onnx.model_text import parse_model
from graphmem.frontends.onnx.untrusted import (
    check_regular_file,
    clear_tensor_data,
    external_location,
    external_tensors,
    model_tensors,
    read_model_bytes,
    subgraphs,
)
from graphmem.frontends.onnx.validation import Walked, strip_and_validate

# Initializer payloads above this size are dropped after loading: only dims and dtype matter,
# and shape inference copies the model.
_KEEP_INITIALIZER_BYTES = KEEP_BYTES
# Files from this size on are read without their large weights' bytes (lean_read.py): the
# memory of an analysis does not grow with weights held inside the file.
LEAN_READ_FROM_BYTES = 2**20


def read_model(path: Path) -> onnx.ModelProto:
    """Parse the model's protobuf, external data cut off (never read: untrusted.py) and the
    graph validated; bad files get one clear error."""
    return read_model_bodies(path)[0]


class ReadModel(NamedTuple):
    """read_model_bodies' answer: the model, and what validation's walk over its nodes found
    for the importer's steps not to read again."""

    model: onnx.ModelProto
    bodies: bool  # a node of the main graph holds a body
    op_types: list[str]  # the main graph's nodes', in order
    node_metadata: bool  # a node of the main graph keeps a metadata entry


def read_model_bodies(path: Path) -> ReadModel:
    """read_model, and whether a node of the main graph holds a body (a graph or graphs
    attribute, at any depth, an empty graphs list too: validation's walk counted them), so
    that the importer's dims need not be looked for in the nodes' attributes where none does
    (alias_dim_params), nor inference's control flow (infer.py `_splittable`); with the main
    graph's op types and whether a node keeps metadata (ReadModel)."""
    _check_path(path)
    data = _lean_bytes(path) if path.stat().st_size >= LEAN_READ_FROM_BYTES else None
    if data is None:
        data = read_model_bytes(path)
    try:
        model = parse_model(data)
    except (DecodeError, RuntimeWarning, ValueError, OSError) as error:
        raise GraphmemError(
            f"'{path}' is not a valid ONNX model ({first_line(error)}); the file may be"
            " truncated or of another format: re-export it with torch.onnx.export"
        ) from None
    del data  # the parsed copy is all that is kept
    model.DiscardUnknownFields()  # fields ONNX does not define: every copy would copy them
    if not model.opset_import or not model.graph.node:
        raise GraphmemError(
            f"'{path}' holds no ONNX graph (no opset or no nodes): pass an exported .onnx model"
        )
    if all(n.op_type == "Constant" and n.domain in ("", "ai.onnx") for n in model.graph.node):
        raise GraphmemError(f"'{path}' holds only Constant nodes: nothing runs, so there is no"
                            " memory to analyze; pass the exported model itself")
    # external data cut off, then the graph checked, its nodes trimmed on the same walk
    walked = strip_and_validate(model, keep_only_name_scope)
    check_nesting(model, walked.bodies)  # before any engine recurses through it (limits.py)
    _drop_large_payloads(model, walked)  # (nodes keep their op types: densify changes
    # Constants' attributes, initializers and sparse initializers only)
    return ReadModel(model, walked.main_bodies > 0, walked.op_types, walked.node_metadata)


NAME_SCOPES = "pkg.torch.onnx.name_scopes"  # what module_paths.py module_path_of reads


def keep_only_name_scopes(graph: onnx.GraphProto) -> None:
    """Drop what nothing reads from the main graph's nodes, in place: their doc strings and
    every metadata entry but the dynamo exporter's name scopes (module_paths.py module_path_of;
    onnxruntime plans and optimizes without them). The dynamo exporter writes each node's
    stack trace, fx node and class hierarchy: 13.6 of the 19.5 MB a 22,000-node export's graph
    holds, which every copy of the model, every pass of onnx's inference and onnxruntime's
    planner shapes would serialize and parse again. Done once, on the model as read: the
    first name-scopes entry is kept where it is and the others deleted around it (0.09 -> 0.04
    CPU s on the dynamo decoder's 22,103 nodes of five entries each). read_model does it
    node by node on validation's walk (keep_only_name_scope)."""
    for node in graph.node:
        keep_only_name_scope(node)


def keep_only_name_scope(node: onnx.NodeProto) -> bool:
    """keep_only_name_scopes of one node; whether it keeps an entry."""
    if node.doc_string:
        node.ClearField("doc_string")
    entries = node.metadata_props
    if not entries:
        return False
    for index, entry in enumerate(entries):
        if entry.key == NAME_SCOPES:
            del entries[index + 1:]
            del entries[:index]
            return True
    node.ClearField("metadata_props")
    return False


def external_data_files(path: Path) -> list[Path]:
    """The files a model's external tensors name, as paths in its folder (never opened: the
    CLI compares them with its output paths); [] when the model cannot be read (the importer
    says why). A large file is read lean, as read_model reads it."""
    try:
        _check_path(path)
        data = _lean_bytes(path) if path.stat().st_size >= LEAN_READ_FROM_BYTES else None
        data = data if data is not None else read_model_bytes(path)
        # a location is the value of an entry keyed "location", a string protobuf keeps as
        # its bytes: a file without them names no file and is not parsed (the parse and the
        # tensors' walk: 0.03 of 0.10 CPU s on the TorchScript decoder, 0.08 of 0.21 on the
        # dynamo one, whenever an output file exists already)
        if b"location" not in data:
            return []
        model = parse_model(data)
    except Exception:  # noqa: BLE001 - protobuf and GraphmemError: reported by the importer
        return []
    locations = {external_location(t) for _, t in external_tensors(model)}
    return [path.parent / name for name in sorted(locations) if name and "\0" not in name]


def _lean_bytes(path: Path) -> bytes | None:
    """The file without its large weights' bytes (lean_read.py); None: read it whole."""
    try:
        return read_lean_model_bytes(path)
    except OSError:  # read_model_bytes says what is wrong with the file
        return None


def _check_path(path: Path) -> None:
    """The path names a regular file of a size protobuf can parse (checked again on the open
    file by read_model_bytes)."""
    if not path.exists():
        raise GraphmemError(f"no such file '{path}': check the path to the .onnx model")
    check_regular_file(path, path.stat())


def _drop_large_payloads(model: onnx.ModelProto, walked: Walked) -> None:
    """Large tensors become data-less (unknown-valued), raw or typed data alike: initializers
    of the main graph and of bodies, Constant values, tensor attributes, in functions too;
    sparse tensors and large Constant lists first become dense ones (dense_forms.py, not
    walked where validation's walk saw none). `walked`: the tensors as validation's walk
    found them, walked again only where densify changed the model."""
    tensors = walked.tensors
    if not walked.dense and densify(model, _KEEP_INITIALIZER_BYTES, walked.compact):
        tensors = [tensor for _, tensor in model_tensors(model)]
    for tensor in tensors:
        if tensor.ByteSize() > _KEEP_INITIALIZER_BYTES:
            clear_tensor_data(tensor)


def name_dynamic_input_dims(graph: onnx.GraphProto) -> None:
    """Give every unnamed dynamic input dim a name (`input_ids_d0`) so `--dim` can bind it;
    an initializer listed among the inputs (IR < 4) keeps its dims."""
    initializer_names: set[str] | None = None  # made for the first unnamed dim only
    # the distinct types with no unnamed dim, by their bytes: 10^5 inputs share a few
    complete: set[bytes] = set()
    for value in graph.input:
        key = value.type.SerializeToString()
        if key in complete or not value.type.HasField("tensor_type"):
            continue
        tensor_type = value.type.tensor_type
        if not tensor_type.HasField("shape"):
            continue
        unnamed = [(index, dim) for index, dim in enumerate(tensor_type.shape.dim)
                   if not dim.HasField("dim_value") and not dim.dim_param]
        if not unnamed:
            complete.add(key)  # an initializer's too: it would have nothing to name
            continue
        if initializer_names is None:
            initializer_names = {t.name for t in graph.initializer}
        if value.name in initializer_names:
            continue
        for index, dim in unnamed:
            dim.dim_param = f"{_identifier(value.name)}_d{index}"


def fix_input_dims(graph: onnx.GraphProto, dims: Mapping[str, int]) -> None:
    for value in graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in dims:
                dim.dim_value = dims[dim.dim_param]


_ALIAS_PREFIX = "gm__dim"


def alias_dim_params(graph: onnx.GraphProto, bodies: bool = True) -> dict[str, str]:
    """Rename every dim_param (subgraphs included) to a safe identifier `gm__dimN`, in place;
    returns alias -> the model's name. `bodies` False: no node holds a graph (read_model_bodies),
    so the nodes are not walked for them (12-25 ms at 22,000 nodes).

    A model's dim names are untrusted text: the shape inference engines print expressions
    over them (`2*<name>`) that graphmem parses back (core/dim_parser.py). With safe aliases the
    only identifiers in those expressions are graphmem's own, and the model's names are
    put back as symbol names, never parsed.
    """
    aliases: dict[str, str] = {}
    _alias_graph(graph, aliases, {}, bodies)
    return {alias: name for name, alias in aliases.items()}


def _alias_graph(graph: onnx.GraphProto, aliases: dict[str, str],
                 renamed: dict[bytes, onnx.TypeProto | None], bodies: bool = True) -> None:
    """Alias the dims of `graph`'s declared types, then of its bodies', in that order (the
    aliases are numbered by first appearance)."""
    for info in (*graph.input, *graph.output, *graph.value_info):
        _alias_type(info.type, aliases, renamed)
    if not bodies:
        return
    for node in graph.node:
        if node.attribute:  # most nodes have none, and only an attribute holds a body
            for body in subgraphs(node):
                _alias_graph(body, aliases, renamed)


def _alias_type(type_proto: onnx.TypeProto, aliases: dict[str, str],
                renamed: dict[bytes, onnx.TypeProto | None]) -> None:
    """Alias one type's dim_params; each distinct type (by its bytes) is walked once and its
    renamed form copied onto the others (10^5 outputs of one type: one walk, C copies)."""
    key = type_proto.SerializeToString()
    if key in renamed:
        done = renamed[key]
        if done is not None:
            type_proto.CopyFrom(done)
        return
    named = [dim for dim in _type_dims(type_proto) if dim.dim_param]
    for dim in named:
        dim.dim_param = aliases.setdefault(dim.dim_param, f"{_ALIAS_PREFIX}{len(aliases)}")
    done = None
    if named:
        done = onnx.TypeProto()
        done.CopyFrom(type_proto)
    renamed[key] = done


def _type_dims(type_proto: onnx.TypeProto) -> list[onnx.TensorShapeProto.Dimension]:
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type" and type_proto.tensor_type.HasField("shape"):
        return list(type_proto.tensor_type.shape.dim)
    if kind == "sequence_type":
        return _type_dims(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return _type_dims(type_proto.optional_type.elem_type)
    return []


def _identifier(name: str) -> str:
    text = re.sub(r"\W", "_", name)
    return text if text and not text[0].isdigit() else f"v_{text}"
