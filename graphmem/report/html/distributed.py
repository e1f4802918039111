"""The HTML report's per-GPU (distributed training) and KV-cache sections, from
graphmem/distributed (DistributedReport, KvCacheReport)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from graphmem.core.safe_text import printable, printable_text
from graphmem.core.units import format_bytes
from graphmem.report.html.quantity import Quantity, bytes_quantity, percent
from graphmem.report.kv_layers import is_plain, per_token_formula, state_note
from graphmem.report.parallel_text import layout_text

if TYPE_CHECKING:  # rendered where the analysis has them: their modules are loaded then
    from graphmem.distributed.kv_cache import KvCacheReport
    from graphmem.distributed.ranks import DistributedReport, RankPlan
    from graphmem.distributed.strategies import StrategyFit

_LAYOUT_TEXT = {
    "traced": "model states as traced",
    "zero-paper": "2-byte params/grads + fp32 master in the optimizer (ZeRO paper)",
    "deepspeed": "DeepSpeed mixed precision (2 + 2 + 4 fp32 grads + 4 master + optimizer)",
    "megatron": "Megatron-LM mixed precision (2 + 4 fp32 grads + 4 master + optimizer)",
}


class RankView(NamedTuple):
    """One pipeline rank (every data-, tensor- and context-parallel rank of it alike)."""

    stage: int
    layers: str  # "0-15"
    holds: str
    parameters: int
    in_flight: int
    activations: Quantity
    total: Quantity
    most_loaded: bool


class SizedPart(NamedTuple):
    label: str
    size: Quantity
    percent: float  # of the total (0 when the total is 0)


class StrategyRow(NamedTuple):
    strategy: str
    gpus: int | None  # the fewest GPUs that fit; None: no count does
    data_parallel: int | None
    tensor_parallel: int
    per_gpu: Quantity  # at that count, else the floor (the unsharded part alone)
    fits: bool


class PerGpuView(NamedTuple):
    strategy: str
    data_parallel: int
    tensor_parallel: int
    total_gpus: int
    layout: str  # in words
    parts: tuple[SizedPart, ...]
    total: Quantity
    model_states: Quantity
    peak_step: int
    peak_node: str
    split_share: float | None  # of the parameter bytes split by tensor parallelism (T > 1)
    replicated_weights: tuple[str, ...]
    fit_rows: tuple[StrategyRow, ...]  # () without --gpu
    usable: Quantity | None  # one GPU's usable memory, with --gpu
    # with --gpu: the per-GPU device total the verdict reads, and what it adds to `total`
    allocator: Quantity | None = None
    context: Quantity | None = None
    nccl: Quantity | None = None  # NCCL's buffers, an estimate (0 on one GPU)
    device_total: Quantity | None = None
    layout_text: str = ""  # " x pipeline 2 (1f1b, 4 micro-batches) ..."
    ranks: tuple[RankView, ...] = ()  # with model parallelism: one per pipeline rank


def per_gpu_view(report: DistributedReport | None) -> PerGpuView | None:
    if report is None:
        return None
    rank, config = report.per_rank, report.per_rank.config
    # the parts of one GPU's peak, in the terminal's order (report/terminal/distributed.py)
    parts = (("parameters", rank.parameters_bytes), ("gradients", rank.gradients_bytes),
             ("optimizer state", rank.optimizer_state_bytes),
             ("optimizer temporaries", rank.temporaries_bytes),
             ("activations", rank.activations_bytes), ("gathered parameters", rank.gathered_bytes),
             ("communication buckets", rank.buckets_bytes),
             *((("ring attention K/V blocks", rank.ring_attention_bytes),)
               if rank.ring_attention_bytes else ()))
    with_gpu = report.usable_bytes is not None
    device_total = report.device_total_bytes
    return PerGpuView(
        strategy=str(config.strategy),
        data_parallel=config.gpus,
        tensor_parallel=config.tensor_parallel,
        total_gpus=config.total_gpus,
        layout=_LAYOUT_TEXT[config.layout],  # one of strategies.LAYOUTS
        parts=tuple(SizedPart(label, bytes_quantity(size), percent(size, rank.total_bytes))
                    for label, size in parts),
        total=bytes_quantity(rank.total_bytes),
        model_states=bytes_quantity(rank.model_states_bytes),
        peak_step=rank.peak_step,
        peak_node=printable(rank.peak_node),
        split_share=float(rank.split_parameter_share) if config.tensor_parallel > 1 else None,
        replicated_weights=tuple(map(printable, rank.replicated_matmul_weights)),
        fit_rows=tuple(map(_fit_row, report.fit_by_strategy)) if with_gpu else (),
        usable=bytes_quantity(report.usable_bytes) if report.usable_bytes is not None else None,
        allocator=_maybe(report.allocator_bytes if device_total is not None else None),
        context=_maybe(report.context_bytes),
        nccl=_maybe(report.nccl_bytes if device_total is not None and report.nccl_bytes
                    else None),
        device_total=_maybe(device_total),
        layout_text=layout_text(config.parallel),
        ranks=_ranks(report.plan) if report.plan is not None else (),
    )


def _ranks(plan: RankPlan) -> tuple[RankView, ...]:
    top = plan.most_loaded.stage
    return tuple(RankView(
        stage=row.stage,
        layers=" + ".join(f"{r.start}-{r.stop - 1}" if len(r) > 1 else str(r.start)
                          for r in row.layers if r) or "-",
        holds=", ".join(row.holds), parameters=row.parameter_count, in_flight=row.in_flight,
        activations=bytes_quantity(row.memory.activations_bytes),
        total=bytes_quantity(row.memory.total_bytes), most_loaded=row.stage == top)
        for row in plan.rows)


def _maybe(size: int | None) -> Quantity | None:
    return None if size is None else bytes_quantity(size)


def _fit_row(row: StrategyFit) -> StrategyRow:
    gpus = row.total_gpus if row.data_parallel is not None else None
    return StrategyRow(
        strategy=str(row.strategy),
        gpus=gpus,
        data_parallel=row.data_parallel,
        tensor_parallel=row.tensor_parallel,
        per_gpu=bytes_quantity(row.per_rank_total_bytes),
        fits=gpus is not None,
    )


class KvCacheView(NamedTuple):
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    dtype_bytes: int
    per_token: Quantity  # one token of one sequence
    batch: int | None
    per_token_at_batch: Quantity | None  # one token of the whole batch
    size: Quantity  # the cache at the batch: a formula in `context`
    copies: int
    max_context: int | None
    max_context_reason: str
    base: Quantity | None
    usable: Quantity | None
    source: str
    # per layer type, where not every layer is full attention (the lead's formula otherwise)
    layer_formula: str = ""
    state_note: str = ""  # "; 7 layers of state: ... per sequence", or nothing
    states_at_batch: int = 0  # the batch's states, whatever the context

    @property
    def per_token_text(self) -> str:
        """'1.0 KiB per token per sequence' rather than 1024*context."""
        return f"{self.per_token.text} per token per sequence"

    @property
    def at_batch_text(self) -> str:
        """The cache at the batch: '1.0 KiB x context tokens' rather than 1024*context."""
        if self.per_token_at_batch is None:
            return ""
        states = f"{format_bytes(self.states_at_batch)} of states"
        if not self.per_token_at_batch.probe:
            return f"{states}, whatever the context"
        tokens = f"{format_bytes(self.per_token_at_batch.probe)} \u00d7 context tokens"
        return f"{tokens} + {states}" if self.states_at_batch else tokens


def kv_cache_view(report: KvCacheReport | None) -> KvCacheView | None:
    if report is None:
        return None
    shape = report.shape
    return KvCacheView(
        layers=shape.layers, kv_heads=shape.kv_heads, head_dim=shape.head_dim,
        dtype=printable(shape.dtype),
        dtype_bytes=shape.dtype_bytes,
        per_token=bytes_quantity(shape.per_token_bytes),
        batch=report.batch,
        per_token_at_batch=None if report.batch is None else bytes_quantity(
            shape.per_token_bytes * report.batch),
        size=bytes_quantity(report.bytes),
        copies=report.copies,
        max_context=report.max_context,
        max_context_reason=printable_text(report.max_context_reason or ""),
        base=None if report.base_bytes is None else bytes_quantity(report.base_bytes),
        usable=None if report.usable_bytes is None else bytes_quantity(report.usable_bytes),
        source=printable_text(shape.source),
        layer_formula="" if is_plain(shape.groups) else printable_text(
            per_token_formula(shape.groups, shape.dtype_bytes)),
        state_note=state_note(shape.groups, shape.state_dtype_bytes or shape.dtype_bytes),
        states_at_batch=shape.state_bytes * (report.batch or 0),
    )
