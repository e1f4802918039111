"""The graph onnxruntime actually runs: the model optimized offline at the user's level.

onnxruntime rewrites a model at session creation (ORT_ENABLE_ALL by default): constant
folding, fusions (MatMul+Add into Gemm, Conv+Add+Relu, Q*K^T*scale into com.microsoft
FusedMatMul, LayerNormalization, SkipLayerNormalization, QuickGelu...) and, on x86, the
NCHWc layout (com.microsoft.nchwc Conv/MaxPool/GlobalAveragePool with ReorderInput/
ReorderOutput around them). Its memory is that graph's, so graphmem asks onnxruntime for it:
a session created with `SessionOptions.optimized_model_filepath` saves the optimized graph,
its nodes listed in the order the optimized session runs them (checked against the profiles
of the samples; onnxruntime reloading the file would number, so order, them differently).
Planned in that order it gives the optimized session's `mem_in_use_peak`: exact on every
shipped sample but tiny_llama.dynamo (within 3%), on the CNN zoo and on BERT and GPT-2
(benchmarks/results/accuracy.md).

The saved graph has contrib ops onnx's shape inference does not know, so it is imported through
a shape proxy: each contrib node replaced by a standard op with the same output shape
(FusedMatMul -> MatMul of its operands transposed, nchwc Conv -> Conv over its padded channels,
ReorderInput -> Pad of the channels, ReorderOutput -> Slice of them, their channels-last forms
-> Transpose or Reshape, nchwc Upsample -> Resize...), imported with graphmem's ONNX importer,
then the real op types, domains, attributes and inputs put back on the nodes. A reorder's
stand-in needs its input's shape, known only once the stand-ins upstream are in place, so the
proxy is built in rounds of onnx's inference; a tensor left without a shape would count 0 bytes
(before the rounds: EfficientNet-B0 and ConvNeXt-T at batch 8 came out 65% and 61% low).

Weights: graphmem never reads them (onnx_untrusted.py), so the session gets the bytes of a
weightless copy: every tensor without inline data (external, or above the importer's 64 KiB)
filled with synthetic values of its dims and dtype (memory does not depend on values); it
never gets a path, and the only folder it is told of is a private temporary one. Above
`MAX_INITIALIZER_BYTES` of initializers the optimization is refused (OptimizationRefused), and
the caller plans the graph as written.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from graphmem.core.ir import Graph, Node
from graphmem.core.units import format_bytes
from graphmem.errors import GraphmemError
from graphmem.frontends.onnx.importer import import_onnx, read_model
from graphmem.frontends.onnx.limits import (
    PlanShapes,
    function_key,
    inlined_counts,
    largest_fold,
    session_outputs_refusal,
)
from graphmem.frontends.onnx.ort_import import ort
from graphmem.frontends.onnx.ort_plan_shapes import PlanShape, ort_plan_shapes
from graphmem.frontends.onnx.ort_proxy import (
    restore_nodes,
    shape_proxy,
)
from graphmem.frontends.onnx.ort_session import max_ir_version, quiet_onnxruntime
from graphmem.frontends.onnx.untrusted import (
    PACKED_TYPES,
    clear_tensor_data,
    has_inline_data,
    model_tensors,
    own_tensors,
    quoted,
    raw_data_bytes,
    subgraphs,
    tensor_bytes,
    tensor_numel,
)

LEVELS = {
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
# onnxruntime's own ops in the ONNX domain, unknown to onnx's shape inference.
MAX_INITIALIZER_BYTES = 2 << 30  # 2 GiB: beyond this, optimizing would copy too much


class OptimizationRefused(GraphmemError):
    """The model is not optimized offline (too large, or onnxruntime could not load it)."""

    weights = True  # refused for the weights' size: --ort-optimization all lifts it


class _GraphRefused(OptimizationRefused):
    weights = False


@dataclass(frozen=True)
class OptimizedGraph:
    graph: Graph  # the optimized graph, real op types, shapes from the proxy
    plan_shapes: dict[str, PlanShape | None]  # as onnxruntime's planner sees them
    level: str
    nodes_before: int  # nodes in the file as written
    notes: tuple[str, ...]


def optimized_graph(source: str | Path | onnx.ModelProto, level: str,
                    input_dims: Mapping[str, int] | None = None,
                    max_initializer_bytes: int | None = None,
                    shapes: PlanShapes | None = None) -> OptimizedGraph:
    """The graph onnxruntime (CPU) runs for the model at `level` (basic | extended | all).

    `source`: the model as `read_model` returns it (external data cut off, large payloads
    dropped), or its path, read the same way. onnxruntime never sees a path nor the weights:
    it gets the bytes of a copy whose data-less tensors hold synthetic values. `shapes`:
    the model's ort_plan_shapes where the caller has them.
    """
    model = source if isinstance(source, onnx.ModelProto) else read_model(Path(source))
    if max_initializer_bytes is None:
        max_initializer_bytes = MAX_INITIALIZER_BYTES
    if level not in LEVELS:
        raise GraphmemError(f"--ort-optimization {level}: choose disabled, {', '.join(LEVELS)}")
    weights = session_bytes(model)
    if weights > max_initializer_bytes:
        raise OptimizationRefused(
            f"not optimized offline: {format_bytes(weights)} of weights and constants (as"
            " onnxruntime's session holds them: bodies twice, functions once a call) is above"
            f" the {format_bytes(max_initializer_bytes)} limit; planned the graph as written")
    too_wide = session_outputs_refusal(model)
    if too_wide is not None:
        raise _GraphRefused(f"not optimized offline: {too_wide}; planned the graph as written")
    fold = largest_fold(model, shapes if shapes is not None else ort_plan_shapes(model))
    if fold is not None:
        raise _GraphRefused(
            f"not optimized offline: onnxruntime's constant folding would build {quoted(fold[0])}"
            f" of {fold[1]:,} elements at session creation, above graphmem's budget; planned"
            " the graph as written")
    with tempfile.TemporaryDirectory(prefix="graphmem-ort-opt-") as folder:
        saved, notes = _saved_optimized(model, level, Path(folder))
        graph, plan_shapes = _import_through_proxy(saved, Path(folder), input_dims)
    return OptimizedGraph(graph, plan_shapes, level, len(model.graph.node), notes)


def _saved_optimized(model: onnx.ModelProto, level: str,
                     folder: Path) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    """The graph onnxruntime saves after optimizing, its weights left in a side file (in the
    private `folder`, never read back: read_model cuts the reference)."""
    source, synthetic = _runnable_bytes(model)
    saved = folder / "optimized.onnx"
    _optimize(source, folder, level, saved)
    del source
    tensors = f"{synthetic} weight tensor{'' if synthetic == 1 else 's'}"
    notes = (f"optimized with synthetic values in {tensors} (graphmem never reads weights;"
             " values do not change memory)",) if synthetic else ()
    return read_model(saved), notes


def _import_through_proxy(saved: onnx.ModelProto, folder: Path,
                          input_dims: Mapping[str, int] | None
                          ) -> tuple[Graph, dict[str, PlanShape | None]]:
    """graphmem's graph of the saved model: shapes from the stand-ins, real nodes put back."""
    proxy, originals = shape_proxy(saved)
    proxy_path = folder / "proxy.onnx"
    onnx.save(proxy, str(proxy_path))
    imported = import_onnx(proxy_path)
    if input_dims and _unknown(imported.graph):
        retry = import_onnx(proxy_path, input_dims=input_dims)
        if _unknown(retry.graph) < _unknown(imported.graph):
            imported = retry
    restore_nodes(imported.graph, originals)
    return imported.graph, ort_plan_shapes(proxy)


# What the optimizing session holds of a tensor in a control-flow body, against one of the main
# graph: measured 6.2x its bytes at the command's peak (31.5 MiB Constant in an If branch:
# 115 -> 309 MiB), against 4.3x in the main graph (83 -> 217 MiB), so bodies count twice.
_BODY_WEIGHT = 2


def session_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the tensors onnxruntime's session holds for the model, from dims and element
    type, inline or not (the weightless copy fills each one the file leaves empty): the
    initializers (sparse ones dense: read.py made them so), Constant values and tensor
    attributes of the main graph and the training graphs; those of bodies twice
    (_BODY_WEIGHT); those of a local function once, and once more for each copy inlining
    makes (a function holding a 4 MB Constant, called 20 times, holds 80 MB)."""
    total = sum(_scope_bytes(graph.initializer, graph.node) for graph in
                (model.graph, *(g for i in model.training_info
                                for g in (i.initialization, i.algorithm))))
    copies = inlined_counts(model)
    for function in model.functions:
        total += (1 + copies[function_key(function)]) * _scope_bytes((), function.node)
    return total


def _scope_bytes(initializers: Iterable[onnx.TensorProto],
                 nodes: Iterable[onnx.NodeProto], weight: int = 1) -> int:
    """`weight` x the bytes of a scope's tensors, and _BODY_WEIGHT x those of its bodies."""
    total = weight * sum(tensor_bytes(t) for t in initializers)
    for node in nodes:
        if not node.attribute:  # tensors and bodies are attributes: most nodes have none
            continue
        total += weight * sum(tensor_bytes(t) for t in own_tensors(node))
        total += sum(_scope_bytes(body.initializer, body.node, _BODY_WEIGHT)
                     for body in subgraphs(node))
    return total



def _unknown(graph: Graph) -> int:
    return sum(1 for n in graph.nodes for v in n.outputs if not v.shape_known)


# ----- running onnxruntime's optimizer ---------------------------------------------------------


def weightless_copy(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy onnxruntime can load without any file: every tensor that holds no data of its own
    (external data cut off, large payloads dropped) filled with synthetic values of its dims and
    dtype; the small inline ones kept. Returns the copy and the count of tensors filled."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    rng = np.random.default_rng(0)
    filled = 0
    for _, tensor in model_tensors(copy):
        if not has_inline_data(tensor):
            _fill_synthetic(tensor, rng)
            filled += 1
    return copy, filled


def _fill_synthetic(tensor: onnx.TensorProto, rng: np.random.Generator) -> None:
    """Small nonzero floats (onnxruntime drops an Add of zeros or a Mul by ones:
    NoopElimination), zeros for integers, booleans and packed types, empty strings."""
    clear_tensor_data(tensor)
    numel = tensor_numel(tensor)
    if tensor.data_type == onnx.TensorProto.STRING:
        tensor.string_data.extend([b""] * numel)
        return
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    if dtype.kind in "iub" or tensor.data_type in PACKED_TYPES:
        tensor.raw_data = bytes(raw_data_bytes(tensor))
        return
    values = rng.random(numel, dtype=np.float32)
    values *= 0.02
    values += 0.01
    tensor.raw_data = values.astype(dtype, copy=False).tobytes()


def _optimize(source: bytes, folder: Path, level: str, saved: Path) -> None:
    """Create a CPU session at `level` that saves its optimized graph to `saved`; the model
    comes as bytes, and the only folder onnxruntime is told of is the private `folder`."""
    quiet_onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = LEVELS[level]
    options.optimized_model_filepath = str(saved)
    options.log_severity_level = 4  # fatal only: a failure becomes the refusal note, not a log line
    options.intra_op_num_threads = 1
    options.add_session_config_entry(
        "session.model_external_initializers_file_folder_path", str(folder.resolve()))
    # the saved graph's weights go to a side file, never read back (only their shapes are)
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", "optimized.onnx.data")
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    try:
        ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as error:  # noqa: BLE001 - onnxruntime raises its own types
        text = str(error).strip().splitlines()
        raise OptimizationRefused(f"not optimized offline: onnxruntime could not load the model"
                                  f" ({text[0][:200] if text else type(error).__name__});"
                                  " planned the graph as written") from None


def _runnable_bytes(model: onnx.ModelProto) -> tuple[bytes, int]:
    """The weightless copy's bytes as onnxruntime can read them, and the count of tensors
    filled; the copy itself is dropped before the session holds its own (a model's size)."""
    copy, filled = weightless_copy(model)
    supported = max_ir_version()
    if supported is not None and copy.ir_version > supported:
        # a newer onnx stamps a newer IR version than onnxruntime reads; the graph is the same
        copy.ir_version = supported
    return copy.SerializeToString(), filled


def describe(node: Node) -> str:
    return f"{node.domain}.{node.op_type}" if node.domain else node.op_type
