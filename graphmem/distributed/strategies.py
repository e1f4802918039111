"""Per-GPU memory of a training step under data parallelism (DDP, ZeRO 1/2/3, FSDP) and
Megatron-style tensor parallelism, from a training graph's per-part timelines.

Per rank, at every step s of the traced schedule (the traced batch is the per-GPU micro-batch):

    total(s) = params + grads(s) + optimizer state + temporaries(s) + activations(s)

each part divided by what the strategy shards it over (N data-parallel ranks, T tensor-parallel
ranks); the per-rank figure is the largest total over the steps, plus what the strategy itself
allocates: the gathered (unsharded) parameters of ZeRO-3 / FSDP and communication buckets.
Formulas and sources are in the README ("Distributed training").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from math import ceil

from graphmem.core.conventions import Strategy, closed
from graphmem.core.symbolic import SymInt
from graphmem.distributed.model_states import ParameterInfo, Part, TrainingProfile
from graphmem.distributed.parallel import ParallelLayout
from graphmem.distributed.vocabulary import LAYOUTS
from graphmem.errors import GraphmemError
from graphmem.passes.fit import DevicePart, FitPart, Split
from graphmem.passes.modules import module_at_depth

# distributed-optimizer: Megatron-LM's (--use-distributed-optimizer): optimizer state and
# fp32 master weights sharded over the data-parallel ranks, gradients whole in its grad buffer
STRATEGIES: tuple[str, ...] = tuple(s.value for s in Strategy)
HALF_BYTES = 2
FP32_BYTES = 4
MAX_DATA_PARALLEL = 1 << 20  # the fit search stops here
# torch/nn/parallel/distributed.py: _DEFAULT_BUCKET_CAP_MB = 25 (the total does not depend on it)
DDP_BUCKET_CAP_BYTES = 25 * 2**20


@dataclass(frozen=True)
class ZeroSettings:
    """DeepSpeed's defaults (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig); sizes are
    numbers of elements, as DeepSpeed counts them."""

    reduce_bucket_size: int = 500_000_000
    prefetch_bucket_size: int = 50_000_000  # stage3_prefetch_bucket_size
    max_live_parameters: int = 1_000_000_000  # stage3_max_live_parameters
    param_persistence_threshold: int = 100_000  # stage3_param_persistence_threshold
    overlap_comm: bool | None = None  # None: DeepSpeed's default, True for stage 3 only


@dataclass(frozen=True)
class DistributedConfig:
    strategy: Strategy
    gpus: int  # data-parallel ranks N
    tensor_parallel: int = 1  # T; the job uses N * T GPUs
    layout: str = "traced"  # one of LAYOUTS
    zero: ZeroSettings = field(default_factory=ZeroSettings)
    fsdp_unit_depth: int = 2  # FSDP units: the modules at this depth of the module paths
    ddp_gradient_as_bucket_view: bool = False  # DDP's default: buckets are a second copy
    parallel: ParallelLayout = field(default_factory=ParallelLayout)  # P, C, E, sequence

    @property
    def total_gpus(self) -> int:
        """N x T x P x C (expert parallel ranks are carved out of N x C, as in Megatron-LM)."""
        return (self.gpus * self.tensor_parallel * self.parallel.pipeline
                * self.parallel.context)

    def check(self) -> None:
        closed(Strategy, self.strategy, "--strategy")
        if self.layout not in LAYOUTS:
            raise GraphmemError(f"--state-layout {self.layout}: choose one of {', '.join(LAYOUTS)}")
        for flag, value in (("--gpus", self.gpus), ("--tensor-parallel", self.tensor_parallel),
                            ("--fsdp-depth", self.fsdp_unit_depth)):
            if not 1 <= value <= MAX_DATA_PARALLEL:
                raise GraphmemError(f"{flag} {value}: give a whole number from 1 to"
                                    f" {MAX_DATA_PARALLEL}")
        if self.zero.reduce_bucket_size < 0:
            raise GraphmemError("--reduce-bucket-size: give 0 or more elements")
        self.parallel.check(self.tensor_parallel)


@dataclass(frozen=True)
class PerRankMemory:
    config: DistributedConfig
    parameters_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    temporaries_bytes: int  # optimizer-step intermediates, sharded like the optimizer state
    activations_bytes: int  # inputs, activations, saved activations, activation gradients
    gathered_bytes: int  # unsharded parameters being used (ZeRO-3, FSDP)
    buckets_bytes: int  # communication buffers (DDP buckets, ZeRO reduce buckets, FSDP)
    peak_step: int
    peak_node: str
    # parameters + every gradient + optimizer state on this rank, whatever the step: what
    # DeepSpeed's estimate_zero*_model_states_mem_needs and the ZeRO paper count
    model_states_bytes: int
    split_parameter_share: Fraction  # of the parameter bytes split by tensor parallelism
    replicated_matmul_weights: tuple[str, ...]  # splittable, but no dim divisible by T
    ring_attention_bytes: int = 0  # context parallel's K/V blocks (comm_buffers.py)

    @property
    def total_bytes(self) -> int:
        return (self.parameters_bytes + self.gradients_bytes + self.optimizer_state_bytes
                + self.temporaries_bytes + self.activations_bytes + self.gathered_bytes
                + self.buckets_bytes + self.ring_attention_bytes)


@dataclass(frozen=True)
class StrategyFit:
    strategy: Strategy
    data_parallel: int | None  # the smallest N that fits (None: no N does)
    tensor_parallel: int
    per_rank_total_bytes: int  # at that N, else at MAX_DATA_PARALLEL (the floor)
    model_parallel: int = 0  # GPUs per data-parallel rank: T x P x C (0: T alone)

    @property
    def total_gpus(self) -> int | None:
        if self.data_parallel is None:
            return None
        return self.data_parallel * (self.model_parallel or self.tensor_parallel)


def per_gpu_parts(rank: PerRankMemory) -> tuple[FitPart, ...]:
    """A rank's tensors, each kind of the model state with how it is split."""
    config = rank.config
    shard = _Shards.of(config)

    def split(part: DevicePart, size: int, shards: int) -> FitPart:
        return FitPart(part, SymInt.const(size), Split(shards, config.tensor_parallel))

    ring = ((FitPart(DevicePart.RING_ATTENTION, SymInt.const(rank.ring_attention_bytes)),)
            if rank.ring_attention_bytes else ())
    return (
        split(DevicePart.PARAMETERS, rank.parameters_bytes, shard.parameters),
        split(DevicePart.GRADIENTS, rank.gradients_bytes, shard.gradients),
        split(DevicePart.OPTIMIZER_STATE, rank.optimizer_state_bytes, shard.optimizer),
        split(DevicePart.TEMPORARIES, rank.temporaries_bytes, shard.optimizer),
        FitPart(DevicePart.ACTIVATIONS, SymInt.const(rank.activations_bytes)),
        FitPart(DevicePart.GATHERED, SymInt.const(rank.gathered_bytes)),
        FitPart(DevicePart.BUCKETS, SymInt.const(rank.buckets_bytes)),
        *ring,
    )


def per_rank_memory(profile: TrainingProfile, config: DistributedConfig) -> PerRankMemory:
    config.check()
    shard = _Shards.of(config)
    tp = _TensorSplit.of(profile.parameters, config.tensor_parallel)
    layout = _Layout.of(profile, config.layout, tp)
    params = _sharded_params(profile.parameters, config, shard, tp, layout)
    optimizer = _div(layout.optimizer_bytes(profile), shard.optimizer)
    extra_grads = _div(layout.fp32_grad_partition_bytes, shard.optimizer)
    step, (grads, temps, acts) = _peak_step(profile, config, shard, tp, layout)
    grads += extra_grads
    return PerRankMemory(
        config=config, parameters_bytes=params, gradients_bytes=grads,
        optimizer_state_bytes=optimizer, temporaries_bytes=temps, activations_bytes=acts,
        gathered_bytes=_gathered_bytes(profile.parameters, config, tp, layout),
        buckets_bytes=_buckets_bytes(profile, config, tp, layout),
        peak_step=step, peak_node=profile.order[step],
        model_states_bytes=params + optimizer + extra_grads + _div(
            profile.gradient_bytes * layout.grad_scale, shard.gradients),
        split_parameter_share=tp.split_share, replicated_matmul_weights=tp.replicated)


def _peak_step(profile: TrainingProfile, config: DistributedConfig, shard: _Shards,
               tp: _TensorSplit, layout: _Layout) -> tuple[int, tuple[int, int, int]]:
    """The step where gradients + temporaries + activations per rank are largest (the other
    parts are resident: the same at every step), with those three parts there."""
    grads = _scaler(layout.grad_scale, shard.gradients)
    if config.strategy == Strategy.DDP and config.ddp_gradient_as_bucket_view:
        # The gradients are views of the buckets, which exist whole from the start.
        full = profile.gradient_bytes
        grads = _scaler(layout.grad_scale, 1)
        parts_g = (full,) * len(profile.order)
    else:
        parts_g = profile.part_bytes[Part.GRADIENTS]
    temps = _scaler(tp.state_scale, shard.optimizer)
    split = _scaler(Fraction(1), config.tensor_parallel)
    parts = profile.part_bytes
    best = (-1, 0, (0, 0, 0))
    for step, (g, t, a, s) in enumerate(zip(
            parts_g, parts[Part.TEMPORARIES], parts[Part.ACTIVATIONS],
            parts[Part.SPLIT_ACTIVATIONS], strict=True)):
        rank = (grads(g), temps(t), a + split(s))
        if sum(rank) > best[0]:
            best = (sum(rank), step, rank)
    return best[1], best[2]


def split_parameter_count(parameters: tuple[ParameterInfo, ...], tensor_parallel: int) -> int:
    """Parameter elements on one tensor-parallel rank: split weights / T, the rest whole."""
    split = _TensorSplit.of(parameters, tensor_parallel)
    return ceil(sum((split.numel(p) for p in parameters), Fraction(0)))


def _scaler(scale: Fraction, parts: int) -> Callable[[int], int]:
    """bytes -> ceil(bytes * scale / parts), in integers (called once per step)."""
    numerator, denominator = scale.numerator, scale.denominator * parts
    return lambda size: -(-size * numerator // denominator)


def fit_by_strategy(profile: TrainingProfile, config: DistributedConfig,
                    usable_bytes: int,
                    rank: Callable[[DistributedConfig], PerRankMemory] | None = None
                    ) -> tuple[StrategyFit, ...]:
    """For each strategy, the smallest N whose per-rank total fits `usable_bytes`; `rank`
    gives the (most-loaded) rank of a config (default: per_rank_memory of `profile`).

    The per-rank total never grows with N (every sharded part is ceil(bytes / N), the rest is
    constant), so a binary search over N finds the smallest.
    """
    rows = []
    of = rank or (lambda c: per_rank_memory(profile, c))
    for strategy in Strategy:
        def total(n: int, strategy: Strategy = strategy) -> int:
            return of(replace(config, strategy=strategy, gpus=n)).total_bytes
        floor = total(MAX_DATA_PARALLEL)
        smallest = None if floor > usable_bytes else _smallest_fitting(total, usable_bytes)
        rows.append(StrategyFit(strategy, smallest, config.tensor_parallel,
                                total(smallest) if smallest else floor,
                                config.total_gpus // config.gpus))
    return tuple(rows)


def _smallest_fitting(total: object, usable_bytes: int) -> int:
    low, high = 1, MAX_DATA_PARALLEL  # total(high) fits
    while low < high:
        middle = (low + high) // 2
        if total(middle) <= usable_bytes:  # type: ignore[operator]
            high = middle
        else:
            low = middle + 1
    return low


def _div(value: int | Fraction, parts: int) -> int:
    """Bytes per rank of `value` bytes split in `parts` (the last rank's padded share)."""
    return ceil(Fraction(value) / parts)


@dataclass(frozen=True)
class _Shards:
    """Over how many ranks each part of the model state is split."""

    parameters: int
    gradients: int
    optimizer: int  # optimizer state, its temporaries, master weights, fp32 grad partition

    @staticmethod
    def of(config: DistributedConfig) -> _Shards:
        n = config.gpus
        return {
            Strategy.DDP: _Shards(1, 1, 1),
            Strategy.ZERO1: _Shards(1, 1, n),
            Strategy.ZERO2: _Shards(1, n, n),
            Strategy.ZERO3: _Shards(n, n, n),
            Strategy.FSDP: _Shards(n, n, n),
            Strategy.DISTRIBUTED_OPTIMIZER: _Shards(1, 1, n),
        }[config.strategy]


@dataclass(frozen=True)
class _TensorSplit:
    """Which parameters tensor parallelism splits, and the share of the bytes that leaves."""

    degree: int
    split_names: frozenset[str]
    replicated: tuple[str, ...]
    split_share: Fraction  # split parameter bytes / all parameter bytes

    @staticmethod
    def of(parameters: tuple[ParameterInfo, ...], degree: int) -> _TensorSplit:
        split = [p for p in parameters if p.splittable
                 and any(d % degree == 0 for d in p.shape)] if degree > 1 else []
        replicated = tuple(p.name for p in parameters if degree > 1 and p.splittable
                           and p not in split)
        total = sum(p.nbytes for p in parameters)
        share = Fraction(sum(p.nbytes for p in split), total) if total else Fraction(0)
        return _TensorSplit(degree, frozenset(p.name for p in split), replicated, share)

    def numel(self, parameter: ParameterInfo) -> Fraction:
        return Fraction(parameter.numel, self.degree if parameter.name in self.split_names else 1)

    @property
    def state_scale(self) -> Fraction:
        """Gradients, optimizer state and temporaries follow their parameters."""
        return 1 - self.split_share + self.split_share / self.degree


@dataclass(frozen=True)
class _Layout:
    """Bytes per element of the model states under a precision layout."""

    name: str
    param_bytes: dict[str, Fraction]  # parameter name -> bytes on this rank before sharding
    grad_scale: Fraction  # traced gradient bytes -> this layout's gradient bytes (with TP)
    master_bytes: Fraction  # fp32 master copy in the optimizer (0 in the traced layout)
    fp32_grad_partition_bytes: Fraction  # DeepSpeed's fp32 gradients (deepspeed layout)
    state_scale: Fraction

    @staticmethod
    def of(profile: TrainingProfile, name: str, tp: _TensorSplit) -> _Layout:
        numel = {p.name: tp.numel(p) for p in profile.parameters}
        elements = sum(numel.values(), Fraction(0))
        if name == "traced":
            param_bytes = {p.name: tp.numel(p) * p.nbytes / p.numel for p in profile.parameters}
            return _Layout(name, param_bytes, tp.state_scale, Fraction(0), Fraction(0),
                           tp.state_scale)
        # Gradients have their parameter's dtype: in half precision they shrink by the same
        # ratio as the parameters (Megatron-LM's are fp32, in its main_grad buffer).
        grad_bytes = FP32_BYTES if name == "megatron" else HALF_BYTES
        grad_ratio = Fraction(grad_bytes * profile.parameter_count, profile.parameter_bytes or 1)
        fp32_grads = FP32_BYTES * elements if name == "deepspeed" else Fraction(0)
        return _Layout(name, {k: HALF_BYTES * v for k, v in numel.items()},
                       tp.state_scale * grad_ratio, FP32_BYTES * elements, fp32_grads,
                       tp.state_scale)

    def optimizer_bytes(self, profile: TrainingProfile) -> Fraction:
        resident = max(profile.part_bytes[Part.OPTIMIZER_STATE])  # resident: the same each step
        return resident * self.state_scale + self.master_bytes

    @property
    def working_bytes(self) -> Fraction:
        """All parameters, whole, in the dtype the forward and backward read them in."""
        return sum(self.param_bytes.values(), Fraction(0))


def _sharded_params(parameters: tuple[ParameterInfo, ...], config: DistributedConfig,
                    shard: _Shards, tp: _TensorSplit, layout: _Layout) -> int:
    if shard.parameters == 1:
        return ceil(layout.working_bytes)
    threshold = config.zero.param_persistence_threshold if config.strategy == Strategy.ZERO3 else 0
    # ZeRO-3 keeps parameters below the persistence threshold whole on every rank.
    persistent = sum((layout.param_bytes[p.name] for p in parameters
                      if tp.numel(p) < threshold), Fraction(0))
    return ceil(persistent) + _div(layout.working_bytes - persistent, shard.parameters)


def _gathered_bytes(parameters: tuple[ParameterInfo, ...], config: DistributedConfig,
                    tp: _TensorSplit, layout: _Layout) -> int:
    if config.strategy == Strategy.ZERO3:
        return ceil(_zero3_gathered(parameters, config, tp, layout))
    if config.strategy == Strategy.FSDP:
        units = sorted(_fsdp_unit_bytes(parameters, config.fsdp_unit_depth, layout).values(),
                       reverse=True)
        return ceil(sum(units[:2], Fraction(0)))  # the unit in use and the one prefetched
    return 0


def _zero3_gathered(parameters: tuple[ParameterInfo, ...], config: DistributedConfig,
                    tp: _TensorSplit, layout: _Layout) -> Fraction:
    """The largest module's own parameters plus the prefetch bucket, at most
    stage3_max_live_parameters (never less than that module), and at most every partitioned
    parameter, in the working dtype."""
    settings = config.zero
    partitioned = [p for p in parameters if tp.numel(p) >= settings.param_persistence_threshold]
    if not partitioned:
        return Fraction(0)
    by_module: dict[str, Fraction] = {}
    for p in partitioned:
        by_module[p.module] = by_module.get(p.module, Fraction(0)) + tp.numel(p)
    largest = max(by_module.values())
    elements = min(largest + settings.prefetch_bucket_size,
                   max(largest, Fraction(settings.max_live_parameters)),
                   sum((tp.numel(p) for p in partitioned), Fraction(0)))
    bytes_per_element = sum((layout.param_bytes[p.name] for p in partitioned), Fraction(0)) / sum(
        (tp.numel(p) for p in partitioned), Fraction(0))
    return elements * bytes_per_element


def _fsdp_unit_bytes(parameters: tuple[ParameterInfo, ...], depth: int,
                     layout: _Layout) -> dict[str, Fraction]:
    units: dict[str, Fraction] = {}
    for p in parameters:
        key = module_at_depth(p.module, depth)
        units[key] = units.get(key, Fraction(0)) + layout.param_bytes[p.name]
    return units


def _buckets_bytes(profile: TrainingProfile, config: DistributedConfig, tp: _TensorSplit,
                   layout: _Layout) -> int:
    all_grads = profile.gradient_bytes * layout.grad_scale  # every gradient, this layout
    if config.strategy == Strategy.DDP:
        # The reducer allocates one flat `gradients` tensor per bucket covering all of its
        # parameters: a second copy of every gradient, unless gradient_as_bucket_view.
        return 0 if config.ddp_gradient_as_bucket_view else ceil(all_grads)
    if config.strategy == Strategy.DISTRIBUTED_OPTIMIZER:
        # Megatron-LM's DDP: gradients live in its contiguous grad buffer and are
        # reduce-scattered in place (counted as gradients); parameters are views of its
        # param buffer, all-gathered in place
        return 0
    if config.strategy == Strategy.FSDP:
        # The unsharded gradient of one unit exists until its reduce-scatter.
        # Gradients have their parameters' dtype: a unit's gradient is its working bytes.
        units = _fsdp_unit_bytes(profile.parameters, config.fsdp_unit_depth, layout)
        return ceil(max(units.values(), default=Fraction(0)))
    # ZeRO: the contiguous reduce buffer of reduce_bucket_size elements in the gradient dtype,
    # doubled with overlap_comm in stages 1 and 2 (stage_1_and_2.py backward: ipg_buffer).
    elements = sum((tp.numel(p) for p in profile.parameters), Fraction(0))
    grad_element_bytes = all_grads / elements if elements else Fraction(0)
    overlap = config.zero.overlap_comm
    if overlap is None:
        overlap = config.strategy == Strategy.ZERO3
    copies = 2 if overlap and config.strategy != Strategy.ZERO3 else 1
    return ceil(config.zero.reduce_bucket_size * grad_element_bytes * copies)
