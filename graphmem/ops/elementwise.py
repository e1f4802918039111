"""Elementwise ops: FLOPs = numel(output) * a constant per op, from one table. No MACs.

Convention: each primitive operation on one element is 1 FLOP: an add, subtract, multiply,
divide, compare, select, min or max, and also one evaluation of exp, log, sqrt, pow, tanh, erf,
sin or cos (a transcendental is one instruction of the hardware or the library, as fvcore and
FlopCounterMode treat it, not the dozen FLOPs of its polynomial). An op defined by a formula
costs the primitives in its formula, written next to it in the table. Casts, copies and
inference-time Dropout cost 0 FLOPs; they are registered because they are known ops (the bytes
they move are counted by the costs pass).

Output elements are counted, so broadcasting ([b, s, d] + [d]) costs numel of the result.
"""

from __future__ import annotations

from graphmem.core.ir import DType, Node, Shape
from graphmem.core.symbolic import SymInt
from graphmem.ops.registry import (
    BackwardRule,
    CostRule,
    OpCost,
    SavedTensor,
    broadcast_temporaries,
    no_temporaries,
    output_numel,
    pointwise_backward,
    pointwise_backward_flops,
    register,
    register_backward,
    register_traits,
    saved_extra,
    saved_input,
    saved_output,
)
from graphmem.ops.traits import Autocast

MS_DOMAIN = "com.microsoft"
# One primitive operation on one element; also what the torch path counts for an aten op of
# the `pointwise` tag and each element of a foreach op (graphmem/ops/aten.py)
PRIMITIVE_FLOPS = 1

FLOPS_PER_ELEMENT: dict[str, int] = {
    # ----- arithmetic, comparison, logic: one operation
    "Add": 1,
    "Sub": 1,
    "Mul": 1,
    "Div": 1,
    "Pow": 1,
    "Mod": 1,
    "BitShift": 1,
    "Neg": 1,
    "Abs": 1,
    "Reciprocal": 1,
    "Floor": 1,
    "Ceil": 1,
    "Round": 1,
    "Sign": 1,
    "Where": 1,  # select
    "Equal": 1,
    "Less": 1,
    "Greater": 1,
    "LessOrEqual": 1,
    "GreaterOrEqual": 1,
    "And": 1,
    "Or": 1,
    "Not": 1,
    "Xor": 1,
    "BitwiseAnd": 1,
    "BitwiseOr": 1,
    "BitwiseXor": 1,
    "BitwiseNot": 1,
    "IsNaN": 1,
    "IsInf": 1,
    # ----- variadic (n inputs): this many per element per extra input, (n - 1) in all
    "Sum": 1,
    "Max": 1,
    "Min": 1,
    "Mean": 1,  # (n - 1) adds, plus 1 divide by n (see mean below)
    # ----- transcendental: one evaluation
    "Exp": 1,
    "Log": 1,
    "Sqrt": 1,
    "Tanh": 1,
    "Erf": 1,
    "Sin": 1,
    "Cos": 1,
    "Tan": 1,
    "Asin": 1,
    "Acos": 1,
    "Atan": 1,
    "Sinh": 1,
    "Cosh": 1,
    "Asinh": 1,
    "Acosh": 1,
    "Atanh": 1,
    # ----- activations: the primitives of their formula
    "Relu": 1,  # max(x, 0)
    "ThresholdedRelu": 1,  # x > alpha ? x : 0
    "LeakyRelu": 2,  # x < 0 ? alpha * x : x: compare, multiply
    "PRelu": 2,  # as LeakyRelu, slope from a tensor
    "Shrink": 2,  # compare, add or subtract bias
    "Clip": 2,  # min, max
    "Elu": 4,  # x < 0 ? alpha * (exp(x) - 1) : x: compare, exp, subtract, multiply
    "Selu": 5,  # gamma * Elu: compare, exp, subtract, multiply, multiply
    "Celu": 7,  # max(0, x) + min(0, alpha * (exp(x / alpha) - 1)): div exp sub mul min max add
    "Sigmoid": 4,  # 1 / (1 + exp(-x)): negate, exp, add, divide
    "HardSigmoid": 4,  # max(0, min(1, alpha * x + beta)): multiply, add, min, max
    "HardSwish": 5,  # x * HardSigmoid(x)
    "Swish": 6,  # x * Sigmoid(alpha * x)
    "SwiGLU": 7,  # Swish(a) * b (opset 28): Swish, multiply
    "QuickGelu": 6,  # x * Sigmoid(alpha * x) (com.microsoft)
    "Softplus": 3,  # log(exp(x) + 1)
    "Softsign": 3,  # x / (1 + |x|)
    "Mish": 5,  # x * tanh(Softplus(x))
    "Gelu": 5,  # x * 0.5 * (1 + erf(x / sqrt(2))): divide, erf, add, multiply, multiply
    "FastGelu": 9,  # tanh form, x*0.5*(1+tanh(c*(x+0.044715*x^3))): x^3 is 2, then 7 more
    "BiasGelu": 6,  # Gelu(x + bias) (com.microsoft)
    "BiasAdd": 2,  # x + bias + skip (com.microsoft)
    "RotaryEmbedding": 3,  # x * cos + rotate(x) * sin; an upper bound with partial rotation
    # ----- quantization
    "QuantizeLinear": 5,  # saturate(round(x / scale) + zero_point): div, round, add, clip (2)
    "DequantizeLinear": 2,  # (x - zero_point) * scale
    "DynamicQuantizeLinear": 7,  # min and max over x (2), then QuantizeLinear (5)
    # ----- no arithmetic: a copy or a reinterpretation
    "Cast": 0,
    "CastLike": 0,
    "BitCast": 0,  # the same bits read as another type of the same width
    "Identity": 0,
    "Dropout": 0,  # inference: identity (exported models run Dropout in inference mode)
}

# Ops of the table that live in com.microsoft, or in both domains; the rest are default domain.
DOMAINS: dict[str, tuple[str, ...]] = {
    "QuickGelu": (MS_DOMAIN,),
    "FastGelu": (MS_DOMAIN,),
    "BiasGelu": (MS_DOMAIN,),
    "BiasAdd": (MS_DOMAIN,),
    "Gelu": ("", MS_DOMAIN),  # ONNX opset 20 and ORT's contrib op
    "RotaryEmbedding": ("", MS_DOMAIN),  # ONNX opset 23 and ORT's contrib op
}

VARIADIC_OPS = ("Sum", "Max", "Min")


_MAX_REMEMBERED_PRODUCTS = 4096


def per_element_rule(flops_per_element: int) -> CostRule:
    # a graph's outputs have a few distinct element counts (shared SymInts): each is
    # multiplied once, not a new polynomial per node (10^5 Adds over [batch, 4])
    products: dict[SymInt, SymInt] = {}

    def rule(node: Node) -> OpCost:
        numel = output_numel(node)
        flops = products.get(numel)
        if flops is None:
            if len(products) >= _MAX_REMEMBERED_PRODUCTS:
                products.clear()
            flops = products[numel] = numel * flops_per_element
        return OpCost.from_flops(flops)

    return rule


def variadic_flops_per_element(node: Node) -> int:
    # Sum(a, b, c) = (a + b) + c: (n - 1) operations per element
    return FLOPS_PER_ELEMENT[node.op_type] * max(len(node.present_inputs) - 1, 0)


@register(*VARIADIC_OPS)
def variadic(node: Node) -> OpCost:
    return OpCost.from_flops(output_numel(node) * variadic_flops_per_element(node))


@register("Mean")
def mean(node: Node) -> OpCost:
    # (n - 1) adds, then 1 divide by n (none for a single input, which is a copy)
    per_element = variadic_flops_per_element(node)
    return OpCost.from_flops(output_numel(node) * (per_element + (per_element > 0)))


@register("Gelu", domain=MS_DOMAIN)
@register("Gelu")
def gelu(node: Node) -> OpCost:
    # opset 20: approximate="tanh" is the FastGelu formula
    op = "FastGelu" if node.attr_str("approximate", "none") == "tanh" else "Gelu"
    return OpCost.from_flops(output_numel(node) * FLOPS_PER_ELEMENT[op])


@register("FastGelu", domain=MS_DOMAIN)
def fast_gelu(node: Node) -> OpCost:
    # FastGelu(x + bias) when the optional bias (input 1) is there: one add more
    per_element = FLOPS_PER_ELEMENT["FastGelu"] + (node.input(1) is not None)
    return OpCost.from_flops(output_numel(node) * per_element)


_OWN_RULES = frozenset({*VARIADIC_OPS, "Mean", "Gelu", "FastGelu"})


def _register_table() -> None:
    for op_type, flops_per_element in FLOPS_PER_ELEMENT.items():
        if op_type in _OWN_RULES:
            continue
        for domain in DOMAINS.get(op_type, ("",)):
            register(op_type, domain=domain)(per_element_rule(flops_per_element))


_register_table()


# ----- backward (training) --------------------------------------------------------------------
# What autograd saves, from PyTorch's tools/autograd/derivatives.yaml (the aten op each ONNX op
# comes from), and the backward's FLOPs per output element per input gradient, counted like
# the forward table: add/sub pass the gradient on (0; the sum of a broadcast input is a
# reduction, not counted); mul: grad * other (1); div: grad / b (1), -grad * a / (b * b) (3);
# relu: threshold_backward(grad, result) (1: a select); sigmoid: g * y * (1 - y) (3);
# tanh: g * (1 - y * y) (3); gelu_backward(grad, self) (8: erf, exp of -x*x/2 and the
# product rule); exp: g * result (1); log: g / self (1); sqrt: g / (2 * result) (2);
# reciprocal: -g * y * y (3); pow(self, exponent): g * e * self^(e-1) (3); where: select (1).
def _mask_shape(node: Node) -> Shape:
    return node.outputs[0].shape or ()


_TAKES_BOTH = (saved_input(1, (0,)), saved_input(0, (1,)))  # mul: other for self, self for other

BACKWARD_TABLE: dict[str, tuple[tuple[SavedTensor, ...], int]] = {
    "Add": ((), 0),
    "Sub": ((), 1),
    "Neg": ((), 1),
    "Sum": ((), 0),
    "Mul": (_TAKES_BOTH, 1),
    "Div": ((saved_input(1), saved_input(0, (1,))), 3),
    "Relu": ((saved_output(),), 1),
    "Sigmoid": ((saved_output(),), 3),
    "Tanh": ((saved_output(),), 3),
    "Gelu": ((saved_input(0),), 8),
    "Erf": ((saved_input(0),), 4),  # g * 2/sqrt(pi) * exp(-x*x)
    "Exp": ((saved_output(),), 1),
    "Log": ((saved_input(0),), 1),
    "Sqrt": ((saved_output(),), 2),
    "Reciprocal": ((saved_output(),), 3),
    "Pow": ((saved_input(0), SavedTensor("output", 0, (1,))), 3),  # result: exponent's grad
    "Where": ((saved_input(0),), 1),
    "Abs": ((saved_input(0),), 2),  # g * sign(self)
    "LeakyRelu": ((saved_input(0),), 2),
    "Clip": ((saved_input(0),), 2),  # clamp_backward: a mask of self in range
    "Elu": ((saved_output(),), 3),  # elu_backward(grad, ..., is_result=true, result)
    "Softplus": ((saved_input(0),), 4),
    "HardSigmoid": ((saved_input(0),), 2),
    "HardSwish": ((saved_input(0),), 3),
    "Sin": ((saved_input(0),), 2),
    "Cos": ((saved_input(0),), 2),
    "Max": ((saved_input(0), saved_input(1)), 1),
    "Min": ((saved_input(0), saved_input(1)), 1),
    "Cast": ((), 0),  # the gradient is cast back: a copy
    # training-mode dropout (native_dropout) saves its bool mask: grad * mask * scale
    "Dropout": ((saved_extra("mask", DType.BOOL, _mask_shape),), 2),
}
_DIFFERENTIABLE = {"Where": (1, 2), "Pow": (0,), "Dropout": (0,), "Clip": (0,)}
_BROADCAST_TEMPORARIES = frozenset({"Mul", "Div"})
# the incoming gradient itself goes to these inputs (where not broadcast): no new tensor
_PASSES_GRADIENT: dict[str, tuple[int, ...] | None] = {"Add": (0, 1), "Sub": (0,), "Sum": None}


def _register_backward_table() -> None:
    for op_type, (saves, flops_per_element) in BACKWARD_TABLE.items():
        temporaries = (broadcast_temporaries if op_type in _BROADCAST_TEMPORARIES
                       else no_temporaries)
        rule = pointwise_backward(saves, flops_per_element, _DIFFERENTIABLE.get(op_type),
                                  temporaries, _PASSES_GRADIENT.get(op_type, ()))
        for domain in DOMAINS.get(op_type, ("",)):
            register_backward(op_type, domain=domain)(rule)


_register_backward_table()
register_backward("Identity")(
    BackwardRule((), pointwise_backward_flops(0), view=True, grad_view=True))


# ----- traits ---------------------------------------------------------------------------------
# PyTorch's in-place form of the aten op each ONNX op comes from (`relu_`, `add_`): the op
# could write its result over a dying input (graphmem/suggest/inplace.py)
INPLACE_VARIANTS: dict[str, str] = {
    "Relu": "relu_", "LeakyRelu": "leaky_relu_", "Elu": "elu_", "Sigmoid": "sigmoid_",
    "HardSigmoid": "hardsigmoid_", "HardSwish": "hardswish_", "Tanh": "tanh_", "Clip": "clamp_",
    "Add": "add_", "Sub": "sub_", "Mul": "mul_", "Div": "div_", "Neg": "neg_", "Exp": "exp_",
}
COMMUTATIVE_OPS = ("Add", "Mul")  # `y.add_(x)` computes x + y: either operand takes the result
# CUDA autocast's fp32 list (pow, exp, log, softplus); CPU autocast leaves them to promotion
FLOAT32_ON_CUDA = ("Pow", "Exp", "Log", "Softplus")


def _register_traits() -> None:
    for op_type, variant in INPLACE_VARIANTS.items():
        register_traits(op_type, inplace_variant=variant)
    register_traits(*COMMUTATIVE_OPS, commutative=True)
    register_traits(*FLOAT32_ON_CUDA, autocast_cuda=Autocast.FLOAT32)


_register_traits()
