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

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

# ops that compute shapes and indices; all cheap and deterministic
FOLDABLE_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Max", "Min", "Reshape", "Concat",
    "Unsqueeze", "Squeeze", "Cast", "Gather", "Slice", "Range", "Equal", "Less", "Greater",
    "Not", "Where", "Identity", "Floor", "Ceil", "Sqrt",
})
MAX_FOLDED_ELEMENTS = 64  # shape vectors and scalars, never real tensors


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
    try:
        values = _run_one(node, known, opset)
    except Exception:  # noqa: BLE001 - an op the reference runtime refuses stays as it is
        return None
    if any(v.size > MAX_FOLDED_ELEMENTS for v in values):
        return None
    return values


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
    found = {}
    for tensor in graph.initializer:
        small = tensor.data_location != onnx.TensorProto.EXTERNAL and _numel(tensor) <= (
            MAX_FOLDED_ELEMENTS)
        if small and (tensor.raw_data or _has_typed_data(tensor)):
            found[tensor.name] = numpy_helper.to_array(tensor)
    return found


def _constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    for attribute in node.attribute:
        tensor = attribute.type == onnx.AttributeProto.TENSOR
        if attribute.name == "value" and tensor and _numel(attribute.t) <= MAX_FOLDED_ELEMENTS:
            return numpy_helper.to_array(attribute.t)
        if attribute.name in ("value_int", "value_ints"):
            return np.asarray(helper.get_attribute_value(attribute), dtype=np.int64)
    return None


def _numel(tensor: onnx.TensorProto) -> int:
    return int(np.prod(tensor.dims)) if tensor.dims else 1


def _has_typed_data(tensor: onnx.TensorProto) -> bool:
    return bool(tensor.int64_data or tensor.int32_data or tensor.float_data
                or tensor.double_data)


def default_opset(model: onnx.ModelProto) -> int:
    """The version of the default ("" / ai.onnx) domain the model imports; 0 when none."""
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
