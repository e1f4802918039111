"""The shape proxy: onnxruntime's optimized graph as standard ops onnx's inference can shape.

The saved optimized graph has contrib ops onnx's shape inference does not know; each is
replaced by a standard op with the same output shape (FusedMatMul -> MatMul of its operands
transposed, nchwc Conv -> Conv over its padded channels, ReorderInput -> Pad of the channels
or a Transpose, ReorderOutput -> Slice of them or a Transpose, nchwc Upsample -> Resize...),
the copy is
imported with graphmem's ONNX importer, then `restore_nodes` puts the real op types, domains,
attributes and inputs back on the nodes (graphmem/frontends/onnx/ort_optimized.py).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphmem.core.ir import AttributeValue, Graph
from graphmem.core.ort_view import PlanShape

ORT_ONNX_DOMAIN_OPS = frozenset({"SimplifiedLayerNormalization"})
NCHWC = "com.microsoft.nchwc"
MS = "com.microsoft"

# ----- the shape proxy -------------------------------------------------------------------------


@dataclass(frozen=True)
class OriginalNode:
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    attributes: dict[str, Any]  # as onnx.helper.get_attribute_value reads them


def shape_proxy(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, OriginalNode]]:
    """A copy whose contrib nodes are standard ops of the same output shapes; the originals
    by node name (names made unique where the saved graph leaves them empty).

    Most stand-ins need nothing but the node; the NCHWc reorders need their input's shape
    (how many channels to pad, where the spatial dims are), which onnx's inference knows only
    once the stand-ins upstream are in place: so the rewrite runs to a fixed point, one
    inference per round (an EfficientNet's squeeze-excitation blocks chain about 20)."""
    proxy = onnx.ModelProto()
    proxy.CopyFrom(model)
    block = _nchwc_block(proxy)
    pending = _contrib_nodes(proxy.graph)
    originals: dict[str, OriginalNode] = {}
    while pending:
        shapes = _inferred_dims(proxy)
        waiting = []
        for node, original in pending:
            outcome = _rewrite(node, proxy.graph, block, shapes)
            if outcome is _Outcome.DONE:
                originals[node.name] = original
            elif outcome is _Outcome.WAIT:
                waiting.append((node, original))
        if len(waiting) == len(pending):
            break  # no input shape became known this round: these stay as they are
        pending = waiting
    for node, original in pending:  # what still waits for an operand's rank
        if (node.domain, node.op_type) == (MS, "FusedMatMul") and _fused_matmul_einsum(node):
            originals[node.name] = original
    return proxy, originals


def _contrib_nodes(graph: onnx.GraphProto) -> list[tuple[onnx.NodeProto, OriginalNode]]:
    """Each node onnx's inference does not know, with what it was; every node named."""
    used: set[str] = set()
    contrib = []
    for index, node in enumerate(graph.node):
        if not node.name or node.name in used:
            node.name = f"{node.op_type}_{index}_ort"
        used.add(node.name)
        if node.domain not in (MS, NCHWC) and node.op_type not in ORT_ONNX_DOMAIN_OPS:
            continue
        contrib.append((node, OriginalNode(
            node.op_type, node.domain, tuple(node.input),
            {a.name: helper.get_attribute_value(a) for a in node.attribute})))
    return contrib


class _Outcome(enum.Enum):
    DONE = "done"  # replaced by its stand-in
    WAIT = "wait"  # needs its input's shape, not known yet
    KEEP = "keep"  # left as it is (onnxruntime's symbolic inference may know it)


# Standard attributes each stand-in keeps.
_CONV_ATTRS = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}
_POOL_ATTRS = {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides",
               "storage_order", "count_include_pad"}


def _rewrite(node: onnx.NodeProto, graph: onnx.GraphProto, block: int,
             shapes: Mapping[str, PlanShape | None]) -> _Outcome:
    """Turn one contrib node into its shape stand-in, if its input's shape is known enough."""
    kind = (node.domain, node.op_type)
    if kind == (NCHWC, "ReorderInput"):
        return _reorder_input(node, graph, block, shapes.get(node.input[0]))
    if kind == (NCHWC, "ReorderOutput"):
        return _reorder_output(node, graph, block, shapes.get(node.input[0]))
    if kind == (MS, "FusedMatMul"):
        return _fused_matmul(node, graph, shapes)
    return _Outcome.DONE if _rewrite_alone(node, graph) else _Outcome.KEEP


def _rewrite_alone(node: onnx.NodeProto, graph: onnx.GraphProto) -> bool:
    """The stand-ins that need nothing but the node; False: left as it is."""
    kind = (node.domain, node.op_type)
    if kind in ((NCHWC, "Conv"), (MS, "FusedConv")):
        _standard(node, "Conv", _CONV_ATTRS, keep_inputs=3)
    elif kind == (MS, "FusedGemm"):
        _standard(node, "Gemm", {"alpha", "beta", "transA", "transB"}, keep_inputs=3)
    elif node.domain == NCHWC and node.op_type in ("MaxPool", "AveragePool",
                                                   "GlobalMaxPool", "GlobalAveragePool"):
        _standard(node, node.op_type, _POOL_ATTRS if "Global" not in node.op_type else set())
        if node.op_type == "AveragePool":
            _drop_attrs(node, {"storage_order", "dilations"})
        if node.op_type == "MaxPool":
            _drop_attrs(node, {"count_include_pad"})
    elif node.op_type in ORT_ONNX_DOMAIN_OPS and node.domain in ("", "ai.onnx"):
        return _single_output(node) and _standard_norm(node)
    elif kind in ((MS, "QuickGelu"), (MS, "Gelu")) or (
            kind == (MS, "FastGelu") and len(node.input) == 1):
        _standard(node, "Sigmoid", set(), keep_inputs=1)  # elementwise: the input's shape
    elif kind in ((MS, "BiasGelu"), (MS, "FastGelu"), (MS, "SkipLayerNormalization"),
                  (MS, "SkipSimplifiedLayerNormalization")):
        if not _single_output(node):
            return False
        _standard(node, "Add", set(), keep_inputs=2)  # input + bias/skip, broadcast
    elif kind == (NCHWC, "Upsample"):
        return _upsample(node, graph)
    else:
        return False  # onnxruntime's symbolic inference knows the rest (Gelu, SkipLayerNorm...)
    return True


def _single_output(node: onnx.NodeProto) -> bool:
    return not any(node.output[1:])


def _standard_norm(node: onnx.NodeProto) -> bool:
    """SimplifiedLayerNormalization (RMSNorm, onnxruntime's op in the ONNX domain, unknown to
    onnx's inference): the shape of LayerNormalization over the same axis."""
    _standard(node, "LayerNormalization", {"axis", "epsilon", "stash_type"}, keep_inputs=2)
    return True


def _standard(node: onnx.NodeProto, op_type: str, keep: set[str], keep_inputs: int = 99) -> None:
    node.op_type = op_type
    node.domain = ""
    _drop_attrs(node, {a.name for a in node.attribute} - keep)
    del node.input[keep_inputs:]


def _drop_attrs(node: onnx.NodeProto, names: set[str]) -> None:
    kept = [a for a in node.attribute if a.name not in names]
    del node.attribute[:]
    node.attribute.extend(kept)


def fused_matmul_perm(rank: int, trans: int, trans_batch: int) -> tuple[int, ...] | None:
    """The Transpose that turns one FusedMatMul operand of `rank` dims into a plain MatMul
    operand; None: read as it is.

    onnxruntime's FusedMatMulShapeInference (contrib_defs.cc): a vector is never transposed;
    transBatch moves dim 0 behind the batch dims, trans swaps the two matrix dims:
      neither:      [b..., m, k]                    (as it is)
      trans:        [b..., k, m]    -> perm [0, .., r-3, r-1, r-2]
      transBatch:   [m, b..., k]    -> perm [1, .., r-2, 0, r-1]
      both:         [k, b..., m]    -> perm [1, .., r-2, r-1, 0]
    then MatMul's own broadcasting of the batch dims (so [b, s, h] x [h, v] -> [b, s, v])."""
    if rank < 2 or not (trans or trans_batch):
        return None
    batch = list(range(1, rank - 1)) if trans_batch else list(range(rank - 2))
    rows, cols = (0, rank - 1) if trans_batch else (rank - 2, rank - 1)
    if trans:
        rows, cols = cols, rows
    return (*batch, rows, cols)


def _fused_matmul(node: onnx.NodeProto, graph: onnx.GraphProto,
                  shapes: Mapping[str, PlanShape | None]) -> _Outcome:
    """FusedMatMul(A, B) = alpha * op(A) @ op(B): a MatMul over its operands transposed as
    `fused_matmul_perm` says. A Transpose needs its operand's rank, so it may wait a round;
    the Transposes are the proxy's own nodes (named `*_graphmem_*`), dropped after import."""
    attrs = _attrs(node)
    perms: list[tuple[int, ...] | None] = []
    for index, side in enumerate("AB"):
        trans, batch = int(attrs.get(f"trans{side}", 0)), int(attrs.get(f"transBatch{side}", 0))
        if not (trans or batch):
            perms.append(None)
            continue
        shape = shapes.get(node.input[index])
        if shape is None:
            return _Outcome.WAIT
        perms.append(fused_matmul_perm(len(shape), trans, batch))
    for index, perm in enumerate(perms):
        if perm is not None:
            _insert_transpose(node, graph, index, perm)
    node.op_type, node.domain = "MatMul", ""
    del node.attribute[:]
    return _Outcome.DONE


def _fused_matmul_einsum(node: onnx.NodeProto) -> bool:
    """Where an operand's rank stays unknown: an Einsum `...ij,...kj->...ik` (transB), right
    for operands of equal ranks, which onnxruntime's symbolic inference can still shape
    (operands of different ranks come out unknown: their tensors are then estimated,
    runtime_models/ort_sizes.py). transBatch needs the rank: left as it is."""
    attrs = _attrs(node)
    if attrs.get("transBatchA", 0) or attrs.get("transBatchB", 0):
        return False
    left = "...ji" if attrs.get("transA", 0) else "...ij"
    right = "...kj" if attrs.get("transB", 0) else "...jk"
    node.op_type, node.domain = "Einsum", ""
    del node.attribute[:]
    node.attribute.append(helper.make_attribute("equation", f"{left},{right}->...ik"))
    return True


def _insert_transpose(node: onnx.NodeProto, graph: onnx.GraphProto, index: int,
                      perm: tuple[int, ...]) -> None:
    """A Transpose of the node's input `index`, placed just before the node."""
    name = f"{node.name}_graphmem_transpose{index}"
    transpose = helper.make_node("Transpose", [node.input[index]], [name], name=name,
                                 perm=list(perm))
    position = next(i for i, n in enumerate(graph.node) if n.name == node.name)
    graph.node.insert(position, transpose)
    node.input[index] = name


def _upsample(node: onnx.NodeProto, graph: onnx.GraphProto) -> bool:
    """nchwc Upsample [N, C, H, W] -> [N, C, H * scales[2], W * scales[3]] (integer scales,
    contrib_ops/cpu/nchwc_ops.cc): a Resize by the same constant scales."""
    scales = _attrs(node).get("scales")
    if not isinstance(scales, list) or len(scales) != 4:
        return False
    name = f"{node.name}_graphmem_scales"
    graph.initializer.append(numpy_helper.from_array(np.array(scales, np.float32), name))
    node.op_type, node.domain = "Resize", ""
    del node.attribute[:]
    node.input.extend(["", name])
    return True


def _reorder_input(node: onnx.NodeProto, graph: onnx.GraphProto, block: int,
                   shape: PlanShape | None) -> _Outcome:
    """[N, C, H, W] (or NHWC with channels_last) -> [N, C rounded up to the NCHWc block, H, W]:
    a Pad of the channels; from NHWC a Transpose (C a multiple of the block) or a Reshape to
    the known dims."""
    if shape is None or len(shape) != 4:
        return _Outcome.WAIT
    channels_last = _attrs(node).get("channels_last", 0)
    channels = shape[3 if channels_last else 1]
    if not isinstance(channels, int):
        return _Outcome.WAIT
    padded = -(-channels // block) * block
    if not channels_last:
        _stand_in(node, graph, "Pad", [np.array([0, 0, 0, 0, 0, padded - channels, 0, 0])])
    elif padded == channels:
        _transpose(node, (0, 3, 1, 2))
    elif isinstance(shape[1], int) and isinstance(shape[2], int):
        _stand_in(node, graph, "Reshape", [np.array([0, padded, shape[1], shape[2]])])
    else:
        return _Outcome.WAIT
    return _Outcome.DONE


def _reorder_output(node: onnx.NodeProto, graph: onnx.GraphProto, block: int,
                    shape: PlanShape | None) -> _Outcome:
    """[N, C padded, H, W] -> [N, channels, H, W]: a Slice of the channels; with channels_last
    -> [N, H, W, channels]: a Transpose (channels a multiple of the block, nothing to cut) or
    a Reshape to the known dims."""
    attrs = _attrs(node)
    if "channels" not in attrs:
        return _Outcome.KEEP
    channels = int(attrs["channels"])
    if not attrs.get("channels_last", 0):
        _stand_in(node, graph, "Slice", [np.array([0]), np.array([channels]), np.array([1])])
    elif channels % block == 0:
        _transpose(node, (0, 2, 3, 1))
    elif shape is not None and len(shape) == 4 and all(isinstance(d, int) for d in shape[2:]):
        _stand_in(node, graph, "Reshape", [np.array([0, shape[2], shape[3], channels])])
    else:
        return _Outcome.WAIT
    return _Outcome.DONE


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _stand_in(node: onnx.NodeProto, graph: onnx.GraphProto, op_type: str,
              constants: list[np.ndarray]) -> None:
    """`op_type` over the node's input and int64 constants added as initializers."""
    for index, values in enumerate(constants):
        name = f"{node.name}_graphmem_{index}"
        graph.initializer.append(numpy_helper.from_array(values.astype(np.int64), name))
        node.input.append(name)
    node.op_type, node.domain = op_type, ""
    del node.attribute[:]


def _transpose(node: onnx.NodeProto, perm: tuple[int, ...]) -> None:
    node.op_type, node.domain = "Transpose", ""
    del node.attribute[:]
    node.attribute.append(helper.make_attribute("perm", list(perm)))


def _inferred_dims(model: onnx.ModelProto) -> dict[str, PlanShape | None]:
    """Every tensor's dims as onnx's own inference finds them (ints where known), by name."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - onnx raises several types; then no shape is known
        inferred = model
    graph = inferred.graph
    shapes: dict[str, PlanShape | None] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        tensor_type = info.type.tensor_type
        shapes[info.name] = tuple(
            int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor_type.shape.dim) if tensor_type.HasField("shape") else None
    return shapes


def _nchwc_block(model: onnx.ModelProto) -> int:
    """The NCHWc block (8 channels with AVX2, 16 with AVX-512F): the gcd of the filter
    counts of the reordered nchwc Conv weights, which onnxruntime pads to the block."""
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    counts = [weights[n.input[1]][0] for n in model.graph.node
              if n.domain == NCHWC and n.op_type == "Conv" and n.input[1] in weights]
    block = 0
    for count in counts:
        block = int(np.gcd(block, count))
    return 16 if block % 16 == 0 and block else 8


# ----- putting the real nodes back -------------------------------------------------------------


def restore_nodes(graph: Graph, originals: Mapping[str, OriginalNode]) -> None:
    """The real op type, domain, attributes and inputs on each node the proxy replaced."""
    for node in graph.nodes:
        original = originals.get(node.name)
        if original is None:
            continue
        node.op_type, node.domain = original.op_type, original.domain
        node.attributes = {k: _attribute(v) for k, v in original.attributes.items()}
        node.set_inputs([graph.values.get(name) if name else None for name in original.inputs])
    _drop_proxy_nodes(graph)
    _drop_unused_proxy_values(graph)


def _attribute(value: Any) -> AttributeValue:
    return tuple(value) if isinstance(value, list) else value


def _drop_proxy_nodes(graph: Graph) -> None:
    """The nodes the proxy added (FusedMatMul's Transposes), unread once the real inputs are
    back."""
    for node in [n for n in graph.nodes if "_graphmem_" in n.name]:
        if not any(v.consumers for v in node.outputs):
            graph.remove_node(node)


def _drop_unused_proxy_values(graph: Graph) -> None:
    for name in [n for n in graph.values if "_graphmem_" in n]:
        if not graph.values[name].consumers:
            del graph.values[name]
