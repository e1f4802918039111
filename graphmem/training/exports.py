"""What exporters did to a graph that the training step must undo.

- TorchScript merges equal initializers and renames each duplicate with an Identity node:
  the Identity's output is the initializer itself (same parameter, one gradient).
- A BatchNorm's running mean and variance are initializers like any weight: they are buffers
  (no gradient, no optimizer state), as in PyTorch.
- BatchNorm folded into the conv before it:

`torch.onnx.export` writes a model in eval mode and, with constant folding (its default),
merges each BatchNorm2d into the preceding conv: W' = W * gamma / sqrt(var + eps), and a new
bias b' = beta - mean * gamma / sqrt(var + eps). The inference graph is the same function,
but the model that is trained has the BatchNorm: in training mode native_batch_norm saves the
conv's output, its float32 save_mean/save_invstd, and makes a second tensor of the conv's
output size, and gamma and beta are trained (2C parameters, not the folded C of the bias).
Without it a CNN's training peak is 20-30% low (TinyCNN: -24%, a ResNet basic block: -26%).

A conv is taken as folded only where the exporter leaves a mark of it:
- the dynamo exporter (onnxscript's FuseBatchNormIntoConv rewrite) names the new bias after
  the weight: `layer1.0.conv1.weight` and `layer1.0.conv1.weight_bias`;
- the TorchScript exporter names every constant-folded initializer `onnx::<Op>_<n>`: a conv
  whose weight and bias are both `onnx::Conv_*` was computed from other initializers, which
  for a conv is the BatchNorm fold.
The folded bias becomes the BatchNorm's beta and a new gamma [C] (a parameter) and running
mean and variance [C] (buffers) are added: the parameter count is the PyTorch model's.
"""

from __future__ import annotations

from graphmem.core.ir import Graph, Node, Role, Value

TORCHSCRIPT_FOLDED_PREFIX = "onnx::Conv_"
DYNAMO_FUSED_BIAS_SUFFIX = "_bias"
_WEIGHT_ROLES = frozenset({Role.PARAMETER, Role.BUFFER, Role.CONSTANT})


def folded_batchnorm_bias(node: Node) -> Value | None:
    """The bias of a Conv that carries a folded BatchNorm (see the module docstring), or None."""
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return None
    weight, bias = _initializer(node.input(1)), _initializer(node.input(2))
    if weight is None or bias is None:
        return None
    if bias.shape is None or len(bias.shape) != 1 or not bias.dtype.is_float:
        return None
    dynamo = bias.name == weight.name + DYNAMO_FUSED_BIAS_SUFFIX
    torchscript = (weight.name.startswith(TORCHSCRIPT_FOLDED_PREFIX)
                   and bias.name.startswith(TORCHSCRIPT_FOLDED_PREFIX))
    return bias if dynamo or torchscript else None


def _initializer(value: Value | None) -> Value | None:
    """The initializer `value` is, through the Identity renames of merged duplicates."""
    while value is not None and value.producer is not None:
        if value.producer.op_type != "Identity":
            return None
        value = value.producer.input(0)
    return value


_STATISTICS_INPUTS = (3, 4)  # BatchNormalization's running mean and variance


def identity_of_resident(node: Node, mapped: dict[Value, Value]) -> Value | None:
    """The parameter, buffer or constant an Identity node renames (TorchScript writes one per
    duplicate of an initializer it merged), or None."""
    source = node.input(0)
    if node.op_type != "Identity" or len(node.outputs) != 1 or source is None:
        return None
    value = mapped.get(source)
    return value if value is not None and value.role in _WEIGHT_ROLES else None


def running_statistics(graph: Graph) -> set[Value]:
    """Initializers read only as BatchNormalization's running mean/variance (through
    exporters' Identity renames): buffers, not trained, as in PyTorch."""
    positions: dict[Value, set[bool]] = {}
    for node in graph.nodes:
        for index, value in enumerate(node.inputs):
            if value is None or node.op_type == "Identity":
                continue
            base = _through_identities(value)
            if base.role is Role.PARAMETER:
                statistic = node.op_type == "BatchNormalization" and index in _STATISTICS_INPUTS
                positions.setdefault(base, set()).add(statistic)
    return {value for value, kinds in positions.items() if kinds == {True}}


def _through_identities(value: Value) -> Value:
    while value.producer is not None and value.producer.op_type == "Identity" and (
            source := value.producer.input(0)) is not None:
        value = source
    return value
