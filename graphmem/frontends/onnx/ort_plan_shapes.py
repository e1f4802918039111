"""The tensor shapes onnxruntime's allocation planner sees, read from an ONNX file.

onnxruntime plans buffer reuse once, when the session is created, from the shapes its own
graph resolution infers: the file's `value_info` merged with onnx's per-op shape inference,
without data propagation (its `getSymbolicInput` returns nothing) and with the graph inputs'
dims as the file spells them (`batch`, or unnamed). Its planner reuses a buffer only where two
such shapes are equal dim by dim: the same number, or the same named dim_param
(`SameShape` in onnxruntime/core/framework/allocation_planner.cc). graphmem's own shapes are
sharper (symbolic inference, data propagation), so they cannot stand in for these.

A plan shape is a tuple of dims: an int (a known size), a str (a named dim_param), or None
(a dim nobody named: never equal to anything). None for the whole shape: rank unknown.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from graphmem.core.ort_view import PlanShape
from graphmem.frontends.onnx.importer import read_model


def ort_plan_shapes(source: str | Path | onnx.ModelProto) -> dict[str, PlanShape | None]:
    """Every tensor's shape as onnxruntime's planner sees it, by value name. `source`: the model
    as read_model returns it (external data cut off), or its path, read the same way (only the
    model file itself is opened)."""
    model = source if isinstance(source, onnx.ModelProto) else read_model(Path(source))
    named = _dim_params(model.graph)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=False)
    except Exception:  # noqa: BLE001 - the file's own value_info is then all there is
        inferred = model
    graph = inferred.graph
    shapes: dict[str, PlanShape | None] = {}
    # a decoder's layers repeat a few hundred types: each is read once, by its bytes
    by_type: dict[bytes, PlanShape | None] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        key = info.type.SerializeToString()
        if key not in by_type:
            by_type[key] = _plan_shape(info.type, named)
        shapes[info.name] = by_type[key]
    for tensor in graph.initializer:
        shapes[tensor.name] = tuple(int(d) for d in tensor.dims)
    return shapes


def _dim_params(graph: onnx.GraphProto) -> frozenset[str]:
    """The dim names the file spells; onnx's Python inference invents `unk__N` names for
    dims it cannot name, where onnxruntime's leaves them unnamed."""
    names = set()
    seen: set[bytes] = set()  # each distinct shape read once
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if info.type.HasField("tensor_type"):
            shape = info.type.tensor_type.shape
            key = shape.SerializeToString()
            if key not in seen:
                seen.add(key)
                names |= {d.dim_param for d in shape.dim if d.dim_param}
    return frozenset(names)


def _plan_shape(type_proto: onnx.TypeProto, named: frozenset[str]) -> PlanShape | None:
    if not type_proto.HasField("tensor_type"):
        return None
    tensor_type = type_proto.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return tuple(_plan_dim(d, named) for d in tensor_type.shape.dim)


def _plan_dim(dim: onnx.TensorShapeProto.Dimension, named: frozenset[str]) -> int | str | None:
    if dim.HasField("dim_value"):
        return int(dim.dim_value)
    return dim.dim_param if dim.dim_param in named else None
