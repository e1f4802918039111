"""Per-GPU distributed-training memory and the decoder KV cache of an analysed graph.

Both work on any front door's graph: the distributed model on a training graph's roles
(torch.fx, or ONNX training graphs with the same roles), the KV cache on an ONNX graph's past
inputs or on a shape the caller found (the model's attention modules, `--kv-cache`). The
pipeline (graphmem/pipeline/extras.py) puts the reports on the Analysis.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction
from math import ceil, prod
from typing import TYPE_CHECKING

from graphmem.core.ir import Graph, Phase, Role
from graphmem.core.symbolic import SymInt
from graphmem.distributed.kv_cache import (
    KvCacheReport,
    KvCacheShape,
    dtype_bytes,
    find_past_inputs,
    kv_cache_report,
    past_input_bytes,
)
from graphmem.ops.registry import op_name
from graphmem.passes.dims import DimBinding, value_bytes

# every analysis asks for the KV cache (an ONNX graph's past inputs); the training job's
# models are imported where a job is (--gpus, --strategy, ...)
if TYPE_CHECKING:
    from graphmem.distributed.model_states import TrainingProfile
    from graphmem.distributed.ranks import DistributedReport
    from graphmem.distributed.stages import StageCut
    from graphmem.distributed.strategies import DistributedConfig, PerRankMemory


def distributed_report(graph: Graph, dims: DimBinding, config: DistributedConfig,
                       usable_bytes: int | None) -> DistributedReport:
    """The per-rank memory of `config` (with model parallelism, every pipeline rank's and
    the most loaded), and with a GPU's usable bytes the smallest N for every strategy;
    `graph` is a training step."""
    from graphmem.distributed.comm_buffers import nccl_estimate
    from graphmem.distributed.model_states import profile_training
    from graphmem.distributed.ranks import DistributedReport, rank_plan
    from graphmem.distributed.strategies import fit_by_strategy, per_rank_memory

    config.check()
    sizes = value_bytes(graph, dims)
    profile = profile_training(graph, sizes)
    nccl = nccl_estimate(config.gpus, config.tensor_parallel, config.parallel)
    if config.parallel.is_trivial:
        fits = fit_by_strategy(profile, config, usable_bytes) if usable_bytes is not None else ()
        return DistributedReport(per_rank_memory(profile, config), usable_bytes, fits,
                                 nccl=nccl)
    routed, factor = routed_sizes(graph, sizes, profile, config, dims)
    cut = _cut(graph, routed, profile, config)
    plan = rank_plan(profile, cut, config, factor)
    fits = () if usable_bytes is None else fit_by_strategy(
        profile, config, usable_bytes,
        lambda c: rank_plan(profile, cut, c, factor).most_loaded.memory)
    return DistributedReport(plan.most_loaded.memory, usable_bytes, fits, plan=plan, nccl=nccl)


def most_loaded_rank(graph: Graph, dims: DimBinding, config: DistributedConfig
                     ) -> PerRankMemory:
    """The per-GPU memory the verdict reads: the one rank, or the most-loaded pipeline rank."""
    from graphmem.distributed.model_states import profile_training
    from graphmem.distributed.ranks import rank_plan
    from graphmem.distributed.strategies import per_rank_memory

    sizes = value_bytes(graph, dims)
    profile = profile_training(graph, sizes)
    if config.parallel.is_trivial:
        return per_rank_memory(profile, config)
    routed, factor = routed_sizes(graph, sizes, profile, config, dims)
    return rank_plan(profile, _cut(graph, routed, profile, config), config,
                     factor).most_loaded.memory


def routed_sizes(graph: Graph, sizes: Mapping[str, SymInt | None], profile: TrainingProfile,
                 config: DistributedConfig, dims: DimBinding
                 ) -> tuple[Mapping[str, SymInt | None], Fraction]:
    """With expert parallel: the sizes with every value the routed experts make scaled to
    the busiest expert-parallel rank's tokens (graphmem/distributed/experts.py
    `busiest_rank_factor`, from the router's top-k and --moe-routing), and that factor."""
    from graphmem.distributed.experts import busiest_rank_factor, shard_experts
    from graphmem.distributed.stages import find_layers

    layout = config.parallel
    layers = find_layers(p.module for p in profile.parameters)
    if layout.expert == 1 or layers is None:
        return sizes, Fraction(1)
    shard = shard_experts(profile.parameters, layers, layout.expert)
    router = _router(graph, shard.experts if shard else 0, dims)
    if shard is None or router is None:
        return sizes, Fraction(1)
    tokens, top_k = router
    factor = busiest_rank_factor(layout.routing, tokens, shard.experts, top_k, layout.expert)
    scaled = dict(sizes)
    for node in graph.nodes:
        if shard.holds(node.module_path):
            for value in node.outputs:
                size = sizes.get(value.name)
                if size is not None and size.is_constant:
                    scaled[value.name] = SymInt.const(ceil(int(size) * factor))
    return scaled, factor


def _router(graph: Graph, experts: int, dims: DimBinding) -> tuple[int, int] | None:
    """(tokens, top_k) of the first forward top-k over `experts` scores: the router."""
    for node in graph.nodes:
        if op_name(node) != "topk" or node.phase is Phase.BACKWARD or not node.outputs:
            continue
        scores, chosen = node.present_inputs[0].shape, node.outputs[0].shape
        if scores is None or not chosen:
            continue
        bound = [_bound(d, dims.bound) for d in (*scores, chosen[-1])]
        known = [b for b in bound if b is not None]
        if len(known) < len(bound) or known[-2] != experts:
            continue
        return prod(known[:-2]), known[-1]
    return None


def _cut(graph: Graph, sizes: Mapping[str, SymInt | None], profile: TrainingProfile,
         config: DistributedConfig) -> StageCut:
    from graphmem.distributed.stages import cut_stages

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
