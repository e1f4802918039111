"""Serving an LLM on a GPU: the paged KV cache, how many sequences fit at once, the longest
context, as a vLLM-style engine sizes them (docs/serving.md has the sources).

Per GPU (one tensor-parallel rank):

    budget        = floor(capacity * gpu_memory_utilization)   # vLLM: total * utilization
    kv_cache      = budget - weights / T - step activation peak - CUDA context
    per_token     = 2 (K and V) * layers * max(1, kv_heads // T) * head_dim * dtype_bytes
    block         = block_size * per_token                     # one page of every layer
    blocks        = kv_cache // block                          # vLLM get_num_blocks
    per_sequence  = the sum over layer groups (graphmem/core/kv_layers.py): a full layer's
                    ceil(context / block_size) blocks, a sliding layer's window and one
                    step, an MLA layer's latent, a state-space layer's state
    sequences     = kv_cache // per_sequence                   # vLLM "maximum concurrency",
                                                               # floored to whole sequences
    longest       = min(the most tokens per_sequence fits in kv_cache, position limit)

With `gpus` = N GPUs in replicas of T (data parallel), each replica has its own cache:
N / T times the sequences. The step activation peak is the larger of the prefill step (a
prompt of `prefill_tokens` tokens, what vLLM's profiling run measures) and a decode step,
neither holding the KV tensors (paged attention writes them into the blocks).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from graphmem.core.conventions import MAX_DIM_VALUE
from graphmem.core.ir import Graph, Node, Role, Value
from graphmem.core.kv_layers import (
    GroupUse,
    KvLayout,
    LayerGroup,
    full_attention,
)
from graphmem.core.symbolic import SymInt
from graphmem.devices.error_bands import error_band
from graphmem.errors import GraphmemError
from graphmem.ops import traits_of
from graphmem.ops.traits import Contraction
from graphmem.passes.dims import DimBinding, value_bytes
from graphmem.passes.fit import FitPart, GpuFit, with_error_band
from graphmem.passes.liveness import analyze_liveness
from graphmem.passes.params import stored_bytes

DEFAULT_BLOCK_SIZE = 16  # vLLM's default on CUDA (CacheConfig.block_size)
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default gpu_memory_utilization
MAX_BLOCK_SIZE = 1 << 16
MAX_GPUS = 1 << 16
# vLLM's max_num_batched_tokens for its OpenAI server (EngineArgs.get_batch_defaults): 8192 on
# a GPU of 70 GiB or more that is not an A100, else 2048
LARGE_GPU_STEP_TOKENS, STEP_TOKENS, LARGE_GPU_BYTES = 8192, 2048, 70 << 30


@dataclass(frozen=True)
class ServingConfig:
    """How the model is served (`graphmem analyze --serve`)."""

    block_size: int = DEFAULT_BLOCK_SIZE  # tokens per KV-cache block (page)
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION  # the engine's share
    context: int | None = None  # tokens per sequence; default: the model's position limit
    prefill_tokens: int | None = None  # tokens of the profiled prefill step; default: context
    tensor_parallel: int = 1  # T: weights and KV heads split over T GPUs
    gpus: int | None = None  # N GPUs in all, N / T replicas; default T

    def check(self) -> None:
        """Refuse what needs no model, naming the flag."""
        _check_range("--block-size", self.block_size, 1, MAX_BLOCK_SIZE)
        if not 0 < self.gpu_memory_utilization <= 1:
            raise GraphmemError(f"--gpu-memory-utilization {self.gpu_memory_utilization}: give"
                                " a share above 0 and at most 1, e.g. 0.9 (vLLM's default)")
        _check_range("--context", self.context, 1, MAX_DIM_VALUE)
        _check_range("--max-batched-tokens", self.prefill_tokens, 1, MAX_DIM_VALUE)
        _check_range("--tensor-parallel", self.tensor_parallel, 1, MAX_GPUS)
        _check_range("--gpus", self.gpus, 1, MAX_GPUS)
        if self.gpus is not None and self.gpus % self.tensor_parallel:
            raise GraphmemError(f"--gpus {self.gpus} --tensor-parallel {self.tensor_parallel}:"
                                " the GPUs form replicas of T; give a multiple of T")

    @property
    def replicas(self) -> int:
        return (self.gpus or self.tensor_parallel) // self.tensor_parallel


def _check_range(flag: str, value: int | None, low: int, high: int) -> None:
    if value is not None and not low <= value <= high:
        raise GraphmemError(f"{flag} {value}: give a whole number from {low} to {high}")


@dataclass(frozen=True)
class StepPeak:
    """The activation peak of one engine step, without the KV tensors."""

    name: str  # "prefill", "decode" or "analyzed step"
    dims: dict[str, int]  # the dims it was computed at
    activation_bytes: int


@dataclass(frozen=True)
class CacheShape:
    """The model's KV cache, whole (before tensor parallelism): `groups` per layer type
    (graphmem/core/kv_layers.py), else every layer full attention of `kv_heads` x `head_dim`."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    dtype_bytes: int
    groups: tuple[LayerGroup, ...] = ()
    state_dtype_bytes: int = 0  # a state-space layer's state (default: dtype_bytes)

    @property
    def layer_groups(self) -> tuple[LayerGroup, ...]:
        return self.groups or full_attention(self.layers, self.kv_heads, self.head_dim)


@dataclass(frozen=True)
class ServingInputs:
    """What the plan needs, all numbers: the analysis finds them (pipeline/extras.py)."""

    config: ServingConfig
    cache: CacheShape
    gpu_name: str
    capacity_bytes: int  # what the driver reports for the GPU
    cuda_context_bytes: int  # non-tensor memory of the process
    weights_bytes: int  # on one rank
    steps: tuple[StepPeak, ...]
    position_limit: int | None  # the model's max_position_embeddings
    position_limit_source: str


@dataclass(frozen=True)
class ServingReport:
    config: ServingConfig
    gpu_name: str
    capacity_bytes: int
    budget_bytes: int  # floor(capacity * gpu_memory_utilization)
    weights_bytes: int  # per rank
    steps: tuple[StepPeak, ...]
    activation_bytes: int  # the largest step's: what the engine keeps free for a step
    cuda_context_bytes: int
    kv_cache_bytes: int  # what is left for the cache (0 when nothing is)
    kv_heads_per_rank: int
    per_token_bytes: int  # per rank, every layer the context grows (within the windows)
    block_bytes: int
    num_blocks: int
    context: int  # tokens per sequence the concurrency is for
    blocks_per_sequence: int  # ceil(sequence_bytes / block_bytes)
    max_sequences: int  # per replica
    replicas: int
    memory_context: int  # the most tokens one sequence alone fits, memory only
    position_limit: int | None
    position_limit_source: str
    step_tokens: int = STEP_TOKENS  # the scheduler's step: a sliding window's extra tokens
    sequence_bytes: int = 0  # one sequence of `context` tokens, every layer group
    layer_groups: tuple[GroupUse, ...] = ()  # what a sequence holds per layer type

    @property
    def total_sequences(self) -> int:
        return self.max_sequences * self.replicas

    @property
    def max_context(self) -> int:
        """The longest context one sequence can have: memory, capped by the position limit."""
        if self.position_limit is None:
            return self.memory_context
        return min(self.memory_context, self.position_limit)

    @property
    def context_limited_by(self) -> str:
        limit = self.position_limit
        return "position limit" if limit is not None and limit < self.memory_context else "memory"


def kv_heads_per_rank(kv_heads: int, tensor_parallel: int) -> int:
    """vLLM ModelConfig.get_num_kv_heads: split over the ranks, at least one each (a KV head
    is replicated when there are fewer KV heads than ranks)."""
    return max(1, kv_heads // tensor_parallel)


def default_step_tokens(gpu_name: str, capacity_bytes: int) -> int:
    """vLLM's default max_num_batched_tokens for its OpenAI server on this GPU."""
    large = capacity_bytes >= LARGE_GPU_BYTES and "a100" not in gpu_name.lower()
    return LARGE_GPU_STEP_TOKENS if large else STEP_TOKENS


def cache_layout(inputs: ServingInputs) -> KvLayout:
    """The cache's layer groups as served: the plan's TP, block size and scheduler step."""
    config, cache = inputs.config, inputs.cache
    step = config.prefill_tokens or default_step_tokens(inputs.gpu_name, inputs.capacity_bytes)
    return KvLayout(cache.layer_groups, cache.dtype_bytes,
                    cache.state_dtype_bytes or cache.dtype_bytes, config.tensor_parallel,
                    config.block_size, step)


def plan_serving(inputs: ServingInputs) -> ServingReport:
    """The paged-cache plan of the module docstring; `inputs.config.context` is set."""
    config, cache = inputs.config, inputs.cache
    assert config.context is not None
    budget = math.floor(inputs.capacity_bytes * config.gpu_memory_utilization)
    activation = max((step.activation_bytes for step in inputs.steps), default=0)
    kv_bytes = max(budget - inputs.weights_bytes - activation - inputs.cuda_context_bytes, 0)
    layout = cache_layout(inputs)
    per_token = layout.per_token_bytes
    block = config.block_size * per_token
    sequence = layout.sequence_bytes(config.context)
    # no layer holds more than every token: the search stops where full layers would
    cap = max(kv_bytes // per_token, 1) if per_token else MAX_DIM_VALUE
    return ServingReport(
        config=config, gpu_name=inputs.gpu_name, capacity_bytes=inputs.capacity_bytes,
        budget_bytes=budget, weights_bytes=inputs.weights_bytes, steps=inputs.steps,
        activation_bytes=activation, cuda_context_bytes=inputs.cuda_context_bytes,
        kv_cache_bytes=kv_bytes, kv_heads_per_rank=kv_heads_per_rank(cache.kv_heads,
                                                                     config.tensor_parallel),
        per_token_bytes=per_token, block_bytes=block,
        num_blocks=kv_bytes // block if block else 0, context=config.context,
        blocks_per_sequence=-(-sequence // block) if block else 0,
        max_sequences=kv_bytes // sequence if sequence else 0,
        replicas=config.replicas, memory_context=layout.longest_context(kv_bytes, cap),
        position_limit=inputs.position_limit,
        position_limit_source=inputs.position_limit_source, step_tokens=layout.step_tokens,
        sequence_bytes=sequence, layer_groups=layout.uses(config.context))


def one_sequence_bytes(plan: ServingReport) -> int:
    """What one sequence at the plan's context needs on a GPU: weights, the step's
    activations, the CUDA context and its KV blocks. At most the budget exactly when at least
    one sequence fits (kv_cache >= sequence_bytes)."""
    return (plan.weights_bytes + plan.activation_bytes + plan.cuda_context_bytes
            + plan.sequence_bytes)


def serving_fit(fit: GpuFit, plan: ServingReport) -> GpuFit:
    """The verdict under --serve: the plan's answer, not the step's. It fits when one
    sequence at the context fits the engine's budget (capacity x gpu_memory_utilization).
    `required_bytes` is what the engine holds: where a sequence fits, the weights, the step,
    the context and the whole KV pool it allocates at start (what nvidia-smi shows: about
    the budget; the headline said one sequence's 17.4 GiB where vLLM holds 72 GiB); where
    none fits, one sequence's need (the demand)."""
    fits = plan.max_sequences >= 1
    pool_bytes = plan.num_blocks * plan.block_bytes if fits else plan.sequence_bytes
    required = (plan.weights_bytes + plan.activation_bytes + plan.cuda_context_bytes
                + pool_bytes)
    share = plan.config.gpu_memory_utilization
    kv_label = (f"KV cache, {plan.num_blocks:,} blocks" if fits
                else f"KV cache, one sequence of {plan.context:,} tokens")
    parts = (FitPart("weights", "weights (per GPU)", SymInt.const(plan.weights_bytes)),
             FitPart("step", "step activation peak", SymInt.const(plan.activation_bytes)),
             FitPart("context", "CUDA context", SymInt.const(plan.cuda_context_bytes)),
             FitPart("kv_cache", kv_label, SymInt.const(pool_bytes)))
    # utilization stays required / capacity (GpuFit's meaning); the verdict is against the
    # budget, so with a share below 1 a sequence may not fit at under 100%: `basis` says why
    return with_error_band(replace(
        fit, required_bytes=SymInt.const(required),
        utilization=required / plan.capacity_bytes if plan.capacity_bytes else float("inf"),
        fits=fits, parts=parts, runtime=None, failure="", caveat="",
        out_of_memory=None, limit_bytes=plan.budget_bytes,
        basis=(f"serving plan: the engine's budget, {share:g} of the GPU"
               f" (--gpu-memory-utilization), holds at least one {plan.context:,}-token"
               " sequence")), error_band("serving"))


# ----- what the graph says: weights on a rank, a step's activations ---------------------------
def weights_per_rank(graph: Graph, tensor_parallel: int) -> int:
    """Bytes of every stored tensor (weights, quantized weights and their scales, buffers,
    constants) on one rank: a tensor a matrix product reads (directly, through a view or a
    DequantizeLinear) or an embedding table is split in T (Megatron's column/row-parallel
    linears, vLLM's VocabParallelEmbedding); the rest (norms, small constants) is replicated."""
    split = replicated = 0
    for value in graph.values_with_role(Role.PARAMETER, Role.BUFFER, Role.CONSTANT):
        if value.producer is not None or value.alias_of is not None:
            continue
        if tensor_parallel > 1 and _feeds_a_split_op(value):
            split += stored_bytes(value)
        else:
            replicated += stored_bytes(value)
    return -(-split // tensor_parallel) + replicated


def _feeds_a_split_op(value: Value, hops: int = 2) -> bool:
    for node in _readers(value):
        traits = traits_of(node)
        if traits.contraction is Contraction.MATMUL or traits.row_gather:
            return True
        dequantizes = hops and node.op_type == "DequantizeLinear" and node.input(0) is value
        if dequantizes and any(_feeds_a_split_op(out, hops - 1) for out in node.outputs):
            return True
    return False


def _readers(value: Value) -> list[Node]:
    """The nodes that read `value` or a view of it (`t(weight)` in a traced model)."""
    readers = list(value.consumers)
    for node in value.consumers:
        readers += [reader for out in node.outputs if out.alias_of is value
                    for reader in out.consumers]
    return readers


def step_activation_bytes(graph: Graph, dims: Mapping[str, int],
                          kv_values: Sequence[Value]) -> SymInt:
    """The activation peak (live tensors less weights and inputs) of the graph at `dims`, with
    the KV-cache tensors (past inputs, present outputs) at 0 bytes: a paged engine keeps them
    in its blocks, which the plan counts separately."""
    sizes = value_bytes(graph, DimBinding(bound=dict(dims), free=(), batch_dim=None))
    for value in kv_values:
        sizes[value.name] = SymInt()
    return analyze_liveness(graph, sizes, dims=dims).activation_peak_bytes


def decoder_steps(graph: Graph, bound: Mapping[str, int], kv_values: Sequence[Value],
                  names: tuple[str, str, str], context: int, prefill_tokens: int
                  ) -> tuple[StepPeak, ...] | None:
    """The prefill and decode steps of a decoder-with-past whose batch, new-token and past
    dims are `names`: prefill = one sequence, `prefill_tokens` new tokens, nothing cached;
    decode = one sequence, one new token, `context - 1` cached. None when a step's peak still
    depends on a free dim."""
    batch, tokens, past = names
    shapes = (("prefill", {batch: 1, tokens: prefill_tokens, past: 0}),
              ("decode", {batch: 1, tokens: 1, past: context - 1}))
    steps = []
    for name, step_dims in shapes:
        dims = {**bound, **step_dims}
        peak = step_activation_bytes(graph, dims, kv_values)
        if not peak.is_constant:
            return None
        steps.append(StepPeak(name, step_dims, int(peak)))
    return tuple(steps)
