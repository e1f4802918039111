"""The loss and the optimizer update of the training expansion, as graph nodes (their cost
rules are graphmem/ops/training.py's).

Loss: cross-entropy of the model's first output against int64 targets, as
`F.cross_entropy(logits.reshape(-1, C), targets)` runs it: log_softmax over the last dim
(float32 under autocast: the losses are on both autocast fp32 lists), then nll_loss (mean).
The targets are an input of the step ([N] int64, N = numel(logits) / C).

Optimizer update (steady state: the state exists before the step, as from step 2 on), as
torch's foreach implementation (the default on CUDA) runs it over ALL parameters at once
(torch/optim/sgd.py `_multi_tensor_sgd`, adam.py `_multi_tensor_adam`), FLOPs per parameter
element (`add_(x, alpha=a)` is a multiply and an add, 2):
- sgd: p.add_(g, alpha=-lr): 2; no state.
- momentum: buf.mul_(m) 1, buf.add_(g) 2, p.add_(buf, alpha=-lr) 2: 5; state 1x (buf).
- adam: exp_avg.lerp_(g, 1-b1) 3, exp_avg_sq.mul_(b2) 1, .addcmul_(g, g, 1-b2) 3,
  denom = _foreach_sqrt(exp_avg_sq) 1 (a NEW tensor per parameter: the update's temporary,
  fp32, as large as all parameters together), denom.div_(bias_correction2_sqrt) 1,
  denom.add_(eps) 1, p.addcdiv_(exp_avg, denom, -step_size) 3: 13; state 2x.
- adamw: adam + p.mul_(1 - lr * wd) 1: 14; state 2x.
State and temporaries have the parameter's dtype (float32 master weights, also under AMP; a
model stored in half precision keeps half-precision state, as torch.optim does).
"""

from __future__ import annotations

from graphmem.core.conventions import OPTIMIZERS as OPTIMIZERS  # expand.py imports it here
from graphmem.core.conventions import STATE_SLOTS
from graphmem.core.ir import DType, Node, Phase, Role, Value
from graphmem.core.symbolic import SymInt, product
from graphmem.ops.training import TRAINING_DOMAIN as TRAINING_DOMAIN  # the nodes' domain

# (op, FLOPs per parameter element) of each foreach phase, see the module docstring
SGD_FLOPS = 2
MOMENTUM_FLOPS = 5
ADAM_MOMENT_FLOPS = 7  # lerp 3, mul 1, addcmul 3
ADAM_DENOMINATOR_FLOPS = 3  # sqrt, div, add eps
ADAM_UPDATE_FLOPS = 3  # addcdiv
ADAMW_DECAY_FLOPS = 1  # p.mul_(1 - lr * wd)
LOSS_PREFIX = "loss/"  # the loss nodes' names start with it


def loss_nodes(logits: Value, prefix: str = LOSS_PREFIX.rstrip("/")
               ) -> tuple[list[Node], Value, Value]:
    """Reshape -> LogSoftmax -> NegativeLogLikelihoodLoss on `logits`: (nodes, targets, loss).

    The nodes are templates the expansion copies into the step (as it copies the model's
    nodes), so they are linked to nothing: `logits` belongs to the inference graph."""
    shape = logits.shape or ()
    classes = shape[-1] if shape and shape[-1] is not None else SymInt.const(1)
    rows = product(d for d in shape[:-1] if d is not None) if len(shape) > 1 else SymInt.const(1)
    flat = Value(f"{prefix}/logits_2d", logits.dtype, (rows, classes), Role.ACTIVATION)
    # the logits' dtype; under AMP the expansion runs both loss ops in float32
    log_probs = Value(f"{prefix}/log_probs", logits.dtype, (rows, classes), Role.ACTIVATION)
    targets = Value(f"{prefix}/targets", DType.INT64, (rows,), Role.INPUT)
    loss = Value(f"{prefix}/loss", logits.dtype, (), Role.OUTPUT)
    shape_value = Value(f"{prefix}/shape_2d", DType.INT64, (SymInt.const(2),), Role.CONSTANT)
    nodes = [
        Node(f"{prefix}/reshape", "Reshape", [logits, shape_value], [flat]),
        Node(f"{prefix}/log_softmax", "LogSoftmax", [flat], [log_probs], {"axis": -1}),
        Node(f"{prefix}/nll_loss", "NegativeLogLikelihoodLoss", [log_probs, targets], [loss],
             {"reduction": "mean"}),
    ]
    return nodes, targets, loss


def state_values(params: list[Value], optimizer: str) -> dict[str, list[Value]]:
    """Optimizer state slot -> one tensor per parameter, in its dtype as torch.optim makes it
    (`torch.zeros_like(p)`; float32 for float32 master weights, also under AMP)."""
    return {slot: [Value(f"{slot}[{p.name}]", p.dtype, p.shape, Role.OPTIMIZER_STATE)
                   for p in params] for slot in STATE_SLOTS[optimizer]}


def optimizer_nodes(params: list[Value], grads: list[Value], optimizer: str,
                    state: dict[str, list[Value]]) -> list[Node]:
    """The foreach update's phases; each reads every parameter (or its state) at once."""
    if optimizer == "sgd":
        return [_phase("sgd", [*params, *grads], len(params), SGD_FLOPS)]
    if optimizer == "momentum":
        buffers = state["momentum_buffer"]
        return [_phase("momentum", [*buffers, *params, *grads], len(params), MOMENTUM_FLOPS)]
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    moments = _phase("adam_moments", [*exp_avg, *grads, *exp_avg_sq], len(params),
                     ADAM_MOMENT_FLOPS)
    denominators = [Value(f"adam_denominator[{p.name}]", p.dtype, p.shape,
                          Role.TEMPORARY) for p in params]
    sqrt = _phase("adam_sqrt", list(exp_avg_sq), len(params), ADAM_DENOMINATOR_FLOPS,
                  op_type="OptimizerTemporaries", outputs=denominators)
    update_flops = ADAM_UPDATE_FLOPS + (ADAMW_DECAY_FLOPS if optimizer == "adamw" else 0)
    update = _phase(f"{optimizer}_update", [*params, *exp_avg, *denominators], len(params),
                    update_flops)
    return [moments, sqrt, update]


def _phase(name: str, inputs: list[Value], counted: int, flops_per_element: int,
           op_type: str = "OptimizerStep", outputs: list[Value] | None = None) -> Node:
    # linked when the expansion adds it to the step (Graph.add_node)
    return Node(f"optimizer/{name}", op_type, list(inputs), list(outputs or []),
                {"counted_inputs": counted, "flops_per_element": flops_per_element},
                domain=TRAINING_DOMAIN, module_path="optimizer", phase=Phase.OPTIMIZER)
