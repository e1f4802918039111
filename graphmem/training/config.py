"""The options of the ONNX training expansion (graphmem/training/expand.py) and its result."""

from __future__ import annotations

from dataclasses import dataclass

from graphmem.core.ir import Graph
from graphmem.errors import GraphmemError
from graphmem.training.precision import AUTOCAST_DEVICES, HALF_DTYPES
from graphmem.training.steps import OPTIMIZERS


@dataclass(frozen=True)
class TrainingConfig:
    optimizer: str = "adam"
    amp: str | None = None  # "fp16" | "bf16"
    autocast_device: str = "cuda"  # whose autocast op lists: "cuda" or "cpu"
    # decomposed activations (tanh-GELU, SiLU) as the one PyTorch op they came from
    fuse_pointwise: bool = True
    # a BatchNorm that the exporter folded into a conv is trained as Conv + BatchNorm
    # (graphmem/training/exports.py)
    unfold_batchnorm: bool = True
    # micro-batches per optimizer step: above 1, every parameter's .grad exists before the
    # forward starts (from the second micro-batch on) and backward adds into it
    grad_accum: int = 1
    # forward segments run under activation checkpointing: module paths or FIRST..LAST node
    # ranges (graphmem/training/checkpoint.py)
    checkpoints: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrainingGraph:
    graph: Graph
    no_backward_rule: dict[str, int]  # op type -> nodes counted as saving all their inputs
    loss: str  # name of the loss value
    unfolded_batchnorms: int = 0  # convs given back the BatchNorm folded into them
    restored_biases: int = 0  # of those, folds whose zero bias the exporter had dropped


def check_config(config: TrainingConfig) -> None:
    if config.optimizer not in OPTIMIZERS:
        raise GraphmemError(f"--optimizer {config.optimizer}: choose one of"
                            f" {', '.join(OPTIMIZERS)}")
    if config.amp is not None and config.amp not in HALF_DTYPES:
        raise GraphmemError(f"--amp {config.amp}: choose fp16 or bf16")
    if config.grad_accum < 1:
        raise GraphmemError(f"--grad-accum {config.grad_accum}: give 1 or more micro-batches")
    if config.autocast_device not in AUTOCAST_DEVICES:
        raise GraphmemError(f"autocast device {config.autocast_device}: choose cuda or cpu")
