"""`graphmem analyze --suggest [--memory-budget 12GiB|80%]`: what to change so the model fits.

PyTorch models get every kind (checkpointing, AMP, batch, in-place, FC head, grouped conv),
each re-traced (graphmem/torch_suggestions.py); ONNX models get the graph-level kinds
(graphmem/suggestions.py). The budget is `--memory-budget` (a size, or a share of the GPU's
usable memory), else the usable memory of `--gpu`, else none (suggestions without a target).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from graphmem.errors import GraphmemError
from graphmem.gate.budgets import MemoryLimit, SpecError, parse_memory_limit

if TYPE_CHECKING:
    from graphmem.analysis import Analysis
    from graphmem.suggestions import Suggestion

ONNX_CHECKPOINT_NOTE = (
    "checkpointing suggestions need the model's modules re-traced with torch.utils.checkpoint:"
    " they are for PyTorch models (file.py:fn); for an ONNX training graph graphmem lists AMP,"
    " in-place, FC-head and grouped-conv suggestions only")


def add_suggest_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("suggestions (what to change so the model fits)")
    group.add_argument("--suggest", action="store_true",
                       help="suggest checkpointing (PyTorch --train), AMP, batch, in-place ops,"
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
    from graphmem.gpus import find_gpu
    from graphmem.passes.fit import CudaReserve, fit_on_gpu
    from graphmem.symbolic import SymInt

    reserve = None if cuda_reserve_bytes is None else CudaReserve(cuda_reserve_bytes, "given")
    usable = fit_on_gpu(find_gpu(gpu), SymInt.const(0), reserve).usable_bytes
    assert limit.fraction is not None
    return int(usable * limit.fraction)


def with_graph_suggestions(analysis: Analysis, budget: int | None,
                           rerun_with_amp: Callable[[str], Analysis]) -> Analysis:
    """Suggestions of an ONNX model's graph; for a training graph also AMP (the training graph
    rebuilt under autocast by `rerun_with_amp`), and a note that checkpointing is torch-only."""
    from graphmem.suggestions import amp_for, graph_report

    report = graph_report(analysis, budget)
    if analysis.training is not None:
        cards = report.suggestions
        if analysis.training.amp is None and not analysis.dims.free:
            amp = amp_for(analysis.fit.gpu if analysis.fit else None)
            cards = (onnx_amp_suggestion(analysis, rerun_with_amp(amp), amp), *cards)
        report = replace(report, suggestions=cards, notes=(*report.notes, ONNX_CHECKPOINT_NOTE))
    return replace(analysis, suggestions=report)


def onnx_amp_suggestion(base: Analysis, changed: Analysis, amp: str) -> Suggestion:
    from graphmem.suggestions import Suggestion

    new_peak = int(changed.liveness.peak_bytes)
    return Suggestion(
        "amp", f"autocast {amp}", (), int(base.liveness.peak_bytes) - new_peak, new_peak,
        int(changed.costs.total_flops) - int(base.costs.total_flops), None,
        f"graphmem analyze MODEL.onnx --train --amp {amp}  # or torch.autocast in the source",
        "the training step rebuilt from the graph under autocast (--amp; graphmem/passes/"
        "training.py) and analysed again; weights, gradients and optimizer state stay fp32")
