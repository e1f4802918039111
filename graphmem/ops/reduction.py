"""Reductions: FLOPs = numel(input) * a constant per op. No MACs.

Convention (shared with normalization.py): every input element costs the arithmetic done on it
(an add into the accumulator, a compare for max/min/arg*); the per-output finalisation (divide
by the count for a mean, sqrt for L2, log for LogSumExp) is O(outputs) and not counted.
"""

from __future__ import annotations

from graphmem.core.ir import Node
from graphmem.ops.registry import (
    BackwardFlops,
    BackwardRule,
    CostRule,
    OpCost,
    ShapeUnknownError,
    input_numel,
    known_dim,
    register,
    register_backward,
    register_traits,
    saved_input,
    saved_output,
)
from graphmem.ops.traits import Autocast

# a histogram (torch.histc, bincount): each input element counted into its bin, one add as a
# reduction's (finding the bin is index arithmetic, as an ArgMax's position is not counted)
HISTOGRAM_FLOPS_PER_ELEMENT = 1
FLOPS_PER_INPUT_ELEMENT: dict[str, int] = {
    "ReduceSum": 1,  # add
    "ReduceMean": 1,  # add (divide per output not counted)
    "ReduceMax": 1,  # compare
    "ReduceMin": 1,  # compare
    "ReduceProd": 1,  # multiply
    "ReduceL1": 2,  # |x|, add
    "ReduceL2": 2,  # x * x, add (sqrt per output not counted)
    "ReduceSumSquare": 2,  # x * x, add
    "ReduceLogSum": 1,  # add (log per output not counted)
    "ReduceLogSumExp": 2,  # exp, add, as ONNX defines it (log per output not counted)
    "ArgMax": 1,  # compare
    "ArgMin": 1,  # compare
    "Hardmax": 1,  # compare (the one-hot write is a copy)
    "CumSum": 1,  # add (a running sum: one per element)
    "CumProd": 1,  # multiply (a running product: one per element)
    "GlobalAveragePool": 1,  # add
    "GlobalMaxPool": 1,  # compare
    "GlobalLpPool": 2,  # |x|^p, add
}


def per_input_element_rule(flops_per_element: int) -> CostRule:
    def rule(node: Node) -> OpCost:
        return OpCost.from_flops(input_numel(node, 0) * flops_per_element)

    return rule


def _register_table() -> None:
    for op_type, flops_per_element in FLOPS_PER_INPUT_ELEMENT.items():
        register(op_type)(per_input_element_rule(flops_per_element))


_register_table()


@register("TopK")
def top_k(node: Node) -> OpCost:
    # A selection with a heap of k: about ceil(log2(k)) compares per input element (at least
    # 1), which is what a partial sort costs when k << n. k is the output's size on `axis`;
    # a k that depends on a dynamic dim has no constant log and is reported as unknown.
    k = known_dim(node.outputs[0], node.attr_int("axis", -1), node)
    if not k.is_constant:
        raise ShapeUnknownError(f"{node.describe()}: k = {k} is not a constant")
    compares_per_element = max((int(k) - 1).bit_length(), 1)
    return OpCost.from_flops(input_numel(node, 0) * compares_per_element)


# ----- backward (training) --------------------------------------------------------------------
# derivatives.yaml: sum/mean save nothing but sizes (the gradient is expanded back, and
# divided by the count for a mean: 1 FLOP per input element); amax/amin save self and result
# (the gradient goes where self equals the result: compare and select, 2).
def _per_input_element_backward(flops_per_element: int) -> BackwardFlops:
    def flops(node: Node, needs_grad: frozenset[int]) -> OpCost:
        return OpCost.from_flops(input_numel(node, 0) * flops_per_element)

    return flops


register_backward("ReduceSum", "ReduceMean", "GlobalAveragePool")(
    BackwardRule((), _per_input_element_backward(1), differentiable=(0,)))
register_backward("ReduceMax", "ReduceMin", "GlobalMaxPool")(BackwardRule(
    (saved_input(0), saved_output()), _per_input_element_backward(2), differentiable=(0,)))
register_backward("ReduceSumSquare", "ReduceL2")(BackwardRule(
    (saved_input(0), saved_output()), _per_input_element_backward(2), differentiable=(0,)))

# CUDA autocast's fp32 list (norm, logsumexp); CPU autocast runs them in the input's type
register_traits("ReduceL2", "ReduceLogSumExp", autocast_cuda=Autocast.FLOAT32)
