"""The PyTorch front door: a model and its example inputs traced into graphmem's IR.

`import_torch` traces one step with fake tensors (graphmem/frontends/torch/trace.py: no weight
is read) and converts it (fx_convert.py). The torch-specific rewrites a Request asks for are
applied while tracing and undone after: modules run under activation checkpointing
(checkpoint.py) and FC heads replaced by pooling (rewrites.py). The pipeline
(graphmem/pipeline/run.py) does the rest; nothing here knows it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import replace

import torch
from torch import nn

from graphmem.core.collector import collector_paused
from graphmem.core.conventions import TrainingOptions
from graphmem.core.routing import DEFAULT_ROUTING, MoeRouting
from graphmem.errors import GraphmemError
from graphmem.frontends.imported import ImportedModel
from graphmem.frontends.torch.checkpoint import checkpointed
from graphmem.frontends.torch.fx_convert import graph_from_trace
from graphmem.frontends.torch.kernel_choice import CudaTarget
from graphmem.frontends.torch.loader import (
    TensorSpec,
    check_call,
    check_input_name,
    check_input_order,
    parse_tensor_spec,
)
from graphmem.frontends.torch.memo_caches import cleared_note, memo_caches_emptied
from graphmem.frontends.torch.rewrites import pooled_head
from graphmem.frontends.torch.spec import KeywordInput
from graphmem.frontends.torch.stamp import stamped
from graphmem.frontends.torch.trace import TracedStep, trace_model

# an example input: a TensorSpec, a tensor (only its shape and dtype are used), a
# "32x3x224x224:float32" string or a shape tuple (float32); a KeywordInput of one of them (or
# a TensorSpec with a name) is passed as a keyword
InputLike = TensorSpec | torch.Tensor | str | tuple[int, ...] | KeywordInput


def import_torch(module: object, inputs: Sequence[object], label: str,
                 training: TrainingOptions | None = None,
                 pooled_heads: Sequence[tuple[str, int]] = (),
                 cuda: CudaTarget | None = None,
                 routing: MoeRouting = DEFAULT_ROUTING) -> ImportedModel:
    """The traced step (`training` None: inference); `pooled_heads`: (module path, flattened
    positions) of FC layers traced with global average pooling first; `cuda`: the GPU whose
    kernels the step runs on (graphmem/frontends/torch/cuda_kernels.py), None: the CPU's;
    `routing`: how choices made by value (a mixture of experts' router) go (routing.py)."""
    if not isinstance(module, nn.Module):
        raise GraphmemError(f"{label}: a {type(module).__name__} is no torch.nn.Module:"
                            " give a function that builds the model")
    specs = tensor_specs(inputs)
    check_call(module, specs)
    # each trace empties the caches it filled; this one, over them all, tells what the
    # user's caches lost (memo_caches.py)
    with memo_caches_emptied(module) as lost, contextlib.ExitStack() as rewrites:
        for path, positions in pooled_heads:
            rewrites.enter_context(pooled_head(module, path, positions))
        if training is not None and training.checkpoints:
            rewrites.enter_context(checkpointed(module, training.checkpoints))
        def trace() -> TracedStep:
            return trace_model(module, specs, training, cuda, routing)

        # a decoder's identical layers: traced at 2 and 3 layers and stamped (stamp.py)
        traced = (None if pooled_heads else stamped(module, training, trace)) or trace()
    with collector_paused():  # a bulk build, as the ONNX importer's (core/collector.py)
        graph = graph_from_trace(traced, type(module).__name__)
    if not graph.nodes:
        raise GraphmemError(
            f"{label}: its forward computes no tensor from the inputs (it returns None, a"
            " number or an input unchanged): graphmem analyzes the ops a model runs")
    micro_batch = specs[0].shape[0] if specs[0].shape else None
    how = "torch fake tensors" if cuda is None else f"torch fake tensors, CUDA kernels ({cuda.sm})"
    return ImportedModel(graph, label, how, tuple(traced.warnings), micro_batch,
                         notes=(*traced.notes, *filter(None, [cleared_note(lost)])),
                         kernels=traced.kernels)


def tensor_specs(inputs: Sequence[object]) -> list[TensorSpec]:
    """Each example input as a TensorSpec; one that is no InputLike is refused."""
    specs = [_as_spec(item) for item in inputs]
    if not specs:
        raise GraphmemError("no example inputs: give --input SHAPE[:dtype] for each input")
    check_input_order(specs)
    return specs


def with_batch(inputs: Sequence[object], batch: int) -> list[TensorSpec]:
    """Every input whose first dim is the batch (the first input's) at `batch` instead."""
    specs = tensor_specs(inputs)
    old = specs[0].shape[0]
    return [replace(s, shape=(batch, *s.shape[1:])) if s.shape and s.shape[0] == old else s
            for s in specs]


def _as_spec(item: object) -> TensorSpec:
    if isinstance(item, KeywordInput):
        check_input_name(item.name, f"{item.name}=...")
        return replace(_as_spec(item.value), name=item.name)
    if isinstance(item, TensorSpec):
        return item
    if isinstance(item, torch.Tensor):
        return TensorSpec(tuple(item.shape), item.dtype)
    if isinstance(item, str):
        return parse_tensor_spec(item)
    if isinstance(item, Iterable):
        return TensorSpec(tuple(int(d) for d in item), torch.float32)
    raise GraphmemError(f"an example input of type {type(item).__name__}: give a tensor, a shape"
                        " tuple or a string such as '4x1024:int64'")
