"""Distributed training and the KV cache on an Analysis (graphmem/distributed/ computes them).

The KV cache's shape comes from an ONNX graph's past inputs, from the PyTorch model's
attention modules (`auto`, read from the module the request already loaded: the model is
never loaded again) or from the request; its dtype from the request, else the model's.
"""

from __future__ import annotations

from dataclasses import replace

from graphmem.distributed.attach import (
    distributed_report,
    graph_float_dtype,
    kv_cache_for,
    kv_shape,
)
from graphmem.distributed.kv_cache import KvCacheShape
from graphmem.distributed.strategies import DistributedConfig
from graphmem.errors import GraphmemError
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.request import Request


def with_distributed(analysis: Analysis, config: DistributedConfig) -> Analysis:
    """The per-rank memory of `config`, and with a GPU the smallest N for every strategy."""
    config.check()
    if analysis.mode != "training":
        raise GraphmemError("--gpus/--strategy/--tensor-parallel describe a training job:"
                            " add --train (optimizer state and gradients are what they shard)")
    usable = analysis.fit.usable_bytes if analysis.fit else None
    report = distributed_report(analysis.graph, analysis.dims, config, usable)
    return replace(analysis, distributed=report)


def with_kv_cache(analysis: Analysis, shape: KvCacheShape | None = None,
                  batch: int | None = None, dtype: str | None = None) -> Analysis:
    """The KV cache: from the ONNX graph's past inputs, or from `shape` (which wins); `batch`
    is the traced batch of a PyTorch model. Unchanged where neither gives a cache."""
    usable = analysis.fit.usable_bytes if analysis.fit else None
    report = kv_cache_for(analysis.graph, analysis.dims, analysis.liveness.peak_bytes, usable,
                          shape, batch, dtype)
    return analysis if report is None else replace(analysis, kv_cache=report)


def with_distributed_request(analysis: Analysis, request: Request) -> Analysis:
    if request.distributed is None:
        return analysis
    return with_distributed(analysis, request.distributed)


def with_kv_request(analysis: Analysis, request: Request) -> Analysis:
    options = request.kv_cache
    if options is None:
        return analysis
    if (options.auto or options.shape) and analysis.mode == "training":
        raise GraphmemError("--kv-cache is for inference (a decoder generating tokens):"
                            " drop --train")
    batch = analysis.training.micro_batch if analysis.training else _traced_batch(analysis)
    if options.shape is not None:
        dtype = options.dtype or _model_dtype(analysis, request)
        shape = kv_shape(*options.shape, dtype, "--kv-cache")
        return with_kv_cache(analysis, shape, batch if request.is_torch else None)
    if options.auto and request.is_torch:
        from graphmem.frontends.torch.kv import detect_kv_shape

        layers, heads, head_dim, source = detect_kv_shape(request.model)  # type: ignore[arg-type]
        dtype = options.dtype or _model_dtype(analysis, request)
        return with_kv_cache(analysis, kv_shape(layers, heads, head_dim, dtype, source), batch)
    result = with_kv_cache(analysis, dtype=options.dtype)
    if options.auto and result.kv_cache is None:
        raise GraphmemError(f"{analysis.model.name}: no past_key_values.N.key/value (or"
                            " past.N) inputs; give --kv-cache LAYERS,KV_HEADS,HEAD_DIM")
    return result


def _model_dtype(analysis: Analysis, request: Request) -> str:
    """The cache's default dtype: the PyTorch model's first float parameter's, else the
    graph's first float parameter's."""
    if request.is_torch:
        from graphmem.frontends.torch.kv import model_float_dtype

        return model_float_dtype(request.model)[0]  # type: ignore[arg-type]
    return graph_float_dtype(analysis.graph)


def _traced_batch(analysis: Analysis) -> int | None:
    """A traced PyTorch model's batch: the first input's first dim."""
    if analysis.model.source_format != "torch.fx" or not analysis.graph.inputs:
        return None
    shape = analysis.graph.inputs[0].shape
    first = shape[0] if shape else None
    return int(first) if first is not None and first.is_constant else None
