"""Training expansion: one graph for a whole training step of an ONNX inference graph.

The forward graph becomes, in this order:
1. the forward nodes (with autocast's casts under AMP), then the loss (cross-entropy of the
   model's first output, graphmem/training/steps.py). Tensors autograd saves for
   backward (each op's backward rule, graphmem/ops/) are SAVED_ACTIVATION and live until
   the backward node that reads them; ops PyTorch runs as views (Reshape, Transpose, Split...)
   allocate nothing, as in eager PyTorch;
2. one backward node per forward node that a gradient reaches, in reverse order: it reads the
   gradients of its outputs and its saved tensors and makes the gradients of its inputs that
   need one (ACTIVATION_GRADIENT, freed after their last use; a tensor read by several nodes
   gets its gradients summed in place, as autograd's InputBuffer does) and of parameters
   (GRADIENT, held until the optimizer step ends);
3. the optimizer update (training/steps.py), with its state resident (OPTIMIZER_STATE).
   With gradient accumulation, every .grad exists from the start (the earlier micro-batches
   left it) and each new parameter gradient is added into it in place, then freed.
As in eager PyTorch, a Cast to the tensor's own type is the tensor itself, and add/sub hand
the incoming gradient on to a same-shaped input without a copy. What exporters did to the
graph (merged initializers, running statistics, BatchNorm folded into convs) is undone first
(training/exports.py). Segments named in `TrainingConfig.checkpoints` run under activation
checkpointing: nothing made inside them is saved, and backward recomputes them
(training/checkpoint.py).
The model's outputs stay alive until backward ends (the training loop holds them in a Python
variable, `out = model(x); loss = ce(out, y); loss.backward()`), and saved tensors of nodes
that no gradient reaches are freed with the autograd graph when backward ends. Every float
initializer of more than one element, BatchNorm running statistics aside, is a trainable
parameter (ONNX cannot tell a frozen weight or a folded buffer from a trained one).

Every node carries its phase (`Node.phase`): FORWARD (the model and the loss), BACKWARD
(gradients, recomputation, accumulation, the .grad buffers) or OPTIMIZER; a backward node's
`origin` is the forward node it differentiates. The code: training/forward.py copies the
forward and finds the saved tensors, training/backward.py adds the rest.
"""

from __future__ import annotations

from graphmem.core.ir import Graph, Role, Value
from graphmem.errors import GraphmemError
from graphmem.ops.registry import (
    BACKWARD_DOMAIN as BACKWARD_DOMAIN,  # the backward nodes' domain, defined with the rules
)
from graphmem.training.backward import StepExpansion
from graphmem.training.checkpoint import resolve_segments
from graphmem.training.config import TrainingConfig, TrainingGraph, check_config
from graphmem.training.fusion import fuse_pointwise_regions
from graphmem.training.precision import Precision
from graphmem.training.steps import loss_nodes

__all__ = ["BACKWARD_DOMAIN", "TrainingConfig", "TrainingGraph", "expand_training"]


def expand_training(graph: Graph, config: TrainingConfig) -> TrainingGraph:
    """The whole training step of `graph` as one graph (see the module docstring)."""
    check_config(config)
    logits = _logits(graph)
    step = Graph(graph.name, [], {}, [], [], graph.opset, graph.source_format, graph.data_dims)
    expansion = StepExpansion(graph, config, step)
    src_loss_nodes, targets, loss = loss_nodes(logits)
    loss_constants = [v for n in src_loss_nodes for v in n.present_inputs
                      if v.role is Role.CONSTANT]
    expansion.copy_residents([*graph.inputs, targets], loss_constants)
    forward = graph.nodes
    if config.fuse_pointwise:
        forward = fuse_pointwise_regions(graph.nodes, graph.outputs)
    for node in forward:
        expansion.copy_forward(node)
    expansion.segments = resolve_segments(expansion.forward_nodes, config.checkpoints)
    for node in src_loss_nodes:  # cross_entropy is on both autocast fp32 lists
        expansion.copy_forward(node, Precision.FLOAT32)
    expansion.save_for_backward()
    expansion.run_backward(expansion.mapped[loss])
    expansion.allocate_grad_buffers()
    expansion.add_optimizer()
    return expansion.finish([expansion.mapped[v] for v in graph.outputs], expansion.mapped[loss])


def _logits(graph: Graph) -> Value:
    if not graph.outputs:
        raise GraphmemError(f"model {graph.name} has no outputs to compute a loss from")
    logits = graph.outputs[0]
    if not logits.dtype.is_float or logits.shape is None or len(logits.shape) < 2:
        raise GraphmemError(
            f"--train computes cross-entropy on the first output, which must be float logits"
            f" [..., classes]; {logits.name} is {logits.dtype.label}{logits.shape_text()}")
    if not any(v.dtype.is_float for v in graph.values_with_role(Role.PARAMETER)):
        raise GraphmemError(f"model {graph.name} has no float parameters to train")
    return logits
