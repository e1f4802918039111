"""Fold the small integer computations of an ONNX graph into constants, for shape inference.

TorchScript exports compute shapes with chains of tiny integer ops on constants (nn.
MultiheadAttention: `Mod(Constant, Constant) -> Reshape -> Slice(Shape(x), ...) -> Concat ->
Reshape`). onnxruntime's symbolic inference has no rule that evaluates `Mod`, so the slice's
length, the Concat's and the Reshape's output shape stay unknown, and with them every shape
downstream. Evaluating such nodes once with onnx's reference runtime, on inputs that are
already constants, hands the inference engines literal values instead.

Only a copy used for inference is folded: the graph graphmem analyses keeps the model's own
nodes (`restore_nodes`).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from graphmem.frontends.onnx.untrusted import has_inline_data, tensor_numel

# ops that compute shapes and indices; all cheap and deterministic
FOLDABLE_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Max", "Min", "Reshape", "Concat",
    "Unsqueeze", "Squeeze", "Cast", "Gather", "Slice", "Range", "Equal", "Less", "Greater",
    "Not", "Where", "Identity", "Floor", "Ceil", "Sqrt",
})
MAX_FOLDED_ELEMENTS = 64  # shape vectors and scalars, never real tensors
MAX_FOLDED_RANK = 8  # (numel alone would multiply any number of dims first)


def fold_constants(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    """Replace foldable nodes of `model` (in place) by Constant nodes with the same outputs;
    returns the replaced nodes by their first output's name."""
    known = _constant_values(model.graph)
    replaced: dict[str, onnx.NodeProto] = {}
    opset = default_opset(model) or 17  # a model without one still folds
    for index, node in enumerate(model.graph.node):
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            value = _constant_node_value(node)
            if value is not None:
                known[node.output[0]] = value
            continue
        values = _evaluate(node, known, opset)
        if values is None:
            continue
        for name, value in zip(node.output, values, strict=True):
            known[name] = value
        original = onnx.NodeProto()
        original.CopyFrom(node)
        replaced[node.output[0]] = original
        model.graph.node[index].CopyFrom(helper.make_node(
            "Constant", [], [node.output[0]], name=node.name,
            value=numpy_helper.from_array(values[0])))
    return replaced


def restore_nodes(model: onnx.ModelProto, replaced: dict[str, onnx.NodeProto]) -> None:
    """Put the model's own nodes back in place of the Constant nodes fold_constants made."""
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output and node.output[0] in replaced:
            node.CopyFrom(replaced[node.output[0]])


def _evaluate(node: onnx.NodeProto, known: dict[str, np.ndarray],
              opset: int) -> list[np.ndarray] | None:
    if node.domain not in ("", "ai.onnx") or node.op_type not in FOLDABLE_OPS:
        return None
    if len(node.output) != 1 or any(name and name not in known for name in node.input):
        return None
    if any(known[name].size > MAX_FOLDED_ELEMENTS for name in node.input if name):
        return None
    if node.op_type == "Range" and not _small_range(*(known[n] for n in node.input)):
        return None  # its length comes from values: refuse before numpy allocates it
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")  # an overflowing int product is the model's
            values = _run_one(node, known, opset)
    except Exception:  # noqa: BLE001 - an op the reference runtime refuses stays as it is
        return None
    if any(v.size > MAX_FOLDED_ELEMENTS for v in values):
        return None
    return values


def _small_range(*operands: np.ndarray) -> bool:
    """Range(start, limit, delta) yields at most MAX_FOLDED_ELEMENTS values."""
    if len(operands) != 3 or any(o.size != 1 for o in operands):
        return False
    start, limit, delta = (float(o.reshape(())) for o in operands)
    if not all(np.isfinite((start, limit, delta))) or delta == 0:
        return False
    return max(np.ceil((limit - start) / delta), 0) <= MAX_FOLDED_ELEMENTS


def _run_one(node: onnx.NodeProto, known: dict[str, np.ndarray],
             opset: int) -> list[np.ndarray]:
    inputs = [name for name in node.input if name]
    graph = helper.make_graph(
        [node], "fold",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(known[name].dtype),
                                       known[name].shape) for name in inputs],
        [helper.make_empty_tensor_value_info(node.output[0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {name: known[name] for name in inputs}
    return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, feeds)]


def _constant_values(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The small initializers whose value the file holds; data-less (external or dropped) or
    wrongly sized ones are unknown values, never read."""
    return {tensor.name: numpy_helper.to_array(tensor) for tensor in graph.initializer
            if _small_known(tensor)}


def _constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    for attribute in node.attribute:
        tensor = attribute.type == onnx.AttributeProto.TENSOR
        if attribute.name == "value" and tensor:
            return numpy_helper.to_array(attribute.t) if _small_known(attribute.t) else None
        if attribute.name in ("value_int", "value_ints"):
            return np.asarray(helper.get_attribute_value(attribute), dtype=np.int64)
    return None


def _small_known(tensor: onnx.TensorProto) -> bool:
    """A shape-sized tensor holding its own value (onnx_untrusted.has_inline_data: never an
    external file, never data of the wrong size)."""
    if tensor.data_type == onnx.TensorProto.STRING or len(tensor.dims) > MAX_FOLDED_RANK:
        return False
    return tensor_numel(tensor) <= MAX_FOLDED_ELEMENTS and has_inline_data(tensor)


def default_opset(model: onnx.ModelProto) -> int:
    """The version of the default ("" / ai.onnx) domain the model imports; 0 when none."""
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
