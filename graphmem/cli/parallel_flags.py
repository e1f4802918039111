"""`analyze --train` flags for model parallelism beyond --tensor-parallel: pipeline, context,
expert and sequence parallel, and the pipeline's schedule (graphmem/distributed/parallel.py)."""

from __future__ import annotations

import argparse

from graphmem.distributed.parallel import SCHEDULES, ParallelLayout

PARALLEL_FLAGS = ("pipeline_parallel", "context_parallel", "expert_parallel", "micro_batches",
          "pipeline_schedule", "virtual_stages")


def add_parallel_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--pipeline-parallel", type=int, metavar="P",
                       help="pipeline stages: the layers split into P consecutive stages;"
                       " each rank's in-flight micro-batches per --pipeline-schedule")
    group.add_argument("--micro-batches", type=int, metavar="M",
                       help="micro-batches per step through the pipeline (default P); the"
                       " traced batch is one micro-batch")
    group.add_argument("--pipeline-schedule", choices=SCHEDULES,
                       help="1f1b (default), interleaved (Megatron-LM's, with"
                       " --virtual-stages) or gpipe")
    group.add_argument("--virtual-stages", type=int, metavar="V",
                       help="model chunks per pipeline rank (interleaved schedule)")
    group.add_argument("--context-parallel", type=int, metavar="C",
                       help="the sequence split over C ranks (ring attention)")
    group.add_argument("--expert-parallel", type=int, metavar="E",
                       help="a mixture of experts' routed experts sharded over E ranks")
    group.add_argument("--sequence-parallel", action="store_true",
                       help="with --tensor-parallel: norm, dropout and residual activations"
                       " split by T too (Megatron-LM's sequence parallel)")


def wants_parallel(args: argparse.Namespace) -> bool:
    return args.sequence_parallel or any(getattr(args, f) is not None for f in PARALLEL_FLAGS)


def parallel_layout(args: argparse.Namespace) -> ParallelLayout:
    return ParallelLayout(
        pipeline=args.pipeline_parallel or 1, context=args.context_parallel or 1,
        expert=args.expert_parallel or 1, sequence_parallel=args.sequence_parallel,
        micro_batches=args.micro_batches, schedule=args.pipeline_schedule or (
            "interleaved" if args.virtual_stages else "1f1b"),
        virtual_stages=args.virtual_stages or 1)
