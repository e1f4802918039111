"""The PyTorch front door: a model (or `file.py:callable`) traced with fake tensors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from graphmem.devices.gpus import find_gpu
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.fx_convert import graph_from_trace
from graphmem.frontends.torch.loader import TensorSpec, load_model, parse_tensor_spec
from graphmem.frontends.torch.trace import AMP_DTYPES, OPTIMIZERS, TrainConfig, trace_model
from graphmem.passes.dims import DimBinding
from graphmem.pipeline.analysis import Analysis, ModelInfo, TrainingInfo, run_passes

MAX_GRAD_ACCUM = 1 << 16


def analyze_torch(
    model: nn.Module | str,
    inputs: Sequence[TensorSpec | torch.Tensor | str | tuple[int, ...]],
    train: bool = False,
    optimizer: str = "adam",
    amp: str | None = None,
    grad_accum: int = 1,
    loss: Callable[..., torch.Tensor] | None = None,
    gpu: str | None = None,
    cuda_reserve_bytes: int | None = None,
    module_depth: int = 2,
    plan: bool = True,
    suggest: bool | None = None,
    memory_budget_bytes: int | None = None,
    amp_policy: str = "cuda",
) -> Analysis:
    """Analyze a PyTorch model for inference, or for one whole training step with `train`.

    `model` is an nn.Module (its weights are never read: only shapes and dtypes) or a
    `file.py:callable` / `package.module:callable` spec built on the meta device. `inputs`
    are example tensors, TensorSpecs, `"32x3x224x224:float32"` strings or shape tuples.
    `suggest` adds suggestions (graphmem/suggest/torch_step.py); None: only for a training step
    over its budget (`memory_budget_bytes`, else the GPU's usable memory). `plan=False` skips
    graphmem/pipeline/planning.py. `amp_policy` "cpu" traces AMP with CPU autocast's op lists alone
    (to compare with a CPU run); "cuda" adds the ops CUDA autocast runs in fp32.
    """
    _check_training_options(optimizer, amp, grad_accum)
    gpu_spec = find_gpu(gpu) if gpu else None
    spec_text = model if isinstance(model, str) else type(model).__name__
    module = load_model(model) if isinstance(model, str) else model
    specs = [_as_spec(item) for item in inputs]
    if not specs:
        raise GraphmemError("no example inputs: give --input SHAPE[:dtype] for each input")
    config = (TrainConfig(optimizer=optimizer, amp=amp, amp_policy=amp_policy, loss=loss,
                          grad_accum=grad_accum) if train else None)
    traced = trace_model(module, specs, config)
    graph = graph_from_trace(traced, type(module).__name__)
    if not graph.nodes:
        raise GraphmemError(
            f"{spec_text}: its forward computes no tensor from the inputs (it returns None, a"
            " number or an input unchanged): graphmem analyzes the ops a model runs")
    training = None
    if train:
        micro_batch = specs[0].shape[0] if specs[0].shape else None
        training = TrainingInfo(optimizer, amp, grad_accum, micro_batch)
    info = ModelInfo(
        path=spec_text,
        name=graph.name,
        source_format="torch.fx",
        opset=0,
        node_count=len(graph.nodes),
        shape_inference="torch fake tensors",
        warnings=tuple(traced.notes),
    )
    binding = DimBinding(bound={}, free=(), batch_dim=None)
    analysis = run_passes(graph, info, binding, gpu_spec, cuda_reserve_bytes, training,
                          module_depth, plan=plan)
    if suggest is False:
        return analysis
    from graphmem.suggest.torch_step import TrainingStep, suggestions_for

    step = TrainingStep(module, tuple(specs), optimizer, amp, loss, gpu_spec) if train else None
    return suggestions_for(analysis, step, suggest, memory_budget_bytes)


def _as_spec(item: TensorSpec | torch.Tensor | str | tuple[int, ...]) -> TensorSpec:
    if isinstance(item, TensorSpec):
        return item
    if isinstance(item, torch.Tensor):
        return TensorSpec(tuple(item.shape), item.dtype)
    if isinstance(item, str):
        return parse_tensor_spec(item)
    return TensorSpec(tuple(int(d) for d in item), torch.float32)


def _check_training_options(optimizer: str, amp: str | None, grad_accum: int) -> None:
    if optimizer not in OPTIMIZERS:
        raise GraphmemError(f"--optimizer {optimizer}: choose one of {', '.join(OPTIMIZERS)}")
    if amp is not None and amp not in AMP_DTYPES:
        raise GraphmemError(f"--amp {amp}: choose fp16 or bf16")
    if not 1 <= grad_accum <= MAX_GRAD_ACCUM:
        raise GraphmemError(f"--grad-accum {grad_accum}: give a whole number from 1 to"
                            f" {MAX_GRAD_ACCUM}")


def analyze(model: nn.Module | str, example_inputs: Sequence[Any], **options: Any) -> Analysis:
    """`graphmem.analyze(model, inputs, train=True, optimizer="adam")`: see analyze_torch."""
    return analyze_torch(model, example_inputs, **options)
