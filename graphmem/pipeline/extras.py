"""Distributed training, the KV cache and serving on an Analysis (graphmem/distributed/
computes them).

The KV cache's shape comes from an ONNX graph's past inputs, from the PyTorch model's
attention modules (`auto`, read from the module the request already loaded: the model is
never loaded again) or from the request; its dtype from the request, else the model's. The
model's position limit (a Hugging Face config's max_position_embeddings, or --max-context)
caps the longest context. With `serving` (--serve) the cache is planned as a serving engine
pages it (graphmem/distributed/serving.py) and hangs on the KV-cache report.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from graphmem.distributed.attach import (
    distributed_report,
    dtype_bytes,
    graph_float_dtype,
    kv_cache_for,
    kv_shape,
)
from graphmem.distributed.kv_cache import (
    KvCacheShape,
    decoder_dim_names,
    find_past_inputs,
    with_position_limit,
)
from graphmem.errors import GraphmemError
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.request import KvCacheOptions, Request

if TYPE_CHECKING:  # a training job's and a serving plan's models: imported where asked for
    from graphmem.distributed.serving import ServingConfig, StepPeak
    from graphmem.distributed.strategies import DistributedConfig


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
    config = request.distributed  # the expert-parallel ranks' loads follow --moe-routing
    layout = replace(config.parallel, routing=request.moe_routing)
    return with_distributed(analysis, replace(config, parallel=layout))


def with_kv_request(analysis: Analysis, request: Request) -> Analysis:
    """The KV cache the request asks for, capped at the model's position limit, and with
    --serve the serving plan."""
    options = request.kv_cache
    if options is None and request.serving is None:
        return analysis
    if options is None or (request.serving is not None and request.is_torch
                           and options.shape is None):
        # serving needs the cache: a PyTorch model's is found in its modules
        options = replace(options or KvCacheOptions(), auto=request.is_torch)
    result = _with_kv_options(analysis, request, options)
    limit, source = _position_limit(request, options)
    if result.kv_cache is not None:
        result = replace(result, kv_cache=with_position_limit(result.kv_cache, limit, source))
    if request.serving is None:
        return result
    return with_serving(result, request.serving, limit, source)


def _with_kv_options(analysis: Analysis, request: Request, options: KvCacheOptions) -> Analysis:
    if (options.auto or options.shape) and analysis.mode == "training":
        raise GraphmemError("--kv-cache is for inference (a decoder generating tokens):"
                            " drop --train")
    batch = analysis.training.micro_batch if analysis.training else _traced_batch(analysis)
    if options.shape is not None:
        dtype = options.dtype or _model_dtype(analysis, request)
        shape = kv_shape(*options.shape, dtype, "--kv-cache")
        return with_kv_cache(analysis, shape, batch if request.is_torch else None)
    if options.auto and request.is_torch:
        from graphmem.frontends.torch.kv import detect_kv_shape, model_layer_groups

        layers, heads, head_dim, source = detect_kv_shape(request.model)
        model_dtype = _model_dtype(analysis, request)
        shape = replace(kv_shape(layers, heads, head_dim, options.dtype or model_dtype, source),
                        groups=model_layer_groups(request.model),
                        state_dtype_bytes=dtype_bytes(model_dtype))
        return with_kv_cache(analysis, shape, batch)
    result = with_kv_cache(analysis, dtype=options.dtype)
    if options.auto and result.kv_cache is None:
        raise GraphmemError(f"{analysis.model.name}: no past_key_values.N.key/value (or"
                            " past.N) inputs; give --kv-cache LAYERS,KV_HEADS,HEAD_DIM")
    return result


def _position_limit(request: Request, options: KvCacheOptions) -> tuple[int | None, str]:
    """The model's own context limit: --max-context, else a PyTorch model's Hugging Face
    config (`max_position_embeddings`)."""
    if options.max_context is not None:
        return options.max_context, "--max-context"
    config = getattr(request.model, "config", None) if request.is_torch else None
    limit = getattr(config, "max_position_embeddings", None)
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return limit, "model.config.max_position_embeddings"
    return None, ""


def with_serving(analysis: Analysis, config: ServingConfig, position_limit: int | None = None,
                 limit_source: str = "") -> Analysis:
    """The paged KV cache on the analysis's GPU (graphmem/distributed/serving.py)."""
    from graphmem.distributed.serving import (
        CacheShape,
        ServingInputs,
        plan_serving,
        weights_per_rank,
    )

    config.check()
    kv, fit = analysis.kv_cache, analysis.fit
    if fit is None:
        raise GraphmemError("--serve sizes the KV cache on a GPU: add --gpu NAME")
    if analysis.mode != "inference":
        raise GraphmemError("--serve models inference (a decoder generating tokens): drop"
                            " --train")
    if kv is None:
        raise GraphmemError(f"{analysis.model.name}: --serve needs the KV cache's shape and"
                            " the model has no past_key_values.N.key/value (or past.N) inputs;"
                            " give --kv-cache LAYERS,KV_HEADS,HEAD_DIM")
    config = replace(config, context=_serving_context(config, position_limit, limit_source))
    shape = kv.shape
    steps = _steps(analysis, config)
    inputs = ServingInputs(
        config=config,
        cache=CacheShape(shape.layers, shape.kv_heads, shape.head_dim, shape.dtype,
                         shape.dtype_bytes, shape.groups, shape.state_dtype_bytes),
        gpu_name=fit.gpu.name, capacity_bytes=fit.capacity_bytes,
        cuda_context_bytes=fit.reserve.bytes,
        weights_bytes=weights_per_rank(analysis.graph, config.tensor_parallel),
        steps=steps, position_limit=position_limit,
        position_limit_source=limit_source, vocab_size=_vocab_size(analysis),
        logits_dtype_bytes=dtype_bytes(graph_float_dtype(analysis.graph)),
        traced_tokens=_traced_tokens(analysis, steps))
    return replace(analysis, kv_cache=replace(kv, serving=plan_serving(inputs)))


def _vocab_size(analysis: Analysis) -> int | None:
    """The logits' width: the last dim of the graph's first output (a decoder's logits
    [batch, tokens, vocab]), where it is a number."""
    outputs = analysis.graph.outputs
    shape = outputs[0].shape if outputs else None
    last = shape[-1] if shape else None
    return int(last) if last is not None and last.is_constant else None


def _traced_tokens(analysis: Analysis, steps: tuple[StepPeak, ...]) -> int | None:
    """Tokens of the step whose activations are reserved: an ONNX decoder's prefill dims,
    else the traced input_ids' batch x sequence."""
    prefill = next((step for step in steps if step.name == "prefill"), None)
    if prefill is not None:
        # batch x new tokens (the cached dim is 0 in a prefill)
        return math.prod(value for value in prefill.dims.values() if value) or None
    inputs = analysis.graph.inputs
    shape = inputs[0].shape if inputs else None
    if not shape or any(dim is None or not dim.is_constant for dim in shape):
        return None
    sizes: list[int] = [int(dim) for dim in shape if dim is not None]
    return math.prod(sizes) or None


def _serving_context(config: ServingConfig, limit: int | None, source: str) -> int:
    """Tokens per sequence: --context, else the model's position limit (as vLLM's
    max_model_len defaults to it); never beyond that limit."""
    if config.context is None:
        if limit is None:
            raise GraphmemError("--serve: give --context N (tokens per sequence); the model's"
                                " position limit is unknown (for an ONNX model, --max-context"
                                " N gives its max_position_embeddings)")
        return limit
    if limit is not None and config.context > limit:
        raise GraphmemError(f"--context {config.context} is beyond the model's position limit"
                            f" {limit} ({source}): give --context {limit} or less")
    return config.context


def _steps(analysis: Analysis, config: ServingConfig) -> tuple[StepPeak, ...]:
    """The prefill and decode steps of an ONNX decoder-with-past whose dims are symbolic,
    else the analysed step as it is (a PyTorch trace at --input 1xN is a prefill of N)."""
    from graphmem.distributed.serving import StepPeak, decoder_steps, step_activation_bytes

    graph, bound = analysis.graph, analysis.dims.bound
    past = find_past_inputs(graph) if analysis.model.source_format == "onnx" else None
    names = decoder_dim_names(graph, past) if past is not None else None
    if past is not None and names is not None:
        assert config.context is not None
        prefill = config.prefill_tokens or config.context
        steps = decoder_steps(graph, bound, past.kv_values, names, config.context, prefill)
        if steps is not None:
            return steps
    kv_values = past.kv_values if past is not None else ()
    peak = (step_activation_bytes(graph, bound, kv_values) if kv_values
            else analysis.liveness.activation_peak_bytes)
    if not peak.is_constant:
        free = ", ".join(analysis.dims.free) or "unknown"
        raise GraphmemError(f"--serve needs the step's activation peak as a number: bind the"
                            f" free dims ({free}) with --batch/--dim")
    return (StepPeak("analyzed step", dict(bound), int(peak)),)


def _model_dtype(analysis: Analysis, request: Request) -> str:
    """The cache's default dtype: the PyTorch model's first float parameter's, else the
    graph's first float parameter's."""
    if request.is_torch:
        from graphmem.frontends.torch.kv import model_float_dtype

        return model_float_dtype(request.model)[0]
    return graph_float_dtype(analysis.graph)


def _traced_batch(analysis: Analysis) -> int | None:
    """A traced PyTorch model's batch: the first input's first dim."""
    if analysis.model.source_format != "torch.fx" or not analysis.graph.inputs:
        return None
    shape = analysis.graph.inputs[0].shape
    first = shape[0] if shape else None
    return int(first) if first is not None and first.is_constant else None
