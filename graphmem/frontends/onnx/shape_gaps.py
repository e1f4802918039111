"""graphmem's own shape rules, for the gaps the ONNX shape inference engines leave.

onnxruntime's symbolic shape inference knows most ops; where it gives up (an op it lacks a rule
for, a contrib op from a newer release), ops whose output shape follows from their inputs by a
simple rule get it here, in one pass in topological order, so the gap does not spread.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphmem.core.ir import DType, Graph, Node, Shape, Value
from graphmem.core.symbolic import SymInt

# Output 0 has the shape (and dtype) of input 0.
SAME_AS_FIRST_INPUT = frozenset({
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish",
    "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Erf", "Gelu", "FastGelu",
    "BiasGelu", "QuickGelu", "Softplus", "Softsign", "Mish", "Clip", "Floor", "Ceil", "Round",
    "Sign", "Sin", "Cos", "Not", "IsNaN", "IsInf", "Identity", "Dropout", "Softmax",
    "LogSoftmax", "LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization",
    "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "BatchNormalization",
    "InstanceNormalization", "GroupNormalization", "LpNormalization", "CumSum", "Trilu",
    "RotaryEmbedding",
})
# Output 0 is the numpy broadcast of all inputs.
BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Where", "Equal",
    "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "BitShift",
})
_BOOL_RESULT = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And",
                          "Or", "Xor", "Not", "IsNaN", "IsInf"})


@dataclass(frozen=True)
class ShapeGapReport:
    filled: tuple[str, ...]  # values whose shape graphmem's own rules supplied
    still_unknown: tuple[str, ...]  # node outputs no rule could shape


def fill_shape_gaps(graph: Graph) -> ShapeGapReport:
    """Give shapes to node outputs left unknown, where a simple rule decides them."""
    filled: list[str] = []
    unknown: list[str] = []  # in the nodes' order, each node's outputs in order
    for node in graph.nodes:  # one walk: a rule shapes only the node's own first output
        outputs = node.outputs
        if not outputs:
            continue
        first = outputs[0]
        if not first.shape_known:
            shape = _rule_shape(node)  # a rule's shape is known: its inputs' dims or 1
            if shape is not None:
                _set_shape(node, first, shape)
                filled.append(first.name)
            else:
                unknown.append(first.name)
        if len(outputs) > 1:
            unknown.extend(v.name for v in outputs[1:] if not v.shape_known)
    return ShapeGapReport(filled=tuple(filled), still_unknown=tuple(unknown))


def _rule_shape(node: Node) -> Shape | None:
    inputs = node.present_inputs
    if not inputs or not all(v.shape_known for v in inputs):
        return None
    if node.op_type in SAME_AS_FIRST_INPUT:
        return inputs[0].shape
    if node.op_type in BROADCASTING:
        return broadcast_shapes([v.shape for v in inputs if v.shape is not None])
    return None


def _set_shape(node: Node, value: Value, shape: Shape) -> None:
    value.shape = shape
    if value.dtype is DType.UNKNOWN:
        value.dtype = DType.BOOL if node.op_type in _BOOL_RESULT else _data_dtype(node)


def _data_dtype(node: Node) -> DType:
    # Where(cond, x, y): the data type is x's; elsewhere the first input's.
    index = 1 if node.op_type == "Where" else 0
    source = node.input(index)
    return source.dtype if source is not None else DType.UNKNOWN


def broadcast_shapes(shapes: list[Shape]) -> Shape | None:
    """numpy broadcasting; None when two dims can't be shown equal or 1."""
    rank = max(len(s) for s in shapes)
    result: list[SymInt | None] = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        merged = _broadcast_dim([d for d in dims if d is not None])
        if merged is None:
            return None
        result.append(merged)
    return tuple(result)


def _broadcast_dim(dims: list[SymInt]) -> SymInt | None:
    distinct = set(d for d in dims if d != 1)
    if not distinct:
        return SymInt.const(1)
    return distinct.pop() if len(distinct) == 1 else None
