"""Conventions shared by every stage, defined once: optimizers and their state, AMP dtypes, the
training options, the value free dims are probed at, domain names, the JSON names of roles.

Closed vocabularies are StrEnums: a member is its string (`Optimizer.ADAM == "adam"`), so it
prints, compares and serializes as the word the user typed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from graphmem.core.ir import Role
from graphmem.errors import GraphmemError

Word = TypeVar("Word", bound=StrEnum)


class Optimizer(StrEnum):
    SGD = "sgd"
    MOMENTUM = "momentum"  # SGD with momentum
    ADAM = "adam"
    ADAMW = "adamw"


class Amp(StrEnum):
    """Autocast precision of a training step (activations in half, master weights fp32)."""

    FP16 = "fp16"
    BF16 = "bf16"


class Strategy(StrEnum):
    """Data-parallel strategy (graphmem/distributed/strategies.py)."""

    DDP = "ddp"
    ZERO1 = "zero1"  # DeepSpeed ZeRO stage 1: optimizer state sharded
    ZERO2 = "zero2"  # ... and gradients
    ZERO3 = "zero3"  # ... and parameters
    FSDP = "fsdp"  # PyTorch FSDP, full shard
    DISTRIBUTED_OPTIMIZER = "distributed-optimizer"  # Megatron-LM's: optimizer state sharded


ZERO_STAGES = frozenset({Strategy.ZERO1, Strategy.ZERO2, Strategy.ZERO3})  # DeepSpeed's


def choices_text(vocabulary: type[StrEnum]) -> str:
    """How an error lists the words: `fp16 or bf16`, `one of sgd, momentum, adam, adamw`."""
    words = [str(word) for word in vocabulary]
    return " or ".join(words) if len(words) == 2 else f"one of {', '.join(words)}"


def closed(vocabulary: type[Word], text: str, flag: str) -> Word:
    """`text` as a word of `vocabulary`; one line naming `flag` and the choices if it is none
    (the same line for the command line's flag and the Request's check)."""
    try:
        return vocabulary(text)
    except ValueError:
        raise GraphmemError(f"{flag} {text}: choose {choices_text(vocabulary)}") from None


class AmpPolicy(StrEnum):
    """Whose autocast op lists a traced AMP step follows."""

    CUDA = "cuda"  # the GPU graphmem predicts for: CPU autocast's lists + CUDA's fp32 ops
    CPU = "cpu"  # CPU autocast alone, to compare with a real CPU step


class Loss(StrEnum):
    """The losses --loss names (graphmem/frontends/torch/train_step.py): cross-entropy over
    the last dim (the default), or the mean squared error against a zero target of the
    output's shape (a diffusion model's noise prediction, a regression)."""

    CROSS_ENTROPY = "cross-entropy"
    MSE = "mse"


OPTIMIZERS: tuple[str, ...] = tuple(o.value for o in Optimizer)
DEFAULT_OPTIMIZER = Optimizer.ADAM
# torch.optim's per-parameter state tensors, each the size of the parameter
STATE_SLOTS: dict[str, tuple[str, ...]] = {
    Optimizer.SGD: (), Optimizer.MOMENTUM: ("momentum_buffer",),
    Optimizer.ADAM: ("exp_avg", "exp_avg_sq"), Optimizer.ADAMW: ("exp_avg", "exp_avg_sq")}
# the torch dtype name of each AMP precision (torch.float16 / torch.bfloat16)
AMP_DTYPES: dict[str, str] = {Amp.FP16: "float16", Amp.BF16: "bfloat16"}
MAX_GRAD_ACCUM = 1 << 16  # micro-batches per optimizer step
MAX_DIM_VALUE = 1 << 24  # the largest value a dynamic dim may be bound to (--batch, --dim)

# Free dims are evaluated at this value where one number must stand for a formula (choosing
# a peak step among candidates, sorting, drawing); the report says so.
PROBE_DIM_VALUE = 64
MS_DOMAIN = "com.microsoft"  # onnxruntime's contrib ops

# the plural names roles have in the JSON and in `Analysis.breakdown`
ROLE_KEYS: dict[Role, str] = {
    Role.PARAMETER: "parameters",
    Role.BUFFER: "buffers",
    Role.CONSTANT: "constants",
    Role.INPUT: "inputs",
    Role.ACTIVATION: "activations",
    Role.OUTPUT: "outputs",
    Role.GRADIENT: "gradients",
    Role.OPTIMIZER_STATE: "optimizer_state",
    Role.SAVED_ACTIVATION: "saved_activations",
    Role.ACTIVATION_GRADIENT: "activation_gradients",
    Role.TEMPORARY: "temporaries",
}


@dataclass(frozen=True)
class TrainingOptions:
    """How one training step is built: the one set of training options of both front ends.

    The torch front end traces the step (graphmem/frontends/torch/trace.py); an ONNX inference
    graph is expanded into it (graphmem/training/). `loss` and `amp_policy` are the torch
    trace's; `checkpoints` are module paths (or ONNX `FIRST..LAST` node ranges) run under
    activation checkpointing.
    """

    optimizer: Optimizer = DEFAULT_OPTIMIZER
    amp: Amp | None = None
    # micro-batches per optimizer step; above 1 the analysed step is the last micro-batch,
    # whose parameters' .grad already hold the earlier micro-batches' sums
    grad_accum: int = 1
    loss: Callable[..., object] | str | None = None  # loss(output) -> scalar, or FILE.py:FN
    checkpoints: tuple[str, ...] = ()
    amp_policy: AmpPolicy = AmpPolicy.CUDA
