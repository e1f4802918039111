"""The model-parallel layout of a training job beside data parallelism: pipeline (P stages,
a schedule, M micro-batches, V virtual stages), context (C), expert (E) and sequence
parallelism, and how many micro-batches a pipeline rank holds in flight.

Pure arithmetic on the flags; the stages themselves come from the traced graph
(graphmem/distributed/stages.py) and the per-rank memory from graphmem/distributed/ranks.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphmem.core.routing import DEFAULT_ROUTING, MoeRouting
from graphmem.distributed.vocabulary import SCHEDULES
from graphmem.errors import GraphmemError

MAX_DEGREE = 1 << 16  # any parallel degree above this is a typo


@dataclass(frozen=True)
class ParallelLayout:
    """P, C, E, sequence parallel and the pipeline schedule (all 1 / off: no model
    parallelism beyond tensor parallel)."""

    pipeline: int = 1  # P stages
    context: int = 1  # C: the sequence split over C ranks (ring attention)
    expert: int = 1  # E: routed experts sharded over E ranks
    sequence_parallel: bool = False  # with tensor parallel: norms/dropout split by T
    micro_batches: int | None = None  # M per optimizer step (default: P)
    schedule: str = "1f1b"  # one of SCHEDULES
    virtual_stages: int = 1  # V model chunks per pipeline rank (interleaved)
    routing: MoeRouting = DEFAULT_ROUTING  # --moe-routing: the expert-parallel ranks' loads

    @property
    def is_trivial(self) -> bool:
        return (self.pipeline == 1 and self.context == 1 and self.expert == 1
                and not self.sequence_parallel)

    @property
    def chunks(self) -> int:
        """Model chunks: P x V consecutive groups of layers, chunk c on rank c mod P."""
        return self.pipeline * self.virtual_stages

    @property
    def micro_batch_count(self) -> int:
        return self.pipeline if self.micro_batches is None else self.micro_batches

    def check(self, tensor_parallel: int) -> None:
        for flag, value in (("--pipeline-parallel", self.pipeline),
                            ("--context-parallel", self.context),
                            ("--expert-parallel", self.expert),
                            ("--virtual-stages", self.virtual_stages),
                            ("--micro-batches", self.micro_batch_count)):
            if not 1 <= value <= MAX_DEGREE:
                raise GraphmemError(f"{flag} {value}: give a whole number from 1 to"
                                    f" {MAX_DEGREE}")
        if self.schedule not in SCHEDULES:
            raise GraphmemError(f"--pipeline-schedule {self.schedule}: choose one of"
                                f" {', '.join(SCHEDULES)}")
        if self.virtual_stages > 1 and self.schedule != "interleaved":
            raise GraphmemError(f"--virtual-stages {self.virtual_stages} goes with"
                                " --pipeline-schedule interleaved")
        if self.schedule == "interleaved" and self.micro_batch_count % self.pipeline:
            # megatron/core/pipeline_parallel/schedules.py refuses it the same way
            raise GraphmemError(f"--micro-batches {self.micro_batch_count}: the interleaved"
                                " schedule needs a multiple of --pipeline-parallel"
                                f" {self.pipeline} (as Megatron-LM does)")
        if self.sequence_parallel and tensor_parallel == 1:
            raise GraphmemError("--sequence-parallel splits activations over the tensor-"
                                "parallel ranks: add --tensor-parallel T (T > 1)")


def in_flight_forwards(layout: ParallelLayout, rank: int) -> int:
    """Forward passes of model chunks whose activations pipeline rank `rank` holds at once
    (its warm-up forwards and the steady state's one more).

    1F1B (PipeDream-flush; Megatron-LM's forward_backward_pipelining_without_interleaving):
    rank i of P runs P - i - 1 warm-up forwards, then alternates: min(P - i, M) in flight.
    Interleaved (forward_backward_pipelining_with_interleaving, V chunks per rank):
    (P - i - 1) x 2 + (V - 1) x P warm-up chunk forwards, + 1, at most M x V. For rank 0 that
    is P x V + P - 1 chunk forwards, P micro-batches x (1 + (P - 1) / (P x V)) of its
    layers: the interleaved penalty of Megatron-LM's theoretical_memory_usage.py.
    GPipe: every micro-batch's forward before any backward: M.
    """
    p, m, v = layout.pipeline, layout.micro_batch_count, layout.virtual_stages
    if layout.schedule == "gpipe":
        return m
    if layout.schedule == "interleaved":
        return min((p - rank - 1) * 2 + (v - 1) * p + 1, m * v)
    return min(p - rank, m)


def chunk_of_forward(layout: ParallelLayout, rank: int, forward: int) -> int:
    """The model chunk (0 .. P x V - 1) of rank `rank`'s `forward`-th chunk forward: the
    interleaved schedule runs P micro-batches through one local chunk, then the next."""
    local = (forward // layout.pipeline) % layout.virtual_stages
    return local * layout.pipeline + rank


def split_layers(layers: int, chunks: int) -> tuple[range, ...]:
    """Consecutive layers per chunk, as even as they go: the first `layers mod chunks`
    chunks take one more (as numpy.array_split; Megatron-LM splits evenly and refuses
    the rest)."""
    base, extra = divmod(layers, chunks)
    bounds, start = [], 0
    for chunk in range(chunks):
        size = base + (1 if chunk < extra else 0)
        bounds.append(range(start, start + size))
        start += size
    return tuple(bounds)
