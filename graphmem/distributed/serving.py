"""Serving an LLM on a GPU: the paged KV cache, how many sequences fit at once, the longest
context, as a serving engine sizes them (docs/serving.md has the sources).

Per GPU (one tensor-parallel rank):

    kv_cache      = what the engine leaves for its cache (graphmem/distributed/engines.py:
                    vLLM, SGLang or TensorRT-LLM, each its own way), from the weights / T,
                    the step activation peak, the CUDA context and the engine's share
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from graphmem.core.conventions import MAX_DIM_VALUE
from graphmem.core.ir import Graph, Node, Role, Value
from graphmem.core.kv_layers import (
    NOTHING_GROWS,
    GroupUse,
    KvLayout,
    LayerGroup,
    full_attention,
)
from graphmem.core.symbolic import SymInt
from graphmem.devices.error_bands import error_band
from graphmem.distributed.engines import (
    ENGINE_VERSIONS,
    EngineReserve,
    EngineSetting,
    default_step_tokens,
    engine_groups,
    engine_reserve,
)
from graphmem.distributed.vllm_pages import uniform_pages
from graphmem.distributed.vocabulary import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    ENGINES,
    TRTLLM,
    VLLM,
)
from graphmem.errors import GraphmemError
from graphmem.ops import traits_of
from graphmem.ops.traits import Contraction
from graphmem.passes.dims import DimBinding, value_bytes
from graphmem.passes.fit import DevicePart, FitPart, GpuFit, KvPool, with_error_band
from graphmem.passes.liveness import analyze_liveness
from graphmem.passes.params import stored_bytes

MAX_BLOCK_SIZE = 1 << 16
MAX_GPUS = 1 << 16


@dataclass(frozen=True)
class ServingConfig:
    """How the model is served (`graphmem analyze --serve`); None: the engine's default."""

    block_size: int | None = None  # tokens per KV-cache block (page)
    gpu_memory_utilization: float | None = None  # the engine's share (engines.py)
    context: int | None = None  # tokens per sequence; default: the model's position limit
    prefill_tokens: int | None = None  # tokens of the profiled prefill step; default: context
    tensor_parallel: int = 1  # T: weights and KV heads split over T GPUs
    gpus: int | None = None  # N GPUs in all, N / T replicas; default T
    engine: str = VLLM  # vllm, sglang or trtllm: how the cache is sized (engines.py)
    enforce_eager: bool = False  # vLLM --enforce-eager: no CUDA graphs captured

    def check(self) -> None:
        """Refuse what needs no model, naming the flag."""
        if self.engine not in ENGINES:
            raise GraphmemError(f"--engine {self.engine}: choose one of {', '.join(ENGINES)}")
        _check_range("--block-size", self.block_size, 1, MAX_BLOCK_SIZE)
        share = self.gpu_memory_utilization
        if share is not None and not 0 < share <= 1:
            raise GraphmemError(f"--gpu-memory-utilization {share}: give a share above 0 and"
                                " at most 1, e.g. 0.9 (vLLM's default)")
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
    vocab_size: int | None = None  # the logits' width: vLLM's dummy sampler run
    logits_dtype_bytes: int = 2  # the model's dtype: the logits before the sampler's fp32
    traced_tokens: int | None = None  # tokens of the traced step (its activations per token)


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
    step_tokens: int = 2048  # the scheduler's step: a sliding window's extra tokens
    sequence_bytes: int = 0  # one sequence of `context` tokens, every layer group
    layer_groups: tuple[GroupUse, ...] = ()  # what a sequence holds per layer type
    reserve: EngineReserve | None = None  # the engine's own parts (None: a bare plan)

    @property
    def engine(self) -> str:
        return self.reserve.engine if self.reserve else VLLM

    @property
    def block_size(self) -> int:
        return self.reserve.block_size if self.reserve else DEFAULT_BLOCK_SIZE

    @property
    def memory_fraction(self) -> float:
        return self.reserve.memory_fraction if self.reserve else DEFAULT_GPU_MEMORY_UTILIZATION

    @property
    def concurrency(self) -> float:
        """vLLM's "Maximum concurrency": blocks over one request's blocks, unfloored."""
        return self.num_blocks / self.blocks_per_sequence if self.blocks_per_sequence else 0.0

    @property
    def kv_tokens(self) -> int:
        """The engine's own count of its cache in tokens: vLLM 0.33 int(concurrency x
        max_model_len) (its "GPU KV cache size"); SGLang max_total_num_tokens (whole pages);
        TensorRT-LLM's estimated max tokens (the cache over the bytes per token)."""
        if self.engine == VLLM:
            return int(self.concurrency * self.context)
        if self.engine == TRTLLM:  # _cal_max_tokens: available // kv size per token
            return self.kv_cache_bytes // self.per_token_bytes if self.per_token_bytes else 0
        return self.num_blocks * self.block_size

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
        """"position limit", "memory", or NOTHING_GROWS where no layer grows with the
        context (a model of states only) and no position limit caps it."""
        limit = self.position_limit
        if limit is not None and limit < self.memory_context:
            return "position limit"
        return NOTHING_GROWS if self.memory_context >= MAX_DIM_VALUE else "memory"

    @property
    def state_only(self) -> bool:
        """No layer grows with the context: a block is one sequence's states (vLLM's
        MambaSpec holds a whole sequence, its block size the model's length)."""
        return not self.per_token_bytes and self.sequence_bytes > 0


def kv_heads_per_rank(kv_heads: int, tensor_parallel: int) -> int:
    """vLLM ModelConfig.get_num_kv_heads: split over the ranks, at least one each (a KV head
    is replicated when there are fewer KV heads than ranks)."""
    return max(1, kv_heads // tensor_parallel)


def cache_layout(inputs: ServingInputs, block_size: int | None = None) -> KvLayout:
    """The cache's layer groups as served: the plan's TP, block size and scheduler step (a
    sliding window's extra tokens are vLLM's: SGLang and TensorRT-LLM by default keep every
    token of every attention layer, engines.py `engine_groups`)."""
    config, cache = inputs.config, inputs.cache
    step = config.prefill_tokens or default_step_tokens(VLLM, inputs.gpu_name,
                                                        inputs.capacity_bytes)
    return KvLayout(engine_groups(config.engine, cache.layer_groups), cache.dtype_bytes,
                    cache.state_dtype_bytes or cache.dtype_bytes, config.tensor_parallel,
                    block_size or config.block_size or DEFAULT_BLOCK_SIZE, step)


def plan_serving(inputs: ServingInputs) -> ServingReport:
    """The paged-cache plan of the module docstring; `inputs.config.context` is set."""
    config, cache = inputs.config, inputs.cache
    assert config.context is not None
    forward = max((step.activation_bytes for step in inputs.steps), default=0)
    reserve = engine_reserve(EngineSetting(
        config.engine, config.gpu_memory_utilization, config.block_size, config.prefill_tokens,
        config.tensor_parallel, config.enforce_eager), inputs.gpu_name, inputs.capacity_bytes,
        inputs.cuda_context_bytes, inputs.weights_bytes, forward,
        _per_token_activation(inputs, forward), inputs.vocab_size, inputs.logits_dtype_bytes)
    kv_bytes = reserve.kv_cache_bytes if reserve.starts else 0
    layout = cache_layout(inputs, reserve.block_size)
    # attention beside states: vLLM's one page size, its larger block (vllm_pages.py)
    pages = uniform_pages(layout) if config.engine == VLLM else None
    if pages is not None:
        reserve = replace(reserve, block_size=pages.block_tokens)
    sizing = pages or layout
    per_token = layout.per_token_bytes
    sequence = sizing.sequence_bytes(config.context)
    # states only: one block per sequence, its states (vLLM: a Mamba page per layer)
    block = pages.block_bytes if pages else reserve.block_size * per_token or sequence
    # no layer holds more than every token: the search stops where full layers would
    cap = max(kv_bytes // per_token, 1) if per_token else MAX_DIM_VALUE
    return ServingReport(
        config=config, gpu_name=inputs.gpu_name, capacity_bytes=inputs.capacity_bytes,
        budget_bytes=reserve.budget_bytes, weights_bytes=inputs.weights_bytes,
        steps=inputs.steps, activation_bytes=reserve.activation_bytes,
        cuda_context_bytes=inputs.cuda_context_bytes,
        kv_cache_bytes=kv_bytes, kv_heads_per_rank=kv_heads_per_rank(cache.kv_heads,
                                                                     config.tensor_parallel),
        per_token_bytes=per_token, block_bytes=block,
        num_blocks=kv_bytes // block if block else 0, context=config.context,
        blocks_per_sequence=-(-sequence // block) if block else 0,
        max_sequences=kv_bytes // sequence if sequence else 0,
        replicas=config.replicas, memory_context=sizing.longest_context(kv_bytes, cap),
        position_limit=inputs.position_limit,
        position_limit_source=inputs.position_limit_source, step_tokens=layout.step_tokens,
        sequence_bytes=sequence, layer_groups=sizing.uses(config.context), reserve=reserve)


def _per_token_activation(inputs: ServingInputs, forward: int) -> float:
    """The traced step's activation bytes per token (vLLM's CUDA-graph model scales it)."""
    return forward / inputs.traced_tokens if inputs.traced_tokens else 0.0


def one_sequence_bytes(plan: ServingReport) -> int:
    """What one sequence at the plan's context needs against the engine's budget: what the
    engine reserves inside it (vLLM: weights, the activation peak, the CUDA graphs; SGLang:
    the weights; TensorRT-LLM: the profiled peak) and the sequence's KV blocks. At most the
    budget exactly when at least one sequence fits (kv_cache >= sequence_bytes)."""
    reserved = (plan.reserve.reserved_bytes if plan.reserve is not None else
                plan.weights_bytes + plan.activation_bytes + plan.cuda_context_bytes)
    return reserved + plan.sequence_bytes


def serving_fit(fit: GpuFit, plan: ServingReport) -> GpuFit:
    """The verdict under --serve: the plan's answer, not the step's. It fits when one
    sequence at the context fits the engine's budget (engines.py).
    `required_bytes` is what the engine holds: where a sequence fits, the weights, the step,
    the CUDA graphs, the context and the whole KV pool it allocates at start (what nvidia-smi
    shows: about the budget; the headline said one sequence's 17.4 GiB where vLLM holds
    72 GiB); where none fits, one sequence's need (the demand)."""
    fits = plan.max_sequences >= 1
    pool_bytes = plan.num_blocks * plan.block_bytes if fits else plan.sequence_bytes
    graphs = plan.reserve.cuda_graph_bytes if plan.reserve is not None else 0
    required = (plan.weights_bytes + plan.activation_bytes + graphs + plan.cuda_context_bytes
                + pool_bytes)
    pool = KvPool(plan.num_blocks if fits else None, plan.context)
    parts = (FitPart(DevicePart.WEIGHTS, SymInt.const(plan.weights_bytes)),
             FitPart(DevicePart.STEP, SymInt.const(plan.activation_bytes)),
             *((FitPart(DevicePart.CUDA_GRAPHS, SymInt.const(graphs)),) if graphs else ()),
             FitPart(DevicePart.CONTEXT, SymInt.const(plan.cuda_context_bytes)),
             FitPart(DevicePart.KV_CACHE, SymInt.const(pool_bytes), pool))
    # what sits outside the engine's budget (vLLM's context; SGLang's step and context)
    # raises the limit as much as the need: over = reserved + a sequence - the budget
    inside = one_sequence_bytes(plan) - plan.sequence_bytes + pool_bytes
    limit = plan.budget_bytes + max(required - inside, 0)
    # utilization stays required / capacity (GpuFit's meaning); the verdict is against the
    # budget, so with a share below 1 a sequence may not fit at under 100%: `basis` says why
    return with_error_band(replace(
        fit, required_bytes=SymInt.const(required),
        utilization=required / plan.capacity_bytes if plan.capacity_bytes else float("inf"),
        fits=fits, parts=parts, runtime=None, failure="", caveat=None,
        out_of_memory=None, limit_bytes=limit,
        basis=(f"serving plan: {ENGINE_VERSIONS[plan.engine]}'s budget,"
               f" {plan.memory_fraction:g} of the GPU, holds at least one"
               f" {plan.context:,}-token sequence")), error_band("serving"))


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
