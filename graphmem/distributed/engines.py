"""How each serving engine reserves a GPU's memory before its KV cache: graphmem's own formulas,
each from the engine's source at the version named here (docs/serving.md works them by hand).

vLLM 0.33.0 (vllm/v1/worker/gpu_worker.py `determine_available_memory`, vllm/v1/worker/utils.py
`request_memory`, vllm/utils/mem_utils.py `memory_profiling`):

    requested = ceil(capacity x gpu_memory_utilization)
    kv_cache  = requested - weights - activation peak - CUDA graphs
    activation peak = max(the profiled forward at max_num_batched_tokens, the dummy sampler run)

The CUDA context, NCCL and the cuBLAS handles exist before the worker's memory snapshot (the
baseline): they sit outside `requested`, which must still fit in what is free at start.

SGLang 0.5.2 (python/sglang/srt/server_args.py `mem_fraction_static`, model_runner.py
`profile_max_num_token`): a static pool for weights and KV together,

    free at start = capacity - CUDA context
    kv_cache      = free at start x mem_fraction_static - weights
    max_total_num_tokens = kv_cache // cell_size, floored to page_size

and the rest, free at start x (1 - mem_fraction_static), is left for activations and CUDA
graphs. TensorRT-LLM's PyTorch backend (tensorrt_llm/_torch/pyexecutor/_util.py
`KvCacheCreator._cal_max_tokens`, read at NVIDIA/TensorRT-LLM commit d8ae02c): the
profiled peak (weights, activations, non-torch memory) is taken from the GPU and a share
of what is left is the cache,

    kv_cache  = (capacity - peak) x free_gpu_memory_fraction
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from graphmem.core.kv_layers import CHUNKED, FULL, SLIDING, LayerGroup
from graphmem.distributed.vocabulary import SGLANG, TRTLLM, VLLM

ENGINE_VERSIONS = {VLLM: "vLLM 0.33.0", SGLANG: "SGLang 0.5.2",
                   TRTLLM: "TensorRT-LLM PyTorch backend"}
MIB, GIB = 1 << 20, 1 << 30

# vLLM CacheConfig: block_size 16 on CUDA, gpu_memory_utilization 0.9; SGLang ServerArgs
# page_size 1; TensorRT-LLM KvCacheConfig tokens_per_block 32, free_gpu_memory_fraction 0.9
DEFAULT_BLOCK_SIZES = {VLLM: 16, SGLANG: 1, TRTLLM: 32}
VLLM_GPU_MEMORY_UTILIZATION = 0.9
TRTLLM_FREE_GPU_MEMORY_FRACTION = 0.9
TRTLLM_MAX_NUM_TOKENS = 8192  # TensorRT-LLM BuildConfig.max_num_tokens: its profiled step
# SGLang 0.5.2 ServerArgs.__post_init__: MiB reserved outside the static pool by the GPU's
# memory (MiB, what nvidia-smi reports), as (below this many MiB, base GiB, GiB per GPU of
# tp x pp); 32 GiB from 160 GiB up
SGLANG_RESERVE_TABLE = ((20 * 1024, 2.8, 0.1), (35 * 1024, 2.8, 0.1), (90 * 1024, 9.5, 0.5),
                        (100 * 1024, 12.0, 0.5), (160 * 1024, 12.0, 0.5))
SGLANG_LARGE_RESERVE_GIB = 32.0
# SGLang 0.5.2 chunked_prefill_size by GPU memory: under 35 GiB 2048, under 160 GiB 8192
SGLANG_CHUNKS = ((35 * 1024, 2048), (160 * 1024, 8192))
SGLANG_LARGE_CHUNK = 16384
# vLLM 0.33.0 EngineArgs.get_batch_defaults, OpenAI server: (max_num_batched_tokens,
# max_num_seqs); 160 GiB and up, or 70 GiB and up except an A100 (or a GB10), or the rest
VLLM_BATCH_DEFAULTS = {"largest": (16384, 1024), "large": (8192, 1024), "other": (2048, 256)}
# vLLM 0.33.0 VllmConfig: the largest captured batch is min(max_num_seqs x 2, 512) (1024 on
# data-centre Blackwell) and at most max_num_batched_tokens
VLLM_MAX_CAPTURE = 512
# vLLM 0.33.0 profile_cudagraph_memory: "at least 1 MiB per graph for driver overhead"
VLLM_PER_GRAPH_BYTES = MIB
VLLM_CUDA_GRAPH_MODES = 2  # FULL_AND_PIECEWISE: the decode graphs and the piecewise ones
# the sampler's live bytes per logit at its peak, beside the model-dtype logits
# (vllm/v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p_pytorch): the fp32 logits (4),
# the sorted fp32 values (4) and int64 indices (8), the fp32 softmax of the sort (4), a mask (1)
VLLM_SAMPLER_BYTES_PER_LOGIT = 4 + 4 + 8 + 4 + 1


def default_block_size(engine: str) -> int:
    return DEFAULT_BLOCK_SIZES[engine]


def sglang_mem_fraction_static(capacity_bytes: int, parallel: int = 1) -> float:
    """SGLang 0.5.2's default mem_fraction_static: round((gpu_mem - reserved) / gpu_mem, 3)
    with gpu_mem the GPU's MiB and `reserved` from the table above (parallel = tp x pp)."""
    gpu_mib = capacity_bytes / MIB
    reserved = SGLANG_LARGE_RESERVE_GIB * 1024
    for below, base, per_gpu in SGLANG_RESERVE_TABLE:
        if gpu_mib < below:
            reserved = (base + parallel * per_gpu) * 1024
            break
    return round((gpu_mib - reserved) / gpu_mib, 3)


def sglang_chunked_prefill(capacity_bytes: int) -> int:
    """SGLang 0.5.2's default chunked_prefill_size: the tokens of its largest prefill step."""
    gpu_mib = capacity_bytes / MIB
    return next((chunk for below, chunk in SGLANG_CHUNKS if gpu_mib < below),
                SGLANG_LARGE_CHUNK)


def vllm_batch_defaults(gpu_name: str, capacity_bytes: int) -> tuple[int, int]:
    """vLLM 0.33.0's (max_num_batched_tokens, max_num_seqs) for its OpenAI server."""
    if capacity_bytes >= 160 * GIB:
        return VLLM_BATCH_DEFAULTS["largest"]
    if capacity_bytes >= 70 * GIB and "a100" not in gpu_name.lower():
        return VLLM_BATCH_DEFAULTS["large"]
    return VLLM_BATCH_DEFAULTS["other"]


def vllm_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> tuple[int, ...]:
    """vLLM 0.33.0's default cudagraph_capture_sizes: 1, 2, 4, every 8 below 256, every 16
    from 256, up to min(2 x max_num_seqs, 512, max_num_batched_tokens), which is added when
    off the stride."""
    largest = min(max_num_seqs * 2, VLLM_MAX_CAPTURE, max_num_batched_tokens)
    sizes = [size for size in (1, 2, 4) if size <= largest]
    sizes += range(8, min(largest + 1, 256), 8)
    sizes += range(256, largest + 1, 16)
    if max_num_batched_tokens <= largest and max_num_batched_tokens not in sizes:
        sizes.append(max_num_batched_tokens)
    return tuple(sorted(sizes))


def vllm_cuda_graph_bytes(activation_per_token: float, sizes: tuple[int, ...]) -> int:
    """vLLM 0.33.0 profile_cudagraph_memory: the first (largest) capture's pool, shared by the
    modes (their max), plus (graphs - 1) x the next capture's growth in each mode. graphmem's
    model of those two measurements: the first capture holds the forward's activations at the
    largest size (the traced step's bytes per token x that size); each further graph the 1 MiB
    floor vLLM applies."""
    if not sizes:
        return 0
    first = math.ceil(activation_per_token * max(sizes))
    return first + VLLM_CUDA_GRAPH_MODES * (len(sizes) - 1) * VLLM_PER_GRAPH_BYTES


def vllm_sampler_bytes(rows: int, vocab: int, logits_dtype_bytes: int) -> int:
    """The dummy sampler run's peak: `rows` = min(max_num_seqs, max_num_batched_tokens)
    requests' logits over the vocabulary, sorted for top-k/top-p (the constants above)."""
    return rows * vocab * (logits_dtype_bytes + VLLM_SAMPLER_BYTES_PER_LOGIT)


@dataclass(frozen=True)
class EngineSetting:
    """The engine and what the user set of it (None: the engine's default)."""

    engine: str = VLLM
    share: float | None = None  # gpu_memory_utilization / mem_fraction_static /
    # free_gpu_memory_fraction
    block_size: int | None = None  # block_size / page_size / tokens_per_block
    batched_tokens: int | None = None  # max_num_batched_tokens / chunked_prefill_size /
    # max_num_tokens
    tensor_parallel: int = 1
    enforce_eager: bool = False  # vLLM: no CUDA graphs


@dataclass(frozen=True)
class EngineReserve:
    """What the engine keeps out of its cache, and the cache it gets, per GPU (bytes). The
    budget is what counts against the engine's share: `reserved_bytes` inside it, then the
    cache; one sequence fits when reserved + its KV <= budget. Words are the reports'."""

    engine: str
    memory_fraction: float  # the share, resolved
    block_size: int  # tokens per block (page), resolved
    batched_tokens: int  # the engine's largest step, resolved
    forward_bytes: int  # the traced step's activation peak
    activation_bytes: int  # what the engine reserves for activations (vLLM: the larger of
    # the forward and the sampler)
    budget_bytes: int
    reserved_bytes: int
    kv_cache_bytes: int
    sampler_bytes: int = 0  # vLLM: the dummy sampler run's peak
    sampler_rows: int = 0  # vLLM: min(max_num_seqs, max_num_batched_tokens)
    cuda_graph_bytes: int = 0  # vLLM: the CUDA-graph estimate
    cuda_graph_sizes: tuple[int, ...] = ()  # vLLM: the captured batch sizes
    outside_bytes: int = 0  # SGLang: free at start x (1 - mem_fraction_static)
    starts: bool = True  # vLLM: the requested memory is free at start


def default_step_tokens(engine: str, gpu_name: str, capacity_bytes: int) -> int:
    """The tokens of the engine's largest step by default: vLLM's max_num_batched_tokens,
    SGLang's chunked_prefill_size, TensorRT-LLM's max_num_tokens."""
    if engine == SGLANG:
        return sglang_chunked_prefill(capacity_bytes)
    if engine == TRTLLM:
        return TRTLLM_MAX_NUM_TOKENS
    return vllm_batch_defaults(gpu_name, capacity_bytes)[0]


def default_share(engine: str, capacity_bytes: int, tensor_parallel: int) -> float:
    if engine == SGLANG:
        return sglang_mem_fraction_static(capacity_bytes, tensor_parallel)
    if engine == TRTLLM:
        return TRTLLM_FREE_GPU_MEMORY_FRACTION
    return VLLM_GPU_MEMORY_UTILIZATION


def engine_groups(engine: str, groups: tuple[LayerGroup, ...]) -> tuple[LayerGroup, ...]:
    """The layer groups as the engine's pool holds them: vLLM per layer type; SGLang 0.5.2
    (one token pool, `cell_size` of every attention layer) and TensorRT-LLM (without a
    `max_attention_window`) keep every token of a windowed layer: full attention."""
    if engine == VLLM:
        return groups
    return tuple(replace(group, kind=FULL, span=None) if group.kind in (SLIDING, CHUNKED)
                 else group for group in groups)


def engine_reserve(setting: EngineSetting, gpu_name: str, capacity: int, context: int,
                   weights: int, forward: int, activation_per_token: float,
                   vocab: int | None, logits_dtype_bytes: int) -> EngineReserve:
    """The engine's reservation on one GPU (the module docstring)."""
    engine = setting.engine
    share = setting.share or default_share(engine, capacity, setting.tensor_parallel)
    block = setting.block_size or default_block_size(engine)
    tokens = setting.batched_tokens or default_step_tokens(engine, gpu_name, capacity)

    def reserve(memory: EngineMemory, activation: int) -> EngineReserve:
        return EngineReserve(engine, share, block, tokens, forward, activation,
                             memory.budget_bytes, memory.reserved_bytes, memory.kv_cache_bytes)

    if engine == SGLANG:
        memory = sglang_memory(capacity, share, context, weights)
        return replace(reserve(memory, forward),
                       outside_bytes=capacity - context - memory.budget_bytes)
    if engine == TRTLLM:
        return reserve(trtllm_memory(capacity, share, context, weights, forward), forward)
    max_seqs = vllm_batch_defaults(gpu_name, capacity)[1]
    rows = min(max_seqs, tokens)
    sampler = vllm_sampler_bytes(rows, vocab, logits_dtype_bytes) if vocab else 0
    sizes = () if setting.enforce_eager else vllm_capture_sizes(max_seqs, tokens)
    graphs = vllm_cuda_graph_bytes(activation_per_token, sizes)
    activation = max(forward, sampler)
    memory = vllm_memory(capacity, share, context, weights, activation, graphs)
    return replace(reserve(memory, activation), sampler_bytes=sampler,
                   sampler_rows=rows if vocab else 0, cuda_graph_bytes=graphs,
                   cuda_graph_sizes=sizes, starts=memory.starts)


@dataclass(frozen=True)
class EngineMemory:
    """What an engine holds before its cache, and the cache it gets (bytes, one GPU).
    `budget_bytes` is what the engine may hold in all that counts against its share: the
    reserved parts inside it plus the cache; a sequence fits when reserved + its KV <= budget."""

    budget_bytes: int
    reserved_bytes: int  # inside the budget, before the cache
    kv_cache_bytes: int
    starts: bool = True  # vLLM: the requested memory was free at start


def vllm_memory(capacity: int, share: float, context: int, weights: int, activation: int,
                cuda_graphs: int) -> EngineMemory:
    requested = math.ceil(capacity * share)
    reserved = weights + activation + cuda_graphs
    return EngineMemory(requested, reserved, max(requested - reserved, 0),
                        starts=capacity - context >= requested)


def sglang_memory(capacity: int, share: float, context: int, weights: int) -> EngineMemory:
    pool = math.floor((capacity - context) * share)
    return EngineMemory(pool, weights, max(pool - weights, 0))


def trtllm_memory(capacity: int, share: float, context: int, weights: int,
                  activation: int) -> EngineMemory:
    peak = context + weights + activation
    kv = max(math.floor((capacity - peak) * share), 0)
    return EngineMemory(peak + kv, peak, kv)
