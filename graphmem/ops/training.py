"""Ops of a training step: the loss, graphmem's optimizer and gradient ops, fused pointwise.

The training expansion (graphmem/training/) makes these nodes; their rules live here, with
every other rule, so an ONNX inference graph that holds a loss costs the same whatever was
imported before (graphmem/ops/registry.py `load_all`).

- NegativeLogLikelihoodLoss: [N, C] log-probabilities, [N] targets -> the mean of N picked
  values: 1 FLOP per row. SoftmaxCrossEntropyLoss is LogSoftmax over the classes, then that.
- OptimizerStep / OptimizerTemporaries: one phase of torch's foreach update over every
  parameter; the node says its FLOPs per element (graphmem/training/steps.py derives them).
- GradSeed (ones_like(loss)), GradBuffers (the earlier micro-batches' .grad): no arithmetic;
  GradAccumulate (autograd's InputBuffer adds a second gradient): 1 FLOP per element.
- FusedPointwise: a decomposed activation put back together (graphmem/training/fusion.py);
  the node says the FLOPs per element of its ops; its backward costs twice that.
"""

from __future__ import annotations

from graphmem.core.ir import Node
from graphmem.core.symbolic import SymInt
from graphmem.ops.normalization import LOG_SOFTMAX_FLOPS_PER_ELEMENT
from graphmem.ops.registry import (
    BackwardRule,
    OpCost,
    input_numel,
    output_numel,
    register,
    register_backward,
    register_traits,
    saved_input,
)
from graphmem.ops.traits import FLOAT32_UNDER_AUTOCAST

TRAINING_DOMAIN = "graphmem.training"
FUSED_OP = "FusedPointwise"
NLL_FLOPS_PER_ROW = 1  # pick the target's log-probability and add it to the mean
ACCUMULATE_FLOPS = 1  # add the second gradient, per element
FUSED_BACKWARD_FLOPS_FACTOR = 2  # each primitive's derivative, then the chain rule's multiply


# ----- the loss -------------------------------------------------------------------------------
@register("NegativeLogLikelihoodLoss")
def negative_log_likelihood(node: Node) -> OpCost:
    # [N, C] log-probabilities, [N] targets -> the mean of N picked values
    target = node.input(1)
    rows = target.numel if target is not None and target.numel is not None else SymInt()
    return OpCost.from_flops(rows * NLL_FLOPS_PER_ROW)


@register("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(node: Node) -> OpCost:
    # scores [N, C, d1...], labels [N, d1...]: LogSoftmax over C, then one pick per label
    log_softmax = input_numel(node, 0) * LOG_SOFTMAX_FLOPS_PER_ELEMENT
    return OpCost.from_flops(log_softmax + input_numel(node, 1) * NLL_FLOPS_PER_ROW)


# both autocast lists run the losses in float32 (cross_entropy, nll_loss)
register_traits("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", **FLOAT32_UNDER_AUTOCAST)


def nll_backward_flops(node: Node, needs_grad: frozenset[int]) -> OpCost:
    # zeros [N, C], then -1/N written at each row's target: N FLOPs
    return negative_log_likelihood(node)


# derivatives.yaml: nll_loss_forward saves self's size, target and total_weight (a scalar)
register_backward("NegativeLogLikelihoodLoss")(
    BackwardRule((saved_input(1),), nll_backward_flops, differentiable=(0,)))


# ----- the optimizer update and gradient bookkeeping ------------------------------------------
def _counted_elements(node: Node) -> SymInt:
    counted = node.attr_int("counted_inputs", len(node.inputs))
    return sum((v.numel or SymInt() for v in node.present_inputs[:counted]), SymInt())


@register("OptimizerStep", "OptimizerTemporaries", domain=TRAINING_DOMAIN)
def optimizer_phase(node: Node) -> OpCost:
    # FLOPs per element of the first `counted_inputs` inputs (the parameters or their state)
    return OpCost.from_flops(_counted_elements(node) * node.attr_int("flops_per_element", 0))


@register("GradSeed", domain=TRAINING_DOMAIN)
def grad_seed(node: Node) -> OpCost:
    return OpCost.zero()  # ones_like(loss): a fill


@register("GradBuffers", domain=TRAINING_DOMAIN)
def grad_buffers(node: Node) -> OpCost:
    return OpCost.zero()  # the .grad tensors left by the earlier micro-batches: no arithmetic


@register("GradAccumulate", domain=TRAINING_DOMAIN)
def grad_accumulate(node: Node) -> OpCost:
    # autograd's InputBuffer adds a second gradient of the same tensor: 1 FLOP per element
    return OpCost.from_flops((node.outputs[0].numel or SymInt()) * ACCUMULATE_FLOPS)


# ----- fused pointwise regions ----------------------------------------------------------------
@register(FUSED_OP, domain=TRAINING_DOMAIN)
def fused_pointwise(node: Node) -> OpCost:
    return OpCost.from_flops(output_numel(node) * node.attr_int("flops_per_element", 0))


def fused_backward_flops(node: Node, needs_grad: frozenset[int]) -> OpCost:
    per_element = node.attr_int("flops_per_element", 0) * FUSED_BACKWARD_FLOPS_FACTOR
    return OpCost.from_flops(output_numel(node) * per_element)


# PyTorch's one-op activation saves only its input (gelu_backward(grad, self))
register_backward(FUSED_OP, domain=TRAINING_DOMAIN)(
    BackwardRule((saved_input(0),), fused_backward_flops, differentiable=(0,)))
