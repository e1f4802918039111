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
- BatchNorm folded with its bias dropped: a freshly initialised BatchNorm (gamma 1, beta 0,
  mean 0, var 1) folds into a zero bias, which the dynamo exporter's optimizer drops, and the
  weight keeps its name (`stem.0.weight`): no mark is left but the missing bias. A Conv without
  a bias, in a graph with no normalization at all, is taken as such a fold (a bias-free conv is
  written for a norm to follow it; a net of bias-free convs without any norm is rare) and is
  given back a BatchNorm with a new beta.

`inference_export_notes` says what the export removed, as coded warnings (`CodedWarning`, a
str with a `code` for JSON): the BatchNorms given back, dropout absent from an attention model
(an eval-mode export has no Dropout nodes; a model trained with dropout saves a 1-byte mask and
a dropped copy per attention-probabilities tensor: their bytes, not counted, are estimated) and
initializers made by constant folding (TorchScript's `onnx::<Op>_<n>` names, the dynamo
exporter's `val_<n>`: trained as parameters of their own; a folded transpose of another
parameter, as GPT-2's tied lm_head `onnx::MatMul_*` [d, vocab] of wte [vocab, d], is counted
twice).
"""

from __future__ import annotations

import re

from graphmem.core.conventions import STATE_SLOTS
from graphmem.core.ir import Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes, format_bytes_sym

TORCHSCRIPT_FOLDED_PREFIX = "onnx::Conv_"
DYNAMO_FUSED_BIAS_SUFFIX = "_bias"
_WEIGHT_ROLES = frozenset({Role.PARAMETER, Role.BUFFER, Role.CONSTANT})
# any of these after a bias-free conv means the conv was written without a bias on purpose
_NORMALIZATIONS = frozenset({"BatchNormalization", "InstanceNormalization",
                             "GroupNormalization", "LayerNormalization",
                             "SimplifiedLayerNormalization", "RMSNormalization"})
TORCHSCRIPT_FOLDED = "onnx::"  # TorchScript's name for every constant-folded initializer
ONNXSCRIPT_FOLDED = re.compile(r"val_\d+")  # the dynamo exporter's (onnxscript) folded values
MASK_BYTES_PER_ELEMENT = 1  # native_dropout's mask is torch.bool


class CodedWarning(str):
    """A warning's text, read as a str everywhere, with a stable `code` for programs (JSON)."""

    code: str

    def __new__(cls, code: str, text: str) -> CodedWarning:
        made = super().__new__(cls, text)
        made.code = code
        return made

    # str.__getnewargs__ gives the text alone; this class is built from (code, text), so it
    # returns both, whatever str declares
    def __getnewargs__(self) -> tuple[str, str]:  # type: ignore[override]
        return self.code, str(self)  # copy and pickle rebuild it from both


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


def bias_dropped_folds(graph: Graph) -> frozenset[Node]:
    """Convs taken as a BatchNorm fold whose zero bias was dropped (see the module docstring):
    bias-free Convs on an initializer weight, in a graph with no normalization node."""
    if any(node.op_type in _NORMALIZATIONS for node in graph.nodes):
        return frozenset()
    return frozenset(node for node in graph.nodes
                     if node.op_type == "Conv" and node.domain in ("", "ai.onnx")
                     and node.input(2) is None and len(node.outputs) == 1
                     and (weight := _initializer(node.input(1))) is not None
                     and weight.shape is not None and len(weight.shape) >= 3
                     and weight.dtype.is_float)


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


def inference_export_notes(source: Graph, unfolded_batchnorms: int, restored_biases: int,
                           optimizer: str) -> list[CodedWarning]:
    """What the export of `source` removed and what that does to the training step's number."""
    notes = []
    if unfolded_batchnorms:
        dropped = (f", {restored_biases} of them with the zero bias the exporter dropped"
                   " (a freshly initialised BatchNorm folds into a zero bias)"
                   if restored_biases else "")
        notes.append(CodedWarning(
            "batchnorm-folded",
            f"{unfolded_batchnorms} Conv nodes carry a BatchNorm folded in at export{dropped}:"
            " trained as Conv + BatchNorm (its saved tensors and gamma/beta counted), as the"
            " PyTorch model is; export in training mode (training=TrainingMode.TRAINING) or"
            " with do_constant_folding=False to keep the BatchNorm nodes"))
    notes.extend(note for note in (_dropout_note(source), _folded_weights_note(source, optimizer))
                 if note is not None)
    return notes


def _dropout_note(graph: Graph) -> CodedWarning | None:
    """An attention model with no Dropout node: exported in eval mode, dropout not counted."""
    if any(node.op_type == "Dropout" for node in graph.nodes):
        return None
    probabilities = [node.outputs[0] for node in graph.nodes
                     if node.op_type == "Softmax" and node.outputs
                     and any(_reaches_matmul(user) for user in node.outputs[0].consumers)]
    if not probabilities:
        return None
    missing = _dropout_bytes(probabilities)
    estimate = ("" if missing is None else
                f" (attention dropout alone: about {format_bytes_sym(missing)} more, a 1-byte"
                " mask and a dropped copy of each attention-probabilities tensor)")
    return CodedWarning(
        "dropout-absent",
        f"no Dropout nodes in a model with {len(probabilities)} attention softmaxes: exported in"
        f" eval mode, so dropout masks not counted; if the model trains with dropout the"
        f" reported peak is low{estimate}; export with training=TrainingMode.TRAINING to keep"
        " them")


def _constant_folded(name: str) -> bool:
    """TorchScript's `onnx::<Op>_<n>` (Conv folds aside: BatchNorm) or onnxscript's `val_<n>`:
    initializers the exporter computed, not the model's parameters by their names."""
    if name.startswith(TORCHSCRIPT_FOLDED):
        return not name.startswith(TORCHSCRIPT_FOLDED_PREFIX)
    return ONNXSCRIPT_FOLDED.fullmatch(name) is not None


def _dropout_bytes(probabilities: list[Value]) -> SymInt | None:
    """Per attention dropout, native_dropout saves its bool mask and the matmul after it saves
    the dropped copy (the softmax's output stays saved for softmax's backward)."""
    total: SymInt | None = None
    for value in probabilities:
        numel, nbytes = value.numel, value.nbytes
        if numel is None or nbytes is None:
            return None
        part = numel.scaled(MASK_BYTES_PER_ELEMENT) + nbytes
        total = part if total is None else total + part
    return total


def _reaches_matmul(node: Node) -> bool:
    while node.op_type in ("Cast", "Where", "Identity") and node.outputs and \
            len(node.outputs[0].consumers) == 1:
        node = node.outputs[0].consumers[0]
    return node.op_type in ("MatMul", "Einsum")


def _folded_weights_note(graph: Graph, optimizer: str) -> CodedWarning | None:
    """Parameters TorchScript computed by constant folding (Conv folds aside: BatchNorm)."""
    params = [v for v in graph.values_with_role(Role.PARAMETER) if v.dtype.is_float]
    folded = [v for v in params if _constant_folded(v.name)]
    if not folded:
        return None
    named = {(v.dtype, tuple(v.shape)): v for v in params
             if not _constant_folded(v.name) and v.shape is not None}
    # a square matrix's transpose has its own shape: only a non-square one names its twin
    twins = [(v, named[(v.dtype, tuple(reversed(v.shape)))]) for v in folded
             if v.shape is not None and len(v.shape) == 2 and v.shape[0] != v.shape[1]
             and (v.dtype, tuple(reversed(v.shape))) in named]
    names = ", ".join(f"{v.name}{v.shape_text()}" for v in folded[:3])
    more = f" and {len(folded) - 3} more" if len(folded) > 3 else ""
    text = (f"{len(folded)} parameters were made by constant folding at export ({names}{more}):"
            " each trained as a parameter of its own, named as the exporter named it")
    if twins:
        # the weight, its .grad and the optimizer's state slots, each the weight's size
        copies = 2 + len(STATE_SLOTS[optimizer])
        extra = sum(int(v.nbytes) for v, _ in twins if v.nbytes is not None
                    and v.nbytes.is_constant) * copies
        pairs = ", ".join(f"{v.name} has the transposed shape of {w.name}"
                          for v, w in twins[:3])
        text += (f"; {pairs}: if tied (one tensor in PyTorch, as GPT-2's lm_head and wte),"
                 f" it is counted twice: the reported number is high by about"
                 f" {format_bytes(extra)} (weight, gradient, optimizer state); export with"
                 " do_constant_folding=False to keep the tie")
    return CodedWarning("constant-folded-weights", text)
