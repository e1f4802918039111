"""Per-rank memory of a training job with model parallelism beyond tensor parallel: pipeline
stages (1F1B, interleaved or GPipe schedules), sequence, context and expert parallelism, each
stage's model states under the data-parallel strategy.

For pipeline rank r (its chunks from graphmem/distributed/stages.py):

    parameters            those its chunks hold (tied weights on each stage that reads them),
                          then split by tensor parallel, routed experts by expert parallel
    gradients, optimizer  the traced step's, times this rank's share of the parameter bytes
    state, temporaries    (they follow their parameters); with P > 1 every gradient of the
                          stage is resident (it accumulates over the M micro-batches)
    activations(step)     its chunks' live activations of one micro-batch at that step
                          + the saved activations of its other in-flight forwards
                          (graphmem/distributed/parallel.py `in_flight_forwards`)

then divided as strategies.py divides them (data parallel, tensor parallel), activations
split by T where tensor parallel splits them (with sequence parallel: all of them) and by C
(context parallel: each rank holds 1 / C of the sequence). Every data-, tensor- and
context-parallel rank of a stage holds the same: the plan has one row per pipeline rank, and
the most-loaded one is the job's per-GPU figure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from math import ceil

from graphmem.distributed.comm_buffers import NcclEstimate, ring_attention_bytes
from graphmem.distributed.experts import ExpertShard, shard_experts
from graphmem.distributed.model_states import Part, TrainingProfile
from graphmem.distributed.parallel import ParallelLayout, chunk_of_forward, in_flight_forwards
from graphmem.distributed.stages import ChunkActivations, StageCut
from graphmem.distributed.strategies import (
    DistributedConfig,
    PerRankMemory,
    StrategyFit,
    per_rank_memory,
    split_parameter_count,
)


@dataclass(frozen=True)
class RankRow:
    stage: int  # pipeline rank
    chunks: tuple[int, ...]  # model chunks on this rank (V of them)
    layers: tuple[range, ...]  # layer positions of each chunk
    in_flight: int  # chunk forwards whose activations it holds at once
    parameter_count: int  # elements on this rank after tensor and expert parallel
    holds: tuple[str, ...]  # what lies outside the layers: "embedding", "output layer", ...
    memory: PerRankMemory


@dataclass(frozen=True)
class RankPlan:
    layout: ParallelLayout
    layer_prefix: str
    layer_count: int
    tied: tuple[str, ...]  # parameters held by more than one stage
    experts: ExpertShard | None  # with expert parallel
    rows: tuple[RankRow, ...]
    attention_kv_bytes: int = 0  # the largest fused attention's K + V (ring attention's)
    # with expert parallel: the busiest EP rank's routed tokens over the traced step's
    routing_factor: Fraction = Fraction(1)

    @property
    def most_loaded(self) -> RankRow:
        """The rank with the largest total (the first of equals)."""
        return max(self.rows, key=lambda row: row.memory.total_bytes)


@dataclass(frozen=True)
class DistributedReport:
    per_rank: PerRankMemory
    usable_bytes: int | None  # of one GPU, with --gpu
    fit_by_strategy: tuple[StrategyFit, ...]  # empty without --gpu
    # with --gpu: what the device adds on every rank (the pipeline's verdict reads the sum)
    allocator_bytes: int | None = None  # the runtime model's allocator overhead
    context_bytes: int | None = None  # CUDA context + workspaces (or --cuda-reserve)
    plan: RankPlan | None = None  # with model parallelism: every pipeline rank (per_rank is
    # the most loaded)
    nccl: NcclEstimate | None = None  # NCCL's buffers per communicator (an estimate)

    @property
    def device_total_bytes(self) -> int | None:
        """The per-GPU device total the verdict reads: the most-loaded rank's (with no model
        parallelism beyond tensor parallel every rank holds the same parts)."""
        if self.context_bytes is None:
            return None
        return (self.per_rank.total_bytes + (self.allocator_bytes or 0) + self.context_bytes
                + self.nccl_bytes)

    @property
    def nccl_bytes(self) -> int:
        return self.nccl.total_bytes if self.nccl is not None else 0


def rank_plan(profile: TrainingProfile, cut: StageCut, config: DistributedConfig,
              routing_factor: Fraction = Fraction(1)) -> RankPlan:
    """`cut`'s routed-expert activations already scaled by `routing_factor` (the busiest
    expert-parallel rank's: graphmem/distributed/attach.py `routed_sizes`)."""
    layout = config.parallel
    experts = shard_experts(profile.parameters, cut.layers, layout.expert)
    rows = tuple(_rank_row(profile, cut, config, experts, rank)
                 for rank in range(layout.pipeline))
    return RankPlan(layout, cut.layers.prefix, cut.layers.count, cut.tied, experts, rows,
                    cut.attention_kv_bytes, routing_factor)


def _rank_row(profile: TrainingProfile, cut: StageCut, config: DistributedConfig,
              experts: ExpertShard | None, rank: int) -> RankRow:
    layout = config.parallel
    chunks = tuple(range(rank, layout.chunks, layout.pipeline))
    names = cut.parameters_of(chunks)
    parameters = tuple(p for p in profile.parameters if p.name in names)
    if experts is not None:
        parameters = experts.on_rank(parameters)
    share = Fraction(sum(p.nbytes for p in parameters), profile.parameter_bytes or 1)
    in_flight = in_flight_forwards(layout, rank)
    stage = TrainingProfile(profile.order, _parts(profile, cut, config, chunks, share, rank),
                            parameters, profile.single_gpu_peak_bytes)
    memory = per_rank_memory(stage, replace(config, parallel=ParallelLayout()))
    memory = replace(memory, config=config, ring_attention_bytes=ring_attention_bytes(
        cut.attention_kv_bytes, layout.context, config.tensor_parallel))
    return RankRow(rank, chunks, tuple(cut.chunks[c].layers for c in chunks), in_flight,
                   split_parameter_count(parameters, config.tensor_parallel),
                   _holds(cut, chunks, layout.chunks), memory)


def _parts(profile: TrainingProfile, cut: StageCut, config: DistributedConfig,
           chunks: tuple[int, ...], share: Fraction, rank: int) -> dict[Part, tuple[int, ...]]:
    layout = config.parallel
    steps = len(profile.order)
    parts = profile.part_bytes
    grads = parts[Part.GRADIENTS]
    if layout.pipeline > 1:  # accumulated over the micro-batches: all resident
        grads = (max(grads),) * steps
    whole, split = _activation_steps(cut, chunks, layout, rank)
    if layout.sequence_parallel:  # norms, dropout, residuals split by T too
        whole, split = (0,) * steps, tuple(w + s for w, s in zip(whole, split, strict=True))
    return {
        Part.PARAMETERS: (0,) * steps,  # per_rank_memory reads the parameter table
        Part.GRADIENTS: _scaled(grads, share),
        Part.OPTIMIZER_STATE: _scaled(parts[Part.OPTIMIZER_STATE], share),
        Part.TEMPORARIES: _scaled(parts[Part.TEMPORARIES], share),
        Part.ACTIVATIONS: _scaled(whole, Fraction(1, layout.context)),
        Part.SPLIT_ACTIVATIONS: _scaled(split, Fraction(1, layout.context)),
    }


def _activation_steps(cut: StageCut, chunks: tuple[int, ...], layout: ParallelLayout,
                      rank: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(whole, split) live bytes at each step: the working chunk's (the largest of the
    rank's chunks at that step) + the saved activations of the other in-flight forwards."""
    mine = [cut.chunks[c] for c in chunks]
    held = [cut.chunks[chunk_of_forward(layout, rank, k)]
            for k in range(in_flight_forwards(layout, rank) - 1)]
    return (_working(mine, "whole_steps", sum(c.saved_whole for c in held)),
            _working(mine, "split_steps", sum(c.saved_split for c in held)))


def _working(chunks: list[ChunkActivations], name: str, held: int) -> tuple[int, ...]:
    timelines = [getattr(chunk, name) for chunk in chunks]
    return tuple(max(values) + held for values in zip(*timelines, strict=True))


def _scaled(steps: tuple[int, ...], share: Fraction) -> tuple[int, ...]:
    return tuple(ceil(value * share) for value in steps)


def _holds(cut: StageCut, chunks: tuple[int, ...], count: int) -> tuple[str, ...]:
    """What a rank holds outside its layers, in words."""
    holds = []
    if 0 in chunks:
        holds.append("embedding")
    if count - 1 in chunks:
        holds.append("head + loss")
    if any(len(cut.parameter_chunks[name] & set(chunks)) < len(cut.parameter_chunks[name])
           and cut.parameter_chunks[name] & set(chunks) for name in cut.tied):
        holds.append("tied copy")
    return tuple(holds)
