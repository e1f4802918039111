"""Symbolic shape rules graphmem adds to onnxruntime's engine (graphmem/frontends/onnx/infer.py
`_ort_symbolic_inference`), for ops the engine leaves to onnx's one-node inference, which
loses a symbolic dim: the output goes unshaped or gets an invented dim, and every size after
it is either unknown or a name no input binds (so each probe of a dim had to infer the model
again with that dim fixed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper

from graphmem.frontends.onnx.loop_scans import ort_loop_rule

Rule = Callable[[onnx.NodeProto], None]

# From opset 18 every reduction takes its axes as an input, as ReduceSum does from opset 13;
# onnxruntime's rules read that input for ReduceSum, ReduceMean and ReduceProd only, and onnx's
# one-node inference, which the engine runs for the others, does not see the axes' value: the
# output stays unshaped and the next Add/Mul/Div ends the whole engine (DBRX's router
# normalizes with ReduceL1). The shape rule is ReduceSum's for every reduction.
REDUCTIONS_LIKE_SUM = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
                       "ReduceMin", "ReduceSumSquare")


def ruled_engine(module: Any, wrap: Callable[[Rule], Rule], **options: Any) -> Any:
    """A SymbolicShapeInference of `module` whose rules are its own and graphmem's
    (`added_rules`), each wrapped by `wrap`. The engine infers a control-flow body with a new
    engine of the class its module names (`_onnx_infer_subgraph`): named so for that call
    only, a body's engine has graphmem's rules too (a failing rule there fails the body's
    node, as before; without them a ReduceMax of opset 18 in a Loop body, an EmbeddingBag in
    max mode, left the body's output unshaped)."""
    stock = module.SymbolicShapeInference

    class Ruled(stock):  # type: ignore[misc,valid-type]  # onnxruntime's untyped class
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            engine: Any = self  # onnxruntime's class is untyped
            engine.dispatcher_.update(added_rules(self, module))

        def _onnx_infer_subgraph(self, *args: Any, **kwargs: Any) -> Any:
            module.SymbolicShapeInference = Ruled
            try:
                return super()._onnx_infer_subgraph(*args, **kwargs)
            finally:
                module.SymbolicShapeInference = stock

    engine: Any = Ruled(**options)
    engine.dispatcher_ = {op: wrap(rule) for op, rule in engine.dispatcher_.items()}
    return engine


def added_rules(engine: Any, module: Any) -> dict[str, Rule]:
    """The rules for `engine` (a SymbolicShapeInference); `module` is its module (its
    helpers: sympy products, shapes from sympy)."""
    return {**_reductions_with_axes_input(engine), "Flatten": _flatten(engine, module),
            "OneHot": _one_hot(engine, module), "Loop": ort_loop_rule(engine, module)}


def _reductions_with_axes_input(engine: Any) -> dict[str, Rule]:
    """ReduceSum's rule for the other reductions, where their axes are a known input (an
    attribute, or an axes value the engine cannot read, is left to onnx's inference, as
    before)."""
    def run(node: onnx.NodeProto) -> None:
        if len(node.input) > 1 and node.input[1] and engine._try_get_value(node, 1) is not None:
            engine._infer_ReduceSum(node)

    return {op: run for op in REDUCTIONS_LIKE_SUM}


def _flatten(engine: Any, module: Any) -> Rule:
    """Flatten(x, axis) is [prod(x.shape[:axis]), prod(x.shape[axis:])] (the ONNX spec; a
    negative axis counts from the end). onnx's rule multiplies numbers only, so a symbolic
    dim made the output unshaped (a mixture of experts' `index_add` over the router's
    [16*batch, 2, 1] choices, flattened at axis 2, left every expert's gather unknown).
    An input of unknown rank is left to onnx's inference."""
    def run(node: onnx.NodeProto) -> None:
        if engine._get_shape(node, 0) is None:
            return
        shape = engine._get_sympy_shape(node, 0)
        axis = module.get_attribute(node, "axis", 1)  # in [-rank, rank]: rank is allowed
        axis = axis + len(shape) if axis < 0 else axis
        # the product of no dims is 1 (axis 0: [1, all]; axis = rank: [all, 1])
        flat = [module.sympy_reduce_product(shape[:axis]),
                module.sympy_reduce_product(shape[axis:])]
        engine._update_computed_dims(flat)
        element = engine.known_vi_[node.input[0]].type.tensor_type.elem_type
        engine.known_vi_[node.output[0]].CopyFrom(helper.make_tensor_value_info(
            node.output[0], element, module.get_shape_from_sympy_shape(flat)))

    return run


def _one_hot(engine: Any, module: Any) -> Rule:
    """OneHot(indices, depth, values, axis): indices' shape with `depth` inserted at `axis`
    (the ONNX spec: depth a scalar or a one-element tensor, cast to an integer). onnxruntime's
    rule takes a depth it reads as an array for unknown and names a new dim, which no input
    binds (a mixture of experts' router: OneHot(TopK's indices, Constant 5)). A depth of
    unknown value keeps the engine's own rule."""
    def run(node: onnx.NodeProto) -> None:
        depth = engine._try_get_value(node, 1)
        known = depth is not None and np.size(depth) == 1
        value = np.asarray(depth).reshape(-1)[0] if known else None
        if value is None or not module.is_literal(value) or engine._get_shape(node, 0) is None:
            engine._infer_OneHot(node)
            return
        shape = engine._get_sympy_shape(node, 0)
        axis = module.handle_negative_axis(module.get_attribute(node, "axis", -1), len(shape) + 1)
        hot = [*shape[:axis], int(value), *shape[axis:]]
        element = engine.known_vi_[node.input[2]].type.tensor_type.elem_type
        engine.known_vi_[node.output[0]].CopyFrom(helper.make_tensor_value_info(
            node.output[0], element, module.get_shape_from_sympy_shape(hot)))

    return run
