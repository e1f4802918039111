"""The per-rank numbers of a training job a gate reads: the most-loaded rank's device total
(the one `analyze`'s verdict reads, graphmem/pipeline/verdict.py) and every pipeline rank's,
with the words that name the rank. Pure: no I/O.

Every rank's device total is its tensors (graphmem/distributed/ranks.py RankRow) plus what
the device adds on every rank alike (allocator overhead, CUDA context, NCCL buffers): the
verdict's total less the most-loaded rank's tensors, so the most-loaded row's total is the
verdict's number itself, not a second computation of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graphmem.distributed.ranks import RankRow
    from graphmem.pipeline.analysis import Analysis


@dataclass(frozen=True)
class RankTotal:
    """One pipeline rank (every data-, tensor- and context-parallel rank of it alike)."""

    stage: int
    parameters: int  # elements on the rank after tensor and expert parallel
    device_total_bytes: int
    most_loaded: bool


@dataclass(frozen=True)
class RankNumbers:
    """The training job's layout and its most-loaded rank."""

    strategy: str
    data_parallel: int
    tensor_parallel: int
    pipeline_parallel: int
    context_parallel: int
    expert_parallel: int
    stage: int  # the most-loaded pipeline rank (0 without pipeline parallel)
    parameters: int | None  # on the most-loaded rank (with a pipeline plan)
    device_total_bytes: int  # the verdict's number
    description: str  # "pipeline stage 0 of 2 (layers 0-15, embedding), TP shard 1/2, ..."
    ranks: tuple[RankTotal, ...] = ()  # with pipeline parallel: every stage

    @property
    def text(self) -> str:
        return f"the most-loaded rank ({self.description})"


def rank_numbers(analysis: Analysis) -> RankNumbers | None:
    """None without a distributed plan, without a GPU, or with dims free."""
    report, fit = analysis.distributed, analysis.fit
    if report is None or fit is None or not fit.required_bytes.is_constant:
        return None
    config = report.per_rank.config
    total = int(fit.required_bytes)
    shared = total - report.per_rank.total_bytes  # allocator, context, NCCL: every rank's
    layout = config.parallel
    plan = report.plan
    top = plan.most_loaded if plan is not None else None
    ranks = () if plan is None else tuple(
        RankTotal(row.stage, row.parameter_count, row.memory.total_bytes + shared,
                  row.stage == plan.most_loaded.stage) for row in plan.rows)
    words = [_stage_text(top, layout.pipeline)] if top is not None else []
    if config.tensor_parallel > 1:
        words.append(f"tensor-parallel shard 1/{config.tensor_parallel}")
    if layout.context > 1:
        words.append(f"1/{layout.context} of the sequence (context parallel)")
    if layout.expert > 1:
        words.append(f"1/{layout.expert} of the routed experts (expert parallel)")
    ranks_word = "rank" if config.gpus == 1 else "ranks"
    words.append(f"{config.strategy}, {config.gpus} data-parallel {ranks_word},"
                 f" {config.total_gpus} GPUs in all")
    return RankNumbers(str(config.strategy), config.gpus, config.tensor_parallel,
                       layout.pipeline, layout.context, layout.expert,
                       top.stage if top is not None else 0,
                       top.parameter_count if top is not None else None, total,
                       "; ".join(words), ranks)


def _stage_text(row: RankRow, stages: int) -> str:
    layers = " + ".join(f"{run.start}-{run.stop - 1}" if len(run) > 1 else str(run.start)
                        for run in row.layers if run) or "none"
    holds = "".join(f", {what}" for what in row.holds)
    return f"pipeline stage {row.stage} of stages 0-{stages - 1}: layers {layers}{holds}"

