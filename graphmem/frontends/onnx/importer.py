"""The ONNX front end: an .onnx file in, graphmem's IR out.

It reads the model without the weight bytes (graphmem/frontends/onnx/read.py: external data
is never read, and a missing data file is fine), names unnamed dynamic input dims so they can
be bound, runs onnxruntime's symbolic shape inference falling back to onnx's own (infer.py),
and builds the IR (build.py). Only the modules of this folder read ONNX protobuf.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from graphmem.core.collector import collector_paused
from graphmem.core.ir import Graph
from graphmem.frontends.onnx.build import build_graph
from graphmem.frontends.onnx.fold import restore_nodes
from graphmem.frontends.onnx.infer import import_types
from graphmem.frontends.onnx.module_paths import module_path_of
from graphmem.frontends.onnx.read import (
    alias_dim_params,
    fix_input_dims,
    name_dynamic_input_dims,
    read_model,
    read_model_bodies,
)
from graphmem.frontends.onnx.scalar_reshapes import drop_axes
from graphmem.frontends.onnx.shape_gaps import fill_shape_gaps

__all__ = ["OnnxImport", "import_onnx", "load_onnx", "module_path_of", "read_model"]


@dataclass
class OnnxImport:
    """The imported graph and what the importer noticed on the way."""

    graph: Graph
    shape_inference: str  # which inference produced the shapes
    warnings: list[str] = field(default_factory=list)
    # the file as read (external data cut off), before the importer's renames and folding:
    # what onnxruntime's planner and optimizer see (runtime_inputs.py), so the file is read once
    source: onnx.ModelProto | None = field(default=None, repr=False, compare=False)


def load_onnx(path: str | Path) -> Graph:
    return import_onnx(path).graph


def import_onnx(path: str | Path, input_dims: Mapping[str, int] | None = None,
                source: onnx.ModelProto | None = None) -> OnnxImport:
    """Import a model; `input_dims` fixes named input dims before shape inference; `source`:
    the file as an earlier import of it read it (`OnnxImport.source`), not read again.

    Fixing dims is the fallback for models whose symbolic inference fails: with concrete
    input shapes, onnx's own inference can finish the job.
    """
    with collector_paused():  # a bulk build: graphmem/core/collector.py
        return _import(Path(path), input_dims, source)


def _import(path: Path, input_dims: Mapping[str, int] | None,
            source: onnx.ModelProto | None) -> OnnxImport:
    read, bodies, read_op_types, node_metadata = (
        read_model_bodies(path) if source is None else (source, True, None, True))
    model = onnx.ModelProto()
    model.CopyFrom(read)  # the steps below rename dims and fold in place
    warnings: list[str] = []
    name_dynamic_input_dims(model.graph)
    if input_dims:
        fix_input_dims(model.graph, input_dims)
    dim_names = alias_dim_params(model.graph, bodies)  # inference sees safe names only
    # the misread defaults, the folds, the Tiles' expand, onnx's passes (infer.py)
    # (the op types as validation's walk read them: the renames above change dims only)
    (inferred, engine, judged), folded, positions = import_types(model, warnings, dim_names,
                                                                 bodies, read_op_types)
    del model  # the renamed copy: built from `inferred` (10**6 nodes: 345 MiB freed first)
    restore_nodes(inferred, folded, positions)
    del positions  # a value each: not held while the IR is built
    drop_axes(inferred.graph)  # what the restored nodes' inference copies read (scalar_reshapes)
    # (neither changes a value info: the types judged are those the IR reads)
    graph = build_graph(inferred, path.stem, dim_names, judged, node_metadata)
    gaps = fill_shape_gaps(graph)
    if gaps.filled:
        engine += f" + graphmem rules for {len(gaps.filled)} values"
    return OnnxImport(graph=graph, shape_inference=engine, warnings=warnings, source=read)
