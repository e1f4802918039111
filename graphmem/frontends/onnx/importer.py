"""The ONNX importer: the only module that reads ONNX protobuf.

It loads the graph without the weight bytes (external data is never read, and a missing data
file is fine), names unnamed dynamic input dims so they can be bound, runs onnxruntime's
symbolic shape inference (falling back to onnx's own), and builds graphmem's IR.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import warnings as py_warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import AttributeProto, TensorProto

from graphmem.core.ir import AttributeValue, DType, Graph, Node, Role, Shape, Value
from graphmem.core.symbolic import SymInt, parse_dim
from graphmem.errors import GraphmemError
from graphmem.frontends.onnx.fold import default_opset, fold_constants, restore_nodes
from graphmem.frontends.onnx.shape_gaps import fill_shape_gaps
from graphmem.frontends.onnx.untrusted import (
    check_regular_file,
    clear_tensor_data,
    read_model_bytes,
    strip_external_data,
    validate_graph,
)

# Initializer payloads above this size are dropped after loading: only dims and dtype matter,
# and shape inference copies the model.
_KEEP_INITIALIZER_BYTES = 64 * 1024

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

_CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})
# BatchNormalization inputs 3 and 4 are running statistics: buffers, not parameters.
_BUFFER_INPUTS = {"BatchNormalization": (3, 4)}


@dataclass
class OnnxImport:
    """The imported graph and what the importer noticed on the way."""

    graph: Graph
    shape_inference: str  # which inference produced the shapes
    warnings: list[str] = field(default_factory=list)


def load_onnx(path: str | Path) -> Graph:
    return import_onnx(path).graph


def import_onnx(path: str | Path, input_dims: Mapping[str, int] | None = None) -> OnnxImport:
    """Import a model; `input_dims` fixes named input dims before shape inference.

    Fixing dims is the fallback for models whose symbolic inference fails: with concrete
    input shapes, onnx's own inference can finish the job.
    """
    model = read_model(Path(path))
    warnings: list[str] = []
    _name_dynamic_input_dims(model.graph)
    if input_dims:
        _fix_input_dims(model.graph, input_dims)
    dim_names = _alias_dim_params(model.graph)  # inference sees safe names only
    folded = fold_constants(model)  # inference sees literal shape values (onnx_fold.py)
    inferred, engine = _infer_shapes(model, warnings, dim_names)
    restore_nodes(inferred, folded)
    graph = _build_graph(inferred, Path(path).stem, dim_names)
    gaps = fill_shape_gaps(graph)
    if gaps.filled:
        engine += f" + graphmem rules for {len(gaps.filled)} values"
    return OnnxImport(graph=graph, shape_inference=engine, warnings=warnings)


# ----- reading -----------------------------------------------------------------------------
def read_model(path: Path) -> onnx.ModelProto:
    """Parse the model's protobuf, external data cut off (never read: onnx_untrusted.py) and the
    graph validated; bad files get one clear error."""
    _check_path(path)
    data = read_model_bytes(path)
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, RuntimeWarning, ValueError, OSError) as error:
        raise GraphmemError(
            f"'{path}' is not a valid ONNX model ({_first_line(error)}); the file may be"
            " truncated or of another format: re-export it with torch.onnx.export"
        ) from None
    del data  # the parsed copy is all that is kept
    if not model.opset_import or not model.graph.node:
        raise GraphmemError(
            f"'{path}' holds no ONNX graph (no opset or no nodes): pass an exported .onnx model"
        )
    if all(n.op_type == "Constant" and n.domain in ("", "ai.onnx") for n in model.graph.node):
        raise GraphmemError(f"'{path}' holds only Constant nodes: nothing runs, so there is no"
                            " memory to analyze; pass the exported model itself")
    strip_external_data(model)
    validate_graph(model)
    _drop_large_payloads(model.graph)
    return model


def _check_path(path: Path) -> None:
    """The path names a regular file of a size protobuf can parse (checked again on the open
    file by read_model_bytes)."""
    if not path.exists():
        raise GraphmemError(f"no such file '{path}': check the path to the .onnx model")
    check_regular_file(path, path.stat())


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _drop_large_payloads(graph: onnx.GraphProto) -> None:
    """Large initializers become data-less (unknown-valued), raw or typed data alike."""
    for tensor in graph.initializer:
        if tensor.ByteSize() > _KEEP_INITIALIZER_BYTES:
            clear_tensor_data(tensor)


def _name_dynamic_input_dims(graph: onnx.GraphProto) -> None:
    """Give every unnamed dynamic input dim a name (`input_ids_d0`) so `--dim` can bind it."""
    initializer_names = {t.name for t in graph.initializer}
    for value in graph.input:
        if value.name in initializer_names or not value.type.HasField("tensor_type"):
            continue
        tensor_type = value.type.tensor_type
        if not tensor_type.HasField("shape"):
            continue
        for index, dim in enumerate(tensor_type.shape.dim):
            if not dim.HasField("dim_value") and not dim.dim_param:
                dim.dim_param = f"{_identifier(value.name)}_d{index}"


def _fix_input_dims(graph: onnx.GraphProto, dims: Mapping[str, int]) -> None:
    for value in graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in dims:
                dim.dim_value = dims[dim.dim_param]


_ALIAS_PREFIX = "gm__dim"


def _alias_dim_params(graph: onnx.GraphProto) -> dict[str, str]:
    """Rename every dim_param (subgraphs included) to a safe identifier `gm__dimN`, in place;
    returns alias -> the model's name.

    A model's dim names are untrusted text: the shape inference engines print expressions
    over them (`2*<name>`) that graphmem parses back (core/dim_parser.py). With safe aliases the
    only identifiers in those expressions are graphmem's own, and the model's names are
    put back as symbol names, never parsed.
    """
    aliases: dict[str, str] = {}
    for dim in _declared_dims(graph):
        if dim.dim_param:
            alias = aliases.setdefault(dim.dim_param, f"{_ALIAS_PREFIX}{len(aliases)}")
            dim.dim_param = alias
    return {alias: name for name, alias in aliases.items()}


def _declared_dims(graph: onnx.GraphProto) -> list[onnx.TensorShapeProto.Dimension]:
    dims: list[onnx.TensorShapeProto.Dimension] = []
    for info in (*graph.input, *graph.output, *graph.value_info):
        dims.extend(_type_dims(info.type))
    for node in graph.node:
        for body in _subgraphs(node):
            dims.extend(_declared_dims(body))
    return dims


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


# ----- shape inference -----------------------------------------------------------------------
def _infer_shapes(model: onnx.ModelProto, warnings: list[str],
                  dim_names: Mapping[str, str]) -> tuple[onnx.ModelProto, str]:
    """onnxruntime's symbolic inference; where its rules give up on some nodes, the shapes
    onnx's own inference (with data propagation) finds are merged in, value by value."""
    try:
        failed_ops: list[str] = []
        inferred = _ort_symbolic_inference(model, failed_ops)
    except Exception as error:  # noqa: BLE001 - any failure there falls back to onnx's inference
        warnings.append(
            f"onnxruntime symbolic shape inference failed ({_first_line(error)});"
            " used onnx shape inference instead"
        )
        fallback = _onnx_inference(model, warnings)
        return (fallback, "onnx shape inference") if fallback else (model, "none")
    changed = _changed_input_dims(model.graph, inferred.graph, dim_names)
    if changed:
        warnings.append(
            f"onnxruntime symbolic shape inference changed the input dims ({changed});"
            " used onnx shape inference instead"
        )
        fallback = _onnx_inference(model, warnings)
        return (fallback, "onnx shape inference") if fallback else (model, "none")
    if not failed_ops:
        return inferred, "onnxruntime symbolic shape inference"
    warnings.append(
        f"onnxruntime's symbolic rules could not follow {len(failed_ops)} nodes (e.g."
        f" {failed_ops[0]}); onnx's own inference filled in what it could"
    )
    fallback = _onnx_inference(model, warnings)
    if fallback is not None:
        _merge_value_infos(inferred.graph, fallback.graph)
    return inferred, "onnxruntime symbolic shape inference + onnx shape inference"


def _dims_of(info: onnx.ValueInfoProto, dim_names: Mapping[str, str]) -> list[str | int]:
    return [dim_names.get(d.dim_param, d.dim_param) or d.dim_value
            for d in info.type.tensor_type.shape.dim]


def _changed_input_dims(before: onnx.GraphProto, after: onnx.GraphProto,
                        dim_names: Mapping[str, str]) -> str:
    """The first graph input whose declared dims inference rewrote, as text ("" if none).
    Inference must never change what the model declares: onnxruntime 1.30's symbolic rules
    turn a dynamo export's [batch, seq] input into [16, 16] and its logits into rank 5."""
    declared = {v.name: _dims_of(v, dim_names) for v in before.input}
    for info in after.input:
        old = declared.get(info.name)
        new = _dims_of(info, dim_names)
        if old is not None and old and old != new:
            return f"{info.name}: {old} became {new}"
    return ""


def _onnx_inference(model: onnx.ModelProto, warnings: list[str]) -> onnx.ModelProto | None:
    try:
        with _quiet_numpy():
            return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as error:  # noqa: BLE001
        warnings.append(f"onnx shape inference failed ({_first_line(error)})")
        return None


def _merge_value_infos(target: onnx.GraphProto, source: onnx.GraphProto) -> None:
    """Replace a value's type in `target` where `source` knows more of its shape."""
    better = {v.name: v for v in source.value_info}
    for info in target.value_info:
        candidate = better.get(info.name)
        if candidate is not None and _known_dims(candidate) > _known_dims(info):
            info.CopyFrom(candidate)
    known = {v.name for v in target.value_info}
    target.value_info.extend(v for n, v in better.items() if n not in known)


def _known_dims(info: onnx.ValueInfoProto) -> int:
    """How much of a shape is known: -1 without a rank, else the count of known dims."""
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return -1
    return sum(
        1 for d in tensor_type.shape.dim
        if d.HasField("dim_value") or (d.dim_param and not d.dim_param.startswith("unk__"))
    )


def _tolerant(rule: Callable[[onnx.NodeProto], None],
              failed_ops: list[str]) -> Callable[[onnx.NodeProto], None]:
    """One op's symbolic rule failing keeps onnx's own inference for that node (which the
    engine ran just before) instead of aborting the whole model."""

    def run(node: onnx.NodeProto) -> None:
        try:
            rule(node)
        except Exception:  # noqa: BLE001 - onnxruntime's rules assert on shapes they can't follow
            failed_ops.append(f"{node.op_type} {node.name}")

    return run


def _ort_symbolic_inference(model: onnx.ModelProto, failed_ops: list[str]) -> onnx.ModelProto:
    """Run onnxruntime's symbolic shape inference to its fixed point.

    SymbolicShapeInference.infer_shapes writes `sym_shape_infer_temp.onnx` into the current
    directory when a shape stays unknown; graphmem must not write into the user's folders,
    so the same steps are driven here and incomplete shapes are kept as unknown.
    """
    symbolic_shape_infer = _symbolic_shape_infer_module()
    logging.getLogger(symbolic_shape_infer.__name__).setLevel(logging.ERROR)
    engine = symbolic_shape_infer.SymbolicShapeInference(
        int_max=2**31 - 1, auto_merge=True, guess_output_rank=False, verbose=0
    )
    engine.dispatcher_ = {
        op: _tolerant(rule, failed_ops) for op, rule in engine.dispatcher_.items()
    }
    with _quiet_numpy():  # its sympy/numpy arithmetic on a model's values warns on overflow
        engine._preprocess(model)
        while engine.run_:
            engine._infer_impl()
        engine._update_output_from_vi()
    return engine.out_mp_


@contextmanager
def _quiet_numpy() -> Iterator[None]:
    """numpy's RuntimeWarnings (overflow, divide by zero on a model's constants) are not the
    user's to read: what inference could not follow shows as unknown shapes."""
    with py_warnings.catch_warnings(), np.errstate(all="ignore"):
        py_warnings.simplefilter("ignore", RuntimeWarning)
        yield


@cache
def _symbolic_shape_infer_module() -> ModuleType:
    """onnxruntime.tools.symbolic_shape_infer, loaded from its file.

    Importing it as `onnxruntime.tools.symbolic_shape_infer` runs the package's __init__,
    which imports torch when it is installed: a second of start-up the ONNX path never needs.
    """
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or spec.origin is None:
        raise ImportError("onnxruntime is not installed")
    path = Path(spec.origin).parent / "tools" / "symbolic_shape_infer.py"
    module_spec = importlib.util.spec_from_file_location("graphmem_ort_symbolic_shape_infer", path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


# ----- building the IR ---------------------------------------------------------------------
def _build_graph(model: onnx.ModelProto, default_name: str,
                 dim_names: Mapping[str, str]) -> Graph:
    onnx_graph = model.graph
    values: dict[str, Value] = {}
    _add_initializers(onnx_graph, values)
    _add_constant_nodes(onnx_graph, values)
    reader = _ShapeReader(dim_names)
    inputs = [_input_value(v, values, reader) for v in onnx_graph.input]
    value_infos = {v.name: v for v in (*onnx_graph.value_info, *onnx_graph.output)}
    nodes = _build_nodes(onnx_graph, values, value_infos, reader)
    outputs = [_mark_output(values, v) for v in onnx_graph.output]
    _mark_buffers(nodes)
    return Graph(
        name=onnx_graph.name or default_name,
        nodes=nodes,
        values=values,
        inputs=[v for v in inputs if v.role is Role.INPUT],
        outputs=outputs,
        opset=default_opset(model),
        source_format="onnx",
    )


def _add_initializers(graph: onnx.GraphProto, values: dict[str, Value]) -> None:
    for tensor in graph.initializer:
        dtype = _DTYPES.get(tensor.data_type, DType.UNKNOWN)
        shape: Shape = tuple(SymInt.const(int(d)) for d in tensor.dims)
        numel = 1
        for d in tensor.dims:
            numel *= int(d)
        role = Role.PARAMETER if dtype.is_float and numel > 1 else Role.CONSTANT
        values[tensor.name] = Value(tensor.name, dtype, shape, role)


def _add_constant_nodes(graph: onnx.GraphProto, values: dict[str, Value]) -> None:
    """Constant nodes become constant values (onnxruntime turns them into initializers too)."""
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            dtype, shape = _constant_type(node)
            values[node.output[0]] = Value(node.output[0], dtype, shape, Role.CONSTANT)


def _constant_type(node: onnx.NodeProto) -> tuple[DType, Shape]:
    attribute = node.attribute[0] if node.attribute else None
    if attribute is not None and attribute.type == AttributeProto.TENSOR:
        tensor = attribute.t
        return _DTYPES.get(tensor.data_type, DType.UNKNOWN), tuple(
            SymInt.const(int(d)) for d in tensor.dims
        )
    if attribute is not None and attribute.name.endswith("s"):  # value_ints, value_floats
        count = len(onnx.helper.get_attribute_value(attribute))
        dtype = DType.INT64 if attribute.name == "value_ints" else DType.FLOAT32
        return dtype, (SymInt.const(count),)
    is_int = attribute is not None and attribute.name == "value_int"
    return (DType.INT64 if is_int else DType.FLOAT32), ()


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

    def value(self, info: onnx.ValueInfoProto | None, role: Role, name: str = "") -> Value:
        if info is None or not info.type.HasField("tensor_type"):
            return Value(name or (info.name if info else ""), DType.UNKNOWN, None, role)
        tensor_type = info.type.tensor_type
        dtype = _DTYPES.get(tensor_type.elem_type, DType.UNKNOWN)
        shape = None
        if tensor_type.HasField("shape"):
            shape = tuple(self.dim(d) for d in tensor_type.shape.dim)
        return Value(info.name, dtype, shape, role)

    def dim(self, dim: onnx.TensorShapeProto.Dimension) -> SymInt | None:
        if dim.HasField("dim_value") and dim.dim_value >= 0:
            return SymInt.const(int(dim.dim_value))
        text = dim.dim_param
        # `unk__N` is onnxruntime's name for a size it could not infer: an unknown, not a dim.
        if not text or text.startswith("unk__"):
            return None
        if text not in self.parsed:
            self.parsed[text] = SymInt.from_sympy(parse_dim(text, self.dim_names))
        return self.parsed[text]


def _build_nodes(
    graph: onnx.GraphProto,
    values: dict[str, Value],
    value_infos: dict[str, onnx.ValueInfoProto],
    reader: _ShapeReader,
) -> list[Node]:
    nodes: list[Node] = []
    used_names: set[str] = set()
    for index, proto in enumerate(graph.node):
        if proto.op_type == "Constant" and proto.domain in ("", "ai.onnx"):
            continue
        name = _unique_name(proto.name or f"{proto.op_type}_{index}", used_names)
        node = Node(
            name=name,
            op_type=proto.op_type,
            inputs=[_lookup_input(values, n, name) if n else None for n in proto.input],
            outputs=[],
            attributes=_attributes(proto),
            domain=proto.domain,
            module_path=module_path_of(proto),
        )
        if proto.op_type in _CONTROL_FLOW_OPS or _has_subgraph(proto):
            _attach_subgraphs(node, proto, values)
        for output_name in proto.output:
            if output_name:
                _add_output(node, output_name, values, value_infos, reader)
        for value in node.present_inputs:
            value.consumers.append(node)
        nodes.append(node)
    return nodes


def module_path_of(proto: onnx.NodeProto) -> str:
    """The PyTorch module a node was exported from, where the exporter recorded it.

    The dynamo exporter writes `pkg.torch.onnx.name_scopes`, e.g. `['', 'layer2',
    'layer2.2', 'layer2.2.bn1', '_native_batch_norm_...']`: the op's own name last, the full
    module path before it. The TorchScript exporter names nodes by scope,
    `/layer2/layer2.2/conv1/Conv`: each scope is an attribute name (`conv1`) or refines the
    scope before it (`layer2` -> `layer2.2`, `downsample` -> `downsample.0`); the op is last.
    Other producers: ''.
    """
    for prop in proto.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            return _path_from_name_scopes(prop.value)
    if not proto.name.startswith("/"):
        return ""
    parent, previous = "", ""
    for scope in proto.name.split("/")[1:-1]:
        if not (previous and scope.startswith(previous + ".")):  # a child, not a refinement
            parent = f"{parent}.{previous}" if parent and previous else parent or previous
        previous = scope
    return f"{parent}.{previous}" if parent and previous else parent or previous


def _path_from_name_scopes(text: str) -> str:
    scopes = [s.strip().strip("'\"") for s in text.strip("[]").split(",")]
    modules = [s for s in scopes[:-1] if s and not s.startswith("_")]
    return modules[-1] if modules else ""


def _unique_name(name: str, used: set[str]) -> str:
    candidate, suffix = name, 1
    while candidate in used:
        suffix += 1
        candidate = f"{name}#{suffix}"
    used.add(candidate)
    return candidate


def _lookup_input(values: dict[str, Value], name: str, node_name: str) -> Value:
    if name not in values:  # not topologically sorted, or a dangling reference
        raise GraphmemError(
            f"node {node_name} reads '{name}' before any node produces it: the graph is not"
            " topologically sorted or is broken; re-export it or run onnx.checker on it"
        )
    return values[name]


def _add_output(
    node: Node, name: str, values: dict[str, Value], infos: dict[str, onnx.ValueInfoProto],
    reader: _ShapeReader,
) -> None:
    value = reader.value(infos.get(name), Role.ACTIVATION, name)
    value.producer = node
    values[name] = value
    node.outputs.append(value)


def _attributes(proto: onnx.NodeProto) -> dict[str, AttributeValue]:
    result: dict[str, AttributeValue] = {}
    for attribute in proto.attribute:
        if attribute.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
            continue
        if attribute.type in (AttributeProto.TENSOR, AttributeProto.SPARSE_TENSOR):
            continue
        value = onnx.helper.get_attribute_value(attribute)
        result[attribute.name] = tuple(value) if isinstance(value, list) else value
    return result


def _has_subgraph(proto: onnx.NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in proto.attribute)


def _subgraphs(proto: onnx.NodeProto) -> list[onnx.GraphProto]:
    graphs: list[onnx.GraphProto] = []
    for attribute in proto.attribute:
        if attribute.type == AttributeProto.GRAPH:
            graphs.append(attribute.g)
        elif attribute.type == AttributeProto.GRAPHS:
            graphs.extend(attribute.graphs)
    return graphs


def _attach_subgraphs(node: Node, proto: onnx.NodeProto, values: dict[str, Value]) -> None:
    """Count a control-flow node's body and make the outer values it reads its inputs.

    The body is not analysed op by op: the node is flagged, and every outer tensor the body
    reads stays live until the node runs (the conservative, never-too-small choice).
    """
    for body in _subgraphs(proto):
        node.subgraph_node_count += _count_nodes(body)
        for name in sorted(_outer_references(body)):
            if name in values and values[name] not in node.inputs:
                node.inputs.append(values[name])


def _count_nodes(graph: onnx.GraphProto) -> int:
    total = len(graph.node)
    for proto in graph.node:
        total += sum(_count_nodes(g) for g in _subgraphs(proto))
    return total


def _outer_references(graph: onnx.GraphProto) -> set[str]:
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    used: set[str] = set()
    for proto in graph.node:
        used.update(n for n in proto.input if n)
        for body in _subgraphs(proto):
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
    for node in nodes:
        for index in _BUFFER_INPUTS.get(node.op_type, ()):
            value = node.input(index)
            if value is not None and value.role is Role.PARAMETER:
                value.role = Role.BUFFER
