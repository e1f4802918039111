"""The serving plan in the words of each engine's own startup log, so a user can set graphmem's
lines beside the engine's, line by line. Render only: the numbers are the ServingReport's
(graphmem/distributed/serving.py, engines.py). The phrasings, from the sources named in
docs/serving.md:

- vLLM 0.33.0 (vllm/v1/worker/gpu_worker.py, vllm/v1/core/kv_cache_utils.py
  `update_kv_cache_capacity`): "Available KV cache memory: X GiB", "GPU KV cache size: N tokens,
  Maximum concurrency for C tokens per request: X.XXx", "Estimated CUDA graph memory: X GiB
  total";
- SGLang 0.5.2 (managers/scheduler.py, mem_cache/memory_pool.py):
  "KV Cache is allocated. #tokens: N, K size: X GB, V size: Y GB", "max_total_num_tokens=N";
- TensorRT-LLM (tensorrt_llm/_torch/pyexecutor/_util.py `_cal_max_tokens`): "Peak memory
  during memory usage profiling (torch + non-torch): X GiB", "available KV cache memory when
  calculating max tokens: X GiB", "Estimated max tokens in KV cache : N".

GiB here are 2**30 bytes, as all three print them (SGLang calls them GB).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from graphmem.distributed.vocabulary import SGLANG, TRTLLM

if TYPE_CHECKING:  # rendered where the analysis has them: their modules are loaded then
    from graphmem.distributed.serving import ServingReport

GIB = float(1 << 30)


def engine_name(plan: ServingReport) -> str:
    from graphmem.distributed.engines import ENGINE_VERSIONS

    return ENGINE_VERSIONS[plan.engine]


def share_name(plan: ServingReport) -> str:
    """The engine's own name for its share of the GPU."""
    return {SGLANG: "mem_fraction_static", TRTLLM: "free_gpu_memory_fraction"}.get(
        plan.engine, "gpu_memory_utilization")


def block_name(plan: ServingReport) -> str:
    """The engine's own name for its block."""
    return {SGLANG: "page_size", TRTLLM: "tokens_per_block"}.get(plan.engine, "block_size")


def log_lines(plan: ServingReport) -> tuple[str, ...]:
    """The engine's startup log lines that carry the plan's numbers."""
    if plan.engine == SGLANG:
        return _sglang(plan)
    if plan.engine == TRTLLM:
        return _trtllm(plan)
    return _vllm(plan)


def _vllm(plan: ServingReport) -> tuple[str, ...]:
    graphs = plan.reserve.cuda_graph_bytes if plan.reserve is not None else 0
    return (f"Estimated CUDA graph memory: {graphs / GIB:.2f} GiB total",
            f"Available KV cache memory: {plan.kv_cache_bytes / GIB:.2f} GiB",
            f"GPU KV cache size: {plan.kv_tokens:,} tokens",
            f"Maximum concurrency for {plan.context:,} tokens per request:"
            f" {plan.concurrency:.2f}x")


def _sglang(plan: ServingReport) -> tuple[str, ...]:
    # K and V are half the cache each (an MLA latent is one "KV" pool)
    half = plan.num_blocks * plan.block_bytes / 2 / GIB
    return (f"KV Cache is allocated. #tokens: {plan.kv_tokens}, K size: {half:.2f} GB,"
            f" V size: {half:.2f} GB",
            f"max_total_num_tokens={plan.kv_tokens}")


def _trtllm(plan: ServingReport) -> tuple[str, ...]:
    reserved = plan.reserve.reserved_bytes if plan.reserve is not None else 0
    return (f"Peak memory during memory usage profiling (torch + non-torch):"
            f" {reserved / GIB:.2f} GiB",
            f"available KV cache memory when calculating max tokens:"
            f" {plan.kv_cache_bytes / GIB:.2f} GiB",
            f"Estimated max tokens in KV cache : {plan.kv_tokens}")
