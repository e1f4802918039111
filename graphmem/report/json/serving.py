"""JSON of the serving plan (`graphmem analyze --serve`): `memory.serving`, only when computed.

Every number is an integer (bytes, tokens, blocks, sequences) per GPU of one replica, except
`total_sequences` (all replicas); docs/serving.md gives each formula.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphmem.pipeline.analysis import Analysis
from graphmem.report.engine_log import engine_name, log_lines

if TYPE_CHECKING:  # written where the analysis has them: their modules are loaded then
    from graphmem.distributed.serving import ServingReport


def serving_memory(analysis: Analysis) -> dict[str, Any]:
    """{"serving": ...} when the analysis has a serving plan, else {}."""
    kv = analysis.kv_cache
    if kv is None or kv.serving is None:
        return {}
    return {"serving": serving_json(kv.serving)}


def serving_json(plan: ServingReport) -> dict[str, Any]:
    config = plan.config
    return {
        "gpu": plan.gpu_name,
        "tensor_parallel": config.tensor_parallel,
        "replicas": plan.replicas,
        "engine": plan.engine,
        "engine_version": engine_name(plan),
        "block_size": plan.block_size,
        "gpu_memory_utilization": plan.memory_fraction,
        "capacity_bytes": plan.capacity_bytes,
        "budget_bytes": plan.budget_bytes,
        "weights_bytes": plan.weights_bytes,
        "activation_bytes": plan.activation_bytes,
        "steps": [{"name": step.name, "dims": step.dims,
                   "activation_bytes": step.activation_bytes} for step in plan.steps],
        "cuda_context_bytes": plan.cuda_context_bytes,
        "kv_cache_bytes": plan.kv_cache_bytes,
        "kv_heads_per_rank": plan.kv_heads_per_rank,
        "per_token_bytes": plan.per_token_bytes,
        "block_bytes": plan.block_bytes,
        "num_blocks": plan.num_blocks,
        "context": plan.context,
        "blocks_per_sequence": plan.blocks_per_sequence,
        "sequence_bytes": plan.sequence_bytes,
        "step_tokens": plan.step_tokens,
        "layer_groups": [{"type": use.label, "layers": use.layers, "tokens": use.tokens,
                          "bytes": use.bytes} for use in plan.layer_groups],
        "max_sequences": plan.max_sequences,
        "total_sequences": plan.total_sequences,
        "max_context": plan.max_context,
        "memory_context": plan.memory_context,
        "context_limited_by": plan.context_limited_by,
        "position_limit": plan.position_limit,
        "position_limit_source": plan.position_limit_source or None,
        "kv_tokens": plan.kv_tokens,
        "concurrency": plan.concurrency,
        **_reserve(plan),
        "log": list(log_lines(plan)),
    }


def _reserve(plan: ServingReport) -> dict[str, Any]:
    """The engine's own parts (graphmem/distributed/engines.py)."""
    reserve = plan.reserve
    if reserve is None:
        return {}
    return {"batched_tokens": reserve.batched_tokens, "forward_bytes": reserve.forward_bytes,
            "sampler_bytes": reserve.sampler_bytes, "sampler_rows": reserve.sampler_rows,
            "cuda_graph_bytes": reserve.cuda_graph_bytes,
            "cuda_graph_sizes": list(reserve.cuda_graph_sizes),
            "reserved_bytes": reserve.reserved_bytes, "outside_bytes": reserve.outside_bytes,
            "starts": reserve.starts}
