"""Shape inference for an imported ONNX model: onnx's own inference (C++) over the whole graph,
then onnxruntime's symbolic rules (pure Python, sympy) on the part it left unknown, never
rewriting the dims the model declares.

onnx's inference with data propagation follows a decoder's shape arithmetic (Shape -> Gather
-> Concat -> Reshape) at C++ speed but has no symbolic arithmetic: a slice ending at `seq`, a
Range of `seq` elements or a Concat along a dynamic axis come out unknown, and so does all that
follows from them. onnxruntime's symbolic inference computes those (`Min(4096, seq)`,
`2*seq`), at about 80 us a node. So it runs once, on the part of the graph onnx left unknown
(`unknown_part`): those nodes, the producers of the graph outputs, and the small tensors
(shape vectors, scalars) whose values its rules read, back to the Shape nodes they start
from; every other tensor it reads is a graph input of that part, typed as onnx inferred it.
Graphs with control flow or functions, whose bodies read outer values, are inferred whole.
"""

from __future__ import annotations

import importlib.util
import warnings as py_warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
import onnx
from onnx import AttributeProto

from graphmem.errors import first_line
from graphmem.frontends.onnx.fold import fold_constants, refold_constants
from graphmem.frontends.onnx.graph_index import GraphIndex
from graphmem.frontends.onnx.kept_slices import kept_slice_dims
from graphmem.frontends.onnx.layer_types import layered_types
from graphmem.frontends.onnx.loop_scans import onnx_loop_scans
from graphmem.frontends.onnx.ort_engine import (
    STATIC_TYPES_KEY,
    STATIC_TYPES_TOKEN,
    bounded_engine,
    remembered_shapes,
    skip_static_nodes,
    sympy_for_engine,
)
from graphmem.frontends.onnx.ort_rules import ruled_engine
from graphmem.frontends.onnx.repeat_dims import expand_tiles, reshape_dims
from graphmem.frontends.onnx.scalar_reshapes import unsqueeze_scalar_reshapes
from graphmem.frontends.onnx.seq_dims import (
    SeqDims,
    for_onnx_pass,
    sequence_dims,
)
from graphmem.frontends.onnx.third_pass import third_pass
from graphmem.frontends.onnx.unknown_part import unknown_part
from graphmem.frontends.onnx.value_types import (
    MISREAD_OPS,
    JudgedInfos,
    judged_infos,
    known_dims,
    typed_by_onnx,
    write_misread_defaults,
)

_GRAPH_KINDS = frozenset({AttributeProto.GRAPH, AttributeProto.GRAPHS})
# the ops whose outputs the second pass's rules type (each rule one op)
RULED_OPS = frozenset({"Slice", "Range", "Reshape"})

Engine = tuple[onnx.ModelProto, str]


class Inferred(NamedTuple):
    """infer_types' answer: the model typed, the engines that typed it, and its value infos
    as judged on the way (value_types.py `judged_infos`) where onnx typed every value (none
    merged after: build.py reads their type keys), else None."""

    model: onnx.ModelProto
    engine: str
    judged: JudgedInfos | None = None


def infer_shapes(model: onnx.ModelProto, warnings: list[str],
                 dim_names: Mapping[str, str]) -> Engine:
    """infer_types' model and engine."""
    inferred = infer_types(model, warnings, dim_names)
    return inferred.model, inferred.engine


def infer_types(model: onnx.ModelProto, warnings: list[str], dim_names: Mapping[str, str],
                folded: dict[str, onnx.NodeProto] | None = None,
                index: GraphIndex | None = None, bodies: bool = True,
                onnx_only: bool = False) -> Inferred:
    """Every value's type in `model`: onnx's inference, then onnxruntime's symbolic rules on
    what onnx left unknown (module docstring; none left: not loaded), where they give up the
    value infos' shapes merged in; nodes refold_constants folds go to `folded`. `index`:
    `model`'s graph's (graph_index.py: the importer's, built where a rule's op is present),
    else built here where one is. `bodies` False: no node of the graph holds a graph or
    graphs attribute (read_model_bodies: validation's walk counted them; none of the
    importer's steps before inference adds one), not looked for again. `onnx_only`: where
    onnx's passes leave onnxruntime's rules a part, engine "none" (layer_types.py refuses)."""
    if not _splittable(model, bodies):
        return Inferred(*_whole_model_inference(model, warnings, dim_names))
    first = _onnx_inference(_bytes_without_value_info(model), [])
    if first is None:
        return Inferred(*_whole_model_inference(model, warnings, dim_names))
    if index is None:
        index = ruled_index(model.graph)
    second = _second_pass(model, first, folded if folded is not None else {}, index)
    # the nodes' outputs from the index where the graph typed is the model's nodes as refolded
    made = index.made() if index is not None and second is not first else None
    first = second
    judged = judged_infos(first.graph.value_info)  # the verdicts both read, the IR's keys
    if typed_by_onnx(first.graph, model.graph.input, made, judged.known):
        return Inferred(first, _engine_name(0), judged)
    if onnx_only:
        return Inferred(first, "none")
    part = unknown_part(first, model.graph.input, judged.known)
    failed_ops: list[str] = []
    try:
        inferred = _ort_symbolic_inference(part, failed_ops)
    except Exception as error:  # noqa: BLE001 - any failure there falls back to onnx's inference
        return Inferred(*_ort_failed(model, warnings, error))
    changed = _changed_input_dims(part.graph, inferred.graph, dim_names)
    if changed:
        declared = {v.name for v in model.graph.input}
        if changed.partition(":")[0] not in declared:  # a merge of symbols inside the graph
            return Inferred(*_whole_model_inference(model, warnings, dim_names))
        return Inferred(*_inputs_changed(model, warnings, changed))
    _merge_value_infos(first.graph, inferred.graph, prefer_target=False)
    _copy_outputs(first.graph, inferred.graph)
    engine = _engine_name(len(part.graph.node))
    if failed_ops:
        engine = _merge_onnx_fallback(first, model, warnings, failed_ops, engine)
    return Inferred(first, engine)


class Imported(NamedTuple):
    """import_types' answer: the model typed, the nodes folded or turned for inference and
    each value's producer's position where the rules' index was built (restore_nodes')."""

    inferred: Inferred
    folded: dict[str, onnx.NodeProto]
    positions: dict[str, int] | None


def import_types(model: onnx.ModelProto, warnings: list[str], dim_names: Mapping[str, str],
                 bodies: bool = True, read_op_types: Sequence[str] | None = None) -> Imported:
    """The importer's inference of `model` (in place): misread defaults written, constants
    folded (fold.py), Tiles of added axes as Expands (repeat_dims.py), infer_types; for a graph
    of repeated layers all that on a few of them (layer_types.py), its nodes left as read."""
    # the steps below skip if none; the op types in order where the reader had them (read.py)
    op_types = set(read_op_types or [node.op_type for node in model.graph.node])
    if op_types & MISREAD_OPS:  # (no op folded or turned: before or after them alike)
        write_misread_defaults(model.graph)  # attributes onnx's inference defaults wrongly
    if _splittable(model, bodies):
        cut = layered_types(model, lambda part: _cut_inference(part, dim_names))
        if cut is not None:
            return Imported(Inferred(cut[0], _engine_name(0), cut[1]), {}, None)
    # the inference rules' one walk over the nodes, the folds' and the Tiles' (graph_index.py)
    index = GraphIndex(model.graph, read_op_types) if op_types & RULED_OPS else None
    folded = fold_constants(model, index=index)  # inference sees literal shape values
    if "Tile" in op_types:  # ... and a Tile of added axes as Expand (repeat_dims)
        folded.update(expand_tiles(model, index))
    inferred = infer_types(model, warnings, dim_names, folded, index, bodies)
    return Imported(inferred, folded, index.position if index is not None else None)


def _cut_inference(part: onnx.ModelProto, dim_names: Mapping[str, str]
                   ) -> tuple[onnx.ModelProto, str, JudgedInfos | None]:
    """import_types' steps on layer_types.py's cut model (engine "none": warned, or leaving
    onnxruntime's rules a part)."""
    op_types = {node.op_type for node in part.graph.node}
    index = GraphIndex(part.graph) if op_types & RULED_OPS else None
    folded = fold_constants(part, index=index)
    if "Tile" in op_types:
        expand_tiles(part, index)
    warnings: list[str] = []
    model, engine, judged = infer_types(part, warnings, dim_names, folded, index, False, True)
    return model, "none" if warnings else engine, judged


def ruled_index(graph: onnx.GraphProto) -> GraphIndex | None:
    """The rules' one walk over the nodes (graph_index.py), where one of their ops is present
    (10^5 Adds: no table built)."""
    if RULED_OPS.isdisjoint(node.op_type for node in graph.node):
        return None
    return GraphIndex(graph)


def _second_pass(model: onnx.ModelProto, first: onnx.ModelProto,
                 folded: dict[str, onnx.NodeProto],
                 index: GraphIndex | None = None) -> onnx.ModelProto:
    """onnx's inference again where the first pass's dims let more be known: shape arithmetic
    on dims that are numbers folded (fold.py), slices along known axes given the dims they keep
    (kept_slices.py), positions, rotary slices and what they broadcast against given the
    lengths onnxruntime's rules compute (seq_dims.py), reshapes whose -1 divides out exactly
    (repeat_dims.py; once more on this pass's types); the first pass where none applies."""
    # each rule below types the outputs of one op: none present (10^5 Adds), no table built
    if index is None:
        index = ruled_index(model.graph)
    if index is not None:  # the refold's too
        types = _types_of(first.graph)
        refolded = refold_constants(model, _static_dims_of(index, types, first.graph), index)
        ops = set(index.by_op)  # as the refold left them
    else:
        index, types, ops = GraphIndex(onnx.GraphProto()), {}, set()
        refolded = refold_constants(model, _static_dims(first.graph))
    folded.update(refolded)
    slices: list[onnx.ValueInfoProto] = []
    if ops & {"Slice", "Range"}:
        seq = SeqDims(model.graph, types, index)
        slices.extend(kept_slice_dims(model.graph, first.graph, seq, index, types))
        slices.extend(sequence_dims(seq))
    if "Reshape" in ops:
        slices.extend(reshape_dims(model.graph, first.graph, index, types))
    elif not refolded and not slices:
        return first
    copy = _without_value_info(model, for_onnx_pass(model.graph, slices, index))
    scalars = unsqueeze_scalar_reshapes(copy.graph, types, index)  # scalar_reshapes.py
    if not refolded and not slices and not scalars:
        return first
    folded.update(scalars)
    second = _onnx_inference(copy, [])
    if second is None:
        return first
    # a Reshape whose input only this pass typed (a grouped-query repeat of a rotary output)
    second_types = _types_of(second.graph)
    reshaped = reshape_dims(model.graph, second.graph, index, second_types)
    if not reshaped:
        return second
    # what onnx's third pass changes, inferred again alone (third_pass.py), else the pass
    third = third_pass(copy, second, reshaped, second_types,
                       lambda part: _onnx_inference(part, []), index)
    if third is not None:
        return third
    copy.graph.value_info.extend(reshaped)
    return _onnx_inference(copy, []) or second


def _static_dims(graph: onnx.GraphProto) -> dict[str, tuple[int | None, ...]]:
    """The dims of what Shape and Size nodes read, numbers where known."""
    wanted = {n.input[0] for n in graph.node if n.op_type in ("Shape", "Size") and n.input}
    dims: dict[str, tuple[int | None, ...]] = {}
    if not wanted:
        return dims
    for info in (*graph.input, *graph.value_info, *graph.output):
        if info.name in wanted and info.type.tensor_type.HasField("shape"):
            dims[info.name] = tuple(d.dim_value if d.HasField("dim_value") else None
                                    for d in info.type.tensor_type.shape.dim)
    return dims


def _static_dims_of(index: GraphIndex, types: Mapping[str, onnx.ValueInfoProto],
                    graph: onnx.GraphProto) -> dict[str, tuple[int | None, ...]]:
    """_static_dims of `graph` (whose nodes `index` indexes), read from its `types` instead
    of a walk over every value; the walk where a value's last entry has no shape (an earlier
    one may)."""
    wanted = {n.input[0] for op in ("Shape", "Size") for n in index.nodes(op) if n.input}
    dims: dict[str, tuple[int | None, ...]] = {}
    for name in wanted:
        info = types.get(name)
        if info is None:
            continue
        if not info.type.tensor_type.HasField("shape"):
            return _static_dims(graph)
        dims[name] = tuple(d.dim_value if d.HasField("dim_value") else None
                           for d in info.type.tensor_type.shape.dim)
    return dims


def _types_of(graph: onnx.GraphProto) -> dict[str, onnx.ValueInfoProto]:
    return {v.name: v for v in (*graph.input, *graph.value_info, *graph.output)}


def _engine_name(ort_nodes: int) -> str:
    if not ort_nodes:
        return "onnx shape inference"
    return f"onnx shape inference + onnxruntime symbolic shape inference ({ort_nodes:,} nodes)"


def _whole_model_inference(model: onnx.ModelProto, warnings: list[str],
                           dim_names: Mapping[str, str]) -> Engine:
    """onnxruntime's symbolic inference on the whole graph, onnx's filling in where its rules
    give up on some nodes."""
    try:
        failed_ops: list[str] = []
        inferred = _ort_symbolic_inference(model, failed_ops)
    except Exception as error:  # noqa: BLE001 - any failure there falls back to onnx's inference
        return _ort_failed(model, warnings, error)
    changed = _changed_input_dims(model.graph, inferred.graph, dim_names)
    if changed:
        return _inputs_changed(model, warnings, changed)
    if not failed_ops:
        return inferred, "onnxruntime symbolic shape inference"
    engine = _merge_onnx_fallback(inferred, model, warnings, failed_ops,
                                  "onnxruntime symbolic shape inference")
    return inferred, engine


def _ort_failed(model: onnx.ModelProto, warnings: list[str], error: Exception) -> Engine:
    return _onnx_instead(model, warnings, f"failed ({first_line(error)})")


def _inputs_changed(model: onnx.ModelProto, warnings: list[str], changed: str) -> Engine:
    return _onnx_instead(model, warnings, f"changed the input dims ({changed})")


def _onnx_instead(model: onnx.ModelProto, warnings: list[str], why: str) -> Engine:
    """onnx's inference over the whole model, where onnxruntime's rules `why`."""
    warnings.append(f"onnxruntime symbolic shape inference {why}; used onnx shape inference"
                    " instead")
    fallback = _onnx_inference(model, warnings)
    if fallback is None:
        return model, "none"
    onnx_loop_scans(fallback)  # its loops' scan outputs by trip count (loop_scans.py)
    return fallback, "onnx shape inference"


def _merge_onnx_fallback(inferred: onnx.ModelProto, model: onnx.ModelProto,
                         warnings: list[str], failed_ops: list[str], engine: str) -> str:
    warnings.append(
        f"onnxruntime's symbolic rules could not follow {len(failed_ops)} nodes (e.g."
        f" {failed_ops[0]}); onnx's own inference filled in what it could"
    )
    fallback = _onnx_inference(model, warnings)
    if fallback is not None:
        onnx_loop_scans(fallback)
        _merge_value_infos(inferred.graph, fallback.graph)
    return engine + " + onnx shape inference" if " + onnx " not in engine else engine


# ----- the part onnx left unknown ---------------------------------------------------------------
def _splittable(model: onnx.ModelProto, bodies: bool = True) -> bool:
    """No functions and no control flow: every value a node reads is a value of the graph.
    `bodies` False: no node holds a graph attribute (the walk below skipped: 0.015 CPU s at
    22,000 nodes)."""
    if model.functions:
        return False
    if not bodies:
        return True
    for node in model.graph.node:  # plain loops: a decoder has tens of thousands of nodes
        if not node.attribute:
            continue
        for attribute in node.attribute:
            if attribute.type in _GRAPH_KINDS:
                return False
    return True


def _without_value_info(model: onnx.ModelProto,
                        given: Iterable[onnx.ValueInfoProto] = ()) -> onnx.ModelProto:
    """A copy with no declared value infos (onnxruntime's rules ignore them, and the part
    onnx calls known must be what inference derives, not what an exporter wrote) but
    `given`, graphmem's own types for onnx's next pass."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.ClearField("value_info")
    copy.graph.value_info.extend(given)
    return copy


def _bytes_without_value_info(model: onnx.ModelProto) -> bytes:
    """What `_without_value_info(model)` serializes to, without copying the model: its value
    infos are taken out for the serialization and put back in order (the copy held the whole
    graph a second time while onnx's inference ran: 345 MiB at 10**6 nodes)."""
    graph = model.graph
    if not graph.value_info:
        return model.SerializeToString()
    kept = onnx.GraphProto()
    kept.value_info.extend(graph.value_info)
    graph.ClearField("value_info")
    try:
        return model.SerializeToString()
    finally:
        graph.value_info.extend(kept.value_info)


def _copy_outputs(target: onnx.GraphProto, source: onnx.GraphProto) -> None:
    """The graph outputs as onnxruntime's rules typed them (as a whole run writes them)."""
    inferred = {v.name: v for v in source.output}
    for output in target.output:
        better = inferred.get(output.name)
        if better is not None and known_dims(better) >= known_dims(output):
            output.CopyFrom(better)


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


def _onnx_inference(model: onnx.ModelProto | bytes,
                    warnings: list[str]) -> onnx.ModelProto | None:
    try:
        with _quiet_numpy():
            return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as error:  # noqa: BLE001
        warnings.append(f"onnx shape inference failed ({first_line(error)})")
        return None


def _merge_value_infos(target: onnx.GraphProto, source: onnx.GraphProto,
                       prefer_target: bool = True) -> None:
    """Replace a value's type in `target` where `source` knows more of its shape (or, with
    `prefer_target` False, as much)."""
    better = {v.name: v for v in source.value_info}
    for info in target.value_info:
        candidate = better.get(info.name)
        if candidate is None:
            continue
        known, have = known_dims(candidate), known_dims(info)
        if known > have or (known == have and not prefer_target and candidate != info):
            info.CopyFrom(candidate)
    known_names = {v.name for v in target.value_info}
    target.value_info.extend(v for n, v in better.items() if n not in known_names)


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
    import logging  # only where onnxruntime's rules run

    symbolic_shape_infer = _symbolic_shape_infer_module()
    logging.getLogger(symbolic_shape_infer.__name__).setLevel(logging.ERROR)
    # graphmem's rules over the engine's own where both have one (OneHot), bodies' too
    engine = ruled_engine(symbolic_shape_infer, lambda rule: _tolerant(rule, failed_ops),
                          int_max=2**31 - 1, auto_merge=True, guess_output_rank=False,
                          verbose=0)
    if any(p.key == STATIC_TYPES_KEY and p.value == STATIC_TYPES_TOKEN
           for p in model.metadata_props):  # unknown_part's model, not a file's claim
        skip_static_nodes(engine, {v.name: v for v in model.graph.value_info})
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
    # onnxruntime's tool, loaded from its file: untyped, its names are Any
    module: Any = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    module.sympy = sympy_for_engine(module.sympy)
    bounded_engine(module.SymbolicShapeInference)
    module.get_shape_from_type_proto = remembered_shapes(module.get_shape_from_type_proto)
    return module
