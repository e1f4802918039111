"""Attach per-GPU distributed-training memory and the decoder KV cache to an Analysis.

Both work on any front door's Analysis: the distributed model on a training graph's roles
(torch.fx today, ONNX training graphs with the same roles), the KV cache on an ONNX graph's
past inputs or on a shape the caller found (the model's attention modules, `--kv-cache`).
"""

from __future__ import annotations

from dataclasses import replace

from graphmem.core.ir import DType
from graphmem.core.symbolic import SymInt
from graphmem.distributed.kv_cache import (
    KvCacheShape,
    find_past_inputs,
    kv_cache_report,
    past_input_bytes,
)
from graphmem.distributed.model_states import profile_training
from graphmem.distributed.strategies import (
    DistributedConfig,
    DistributedReport,
    fit_by_strategy,
    per_rank_memory,
)
from graphmem.errors import GraphmemError
from graphmem.passes.dims import value_bytes
from graphmem.pipeline.analysis import Analysis


def with_distributed(analysis: Analysis, config: DistributedConfig) -> Analysis:
    """The per-rank memory of `config`, and with a GPU the smallest N for every strategy."""
    config.check()
    if analysis.mode != "training":
        raise GraphmemError("--gpus/--strategy/--tensor-parallel describe a training job:"
                            " add --train (optimizer state and gradients are what they shard)")
    profile = profile_training(analysis.graph, value_bytes(analysis.graph, analysis.dims))
    usable = analysis.fit.usable_bytes if analysis.fit else None
    fits = fit_by_strategy(profile, config, usable) if usable is not None else ()
    report = DistributedReport(per_rank_memory(profile, config), usable, fits)
    return replace(analysis, distributed=report)


def kv_shape(layers: int, kv_heads: int, head_dim: int, dtype: str, source: str) -> KvCacheShape:
    return KvCacheShape(layers, kv_heads, head_dim, dtype, dtype_bytes(dtype), source)


def dtype_bytes(label: str) -> int:
    for dtype in DType:
        if dtype.label == label and dtype.is_float:
            return dtype.bits // 8
    floats = ", ".join(d.label for d in DType if d.is_float and d.bits >= 8)
    raise GraphmemError(f"--kv-dtype {label}: choose one of {floats}")


def with_kv_cache(analysis: Analysis, shape: KvCacheShape | None = None,
                  batch: int | None = None, dtype: str | None = None) -> Analysis:
    """The KV cache: from the ONNX graph's past inputs, or from `shape` (which wins).

    `batch` is the traced batch of a PyTorch model; ONNX graphs give it by their bound dims.
    The rest of the peak (weights, one step's activations) comes from this analysis: its
    peak, less the past inputs and present outputs already in it.
    """
    past = find_past_inputs(analysis.graph)
    if shape is None and past is None:
        return analysis
    chosen = shape or past.shape  # type: ignore[union-attr]
    if dtype is not None:
        chosen = replace(chosen, dtype=dtype, dtype_bytes=dtype_bytes(dtype))
    base = analysis.liveness.peak_bytes
    copies = 1
    if past is not None:
        base = base - past_input_bytes(past, analysis.dims.bound)
        copies = 2 if past.presents else 1
        batch = _bound(past.batch_dim, analysis.dims.bound)
    elif batch is None and analysis.dims.batch_dim is not None:
        batch = analysis.dims.bound.get(analysis.dims.batch_dim)
    usable = analysis.fit.usable_bytes if analysis.fit else None
    return replace(analysis, kv_cache=kv_cache_report(chosen, batch, copies, base, usable))


def _bound(dim: SymInt | None, dims: dict[str, int]) -> int | None:
    if dim is None:
        return None
    value = dim.bind(dims)
    return int(value) if value.is_constant else None
