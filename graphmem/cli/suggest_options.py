"""`graphmem analyze --suggest [--memory-budget 12GiB|80%]`: what to change so the model fits.

PyTorch models get every kind (checkpointing, AMP, batch, in-place, FC head, grouped conv),
each re-traced (graphmem/suggest/torch_step.py); ONNX models get the graph-level kinds
(graphmem/suggest/cards.py), and an ONNX training step (--train) also AMP and checkpointing,
each rebuilt from the graph and re-analysed (graphmem/suggest/onnx_step.py). The budget is
`--memory-budget` (a size, or a share of the GPU's usable memory), else the usable memory of
`--gpu`, else none (suggestions without a target).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from graphmem.errors import GraphmemError
from graphmem.gate.budgets import MemoryLimit, SpecError, parse_memory_limit

if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis
    from graphmem.suggest.cards import Suggestion

FREE_DIMS_CHECKPOINT_NOTE = ("checkpointing is searched with every dim bound: give --batch /"
                             " --dim NAME=VALUE")


def add_suggest_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("suggestions (what to change so the model fits)")
    group.add_argument("--suggest", action="store_true",
                       help="suggest checkpointing (--train), AMP, batch, in-place ops,"
                       " FC heads and grouped convs, each saving re-analysed")
    group.add_argument("--memory-budget", type=_memory_limit, metavar="LIMIT",
                       help="the peak to aim at: a size (12GiB) or a share of the --gpu's"
                       " usable memory (80%%); default: the GPU's usable memory. Implies"
                       " --suggest")


def _memory_limit(text: str) -> MemoryLimit:
    try:
        return parse_memory_limit(text)
    except SpecError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def wants_suggestions(args: argparse.Namespace) -> bool:
    return bool(args.suggest or args.memory_budget is not None)


def budget_bytes(limit: MemoryLimit | None, gpu: str | None,
                 cuda_reserve_bytes: int | None) -> int | None:
    """`--memory-budget` in bytes; a share needs the GPU (its usable memory, as the fit line)."""
    if limit is None:
        return None
    if limit.bytes is not None:
        if limit.bytes <= 0:
            raise GraphmemError(f"--memory-budget {limit.text}: give a size above 0")
        return limit.bytes
    if gpu is None:
        raise GraphmemError(f"--memory-budget {limit.text} is a share of the GPU's usable"
                            " memory: add --gpu NAME, or give a size such as 12GiB")
    from graphmem.core.symbolic import SymInt
    from graphmem.devices.gpus import find_gpu
    from graphmem.passes.fit import CudaReserve, fit_on_gpu

    reserve = None if cuda_reserve_bytes is None else CudaReserve(cuda_reserve_bytes, "given")
    usable = fit_on_gpu(find_gpu(gpu), SymInt.const(0), reserve).usable_bytes
    assert limit.fraction is not None
    return int(usable * limit.fraction)


def with_graph_suggestions(analysis: Analysis, budget: int | None,
                           rerun: Callable[..., Analysis]) -> Analysis:
    """Suggestions of an ONNX model's graph; for a training graph also checkpointing and AMP,
    each the training step rebuilt by `rerun(checkpoints=...)` / `rerun(amp=...)` (the same
    analysis with that one change) and analysed again."""
    from graphmem.suggest.cards import amp_for, graph_report
    from graphmem.suggest.onnx_step import onnx_checkpoint_plan

    report = graph_report(analysis, budget)
    if analysis.training is None:
        return replace(analysis, suggestions=report)
    if analysis.dims.free:
        return replace(analysis, suggestions=replace(
            report, notes=(*report.notes, FREE_DIMS_CHECKPOINT_NOTE)))
    gpu = analysis.fit.gpu if analysis.fit else None
    checkpoint = onnx_checkpoint_plan(analysis, report.budget_bytes,
                                      lambda targets: rerun(checkpoints=targets), gpu)
    cards = report.suggestions
    if analysis.training.amp is None:
        amp = amp_for(gpu)
        cards = (onnx_amp_suggestion(analysis, rerun(amp=amp), amp), *cards)
    if checkpoint.suggestion is not None:
        cards = (checkpoint.suggestion, *cards)
    return replace(analysis, suggestions=replace(report, suggestions=cards,
                                                 checkpoint_curve=checkpoint.plan.curve))


def onnx_amp_suggestion(base: Analysis, changed: Analysis, amp: str) -> Suggestion:
    from graphmem.suggest.cards import Suggestion

    new_peak = int(changed.liveness.peak_bytes)
    return Suggestion(
        "amp", f"autocast {amp}", (), int(base.liveness.peak_bytes) - new_peak, new_peak,
        int(changed.costs.total_flops) - int(base.costs.total_flops), None,
        f"graphmem analyze MODEL.onnx --train --amp {amp}  # or torch.autocast in the source",
        "the training step rebuilt from the graph under autocast (--amp; graphmem/passes/"
        "training.py) and analysed again; weights, gradients and optimizer state stay fp32")
