"""Per-GPU distributed-training memory and the decoder KV cache of an analysed graph.

Both work on any front door's graph: the distributed model on a training graph's roles
(torch.fx, or ONNX training graphs with the same roles), the KV cache on an ONNX graph's past
inputs or on a shape the caller found (the model's attention modules, `--kv-cache`). The
pipeline (graphmem/pipeline/extras.py) puts the reports on the Analysis.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from graphmem.core.ir import Graph, Role
from graphmem.core.symbolic import SymInt
from graphmem.distributed.comm_buffers import nccl_estimate
from graphmem.distributed.kv_cache import (
    KvCacheReport,
    KvCacheShape,
    dtype_bytes,
    find_past_inputs,
    kv_cache_report,
    past_input_bytes,
)
from graphmem.distributed.model_states import TrainingProfile, profile_training
from graphmem.distributed.ranks import DistributedReport, RankPlan, rank_plan
from graphmem.distributed.stages import StageCut, cut_stages
from graphmem.distributed.strategies import (
    DistributedConfig,
    PerRankMemory,
    fit_by_strategy,
    per_rank_memory,
)
from graphmem.passes.dims import DimBinding, value_bytes


def distributed_report(graph: Graph, dims: DimBinding, config: DistributedConfig,
                       usable_bytes: int | None) -> DistributedReport:
    """The per-rank memory of `config` (with model parallelism, every pipeline rank's and
    the most loaded), and with a GPU's usable bytes the smallest N for every strategy;
    `graph` is a training step."""
    config.check()
    sizes = value_bytes(graph, dims)
    profile = profile_training(graph, sizes)
    nccl = nccl_estimate(config.gpus, config.tensor_parallel, config.parallel)
    if config.parallel.is_trivial:
        fits = fit_by_strategy(profile, config, usable_bytes) if usable_bytes is not None else ()
        return DistributedReport(per_rank_memory(profile, config), usable_bytes, fits,
                                 nccl=nccl)
    cut = _cut(graph, sizes, profile, config)
    plan = rank_plan(profile, cut, config)
    fits = () if usable_bytes is None else fit_by_strategy(
        profile, config, usable_bytes, lambda c: rank_plan(profile, cut, c).most_loaded.memory)
    return DistributedReport(plan.most_loaded.memory, usable_bytes, fits, plan=plan, nccl=nccl)


def most_loaded_rank(graph: Graph, dims: DimBinding, config: DistributedConfig
                     ) -> PerRankMemory:
    """The per-GPU memory the verdict reads: the one rank, or the most-loaded pipeline rank."""
    sizes = value_bytes(graph, dims)
    profile = profile_training(graph, sizes)
    if config.parallel.is_trivial:
        return per_rank_memory(profile, config)
    return _plan(graph, sizes, profile, config).most_loaded.memory


def _plan(graph: Graph, sizes: Mapping[str, SymInt | None], profile: TrainingProfile,
          config: DistributedConfig) -> RankPlan:
    return rank_plan(profile, _cut(graph, sizes, profile, config), config)


def _cut(graph: Graph, sizes: Mapping[str, SymInt | None], profile: TrainingProfile,
         config: DistributedConfig) -> StageCut:
    layout = config.parallel
    flag = (f"--pipeline-parallel {layout.pipeline}" + (
        f" --virtual-stages {layout.virtual_stages}" if layout.virtual_stages > 1 else ""))
    return cut_stages(graph, sizes, profile.parameters, layout.chunks, flag)


def kv_shape(layers: int, kv_heads: int, head_dim: int, dtype: str, source: str) -> KvCacheShape:
    return KvCacheShape(layers, kv_heads, head_dim, dtype, dtype_bytes(dtype), source)


def graph_float_dtype(graph: Graph) -> str:
    """The dtype of the graph's first floating parameter (the cache's default)."""
    for value in graph.values_with_role(Role.PARAMETER):
        if value.dtype.is_float:
            return value.dtype.label
    return "float32"


def kv_cache_for(graph: Graph, dims: DimBinding, peak_bytes: SymInt, usable_bytes: int | None,
                 shape: KvCacheShape | None = None, batch: int | None = None,
                 dtype: str | None = None) -> KvCacheReport | None:
    """The KV cache: from the ONNX graph's past inputs, or from `shape` (which wins); None
    when neither gives one.

    `batch` is the traced batch of a PyTorch model; ONNX graphs give it by their bound dims.
    The rest of the peak (weights, one step's activations) is `peak_bytes`, less the past
    inputs and present outputs already in it.
    """
    past = find_past_inputs(graph)
    if shape is None and past is None:
        return None
    chosen = shape or past.shape  # type: ignore[union-attr]
    if dtype is not None:
        chosen = replace(chosen, dtype=dtype, dtype_bytes=dtype_bytes(dtype))
    base = peak_bytes
    copies = 1
    if past is not None:
        base = base - past_input_bytes(past, dims.bound)
        copies = 2 if past.presents else 1
        batch = _bound(past.batch_dim, dims.bound)
    elif batch is None and dims.batch_dim is not None:
        batch = dims.bound.get(dims.batch_dim)
    return kv_cache_report(chosen, batch, copies, base, usable_bytes)


def _bound(dim: SymInt | None, dims: dict[str, int]) -> int | None:
    if dim is None:
        return None
    value = dim.bind(dims)
    return int(value) if value.is_constant else None
