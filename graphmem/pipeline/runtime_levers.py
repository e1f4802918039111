"""Runtime options that change what the GPU holds for the same model, each re-analysed: the
whole pipeline run again with the option, its device total and largest batch against the
analysis's (graphmem/suggest/cards.py `RuntimeLever`).

One today: onnxruntime's arena extended by request (`--ort-arena-extend same-as-requested`,
the CUDA provider's `arena_extend_strategy` kSameAsRequested) where the verdict reads
onnxruntime's CUDA model with its default power-of-two regions. Listed only where it helps;
where it does not, a note says what it would hold (regions by request can hold more: a freed
region too small for the next tensor, docs/runtime-models.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from graphmem.core.units import format_bytes
from graphmem.pipeline.analysis import Analysis, size_of
from graphmem.pipeline.request import Request, RuntimeOptions, SuggestOptions
from graphmem.runtime_models.vocabulary import ArenaExtend, Runtime

if TYPE_CHECKING:  # the suggestion cards: imported where suggestions were made
    from graphmem.suggest.cards import RuntimeLever

Analyze = Callable[[Request], Analysis]

ARENA_BY_REQUEST = "--ort-arena-extend same-as-requested"
ARENA_SETTING = ('providers=[("CUDAExecutionProvider", {"arena_extend_strategy":'
                 ' "kSameAsRequested"}), "CPUExecutionProvider"]')


def with_runtime_levers(analysis: Analysis, request: Request, analyze: Analyze) -> Analysis:
    """The suggestions with the runtime levers where suggestions were asked for, the verdict
    read (after the runtime model) and its runtime has a lever."""
    report = analysis.suggestions
    if report is None:
        return analysis
    levers, notes = runtime_levers(analysis, request, analyze)
    if not levers and not notes:
        return analysis
    return replace(analysis, suggestions=replace(report, runtime_levers=levers,
                                                 notes=(*report.notes, *notes)))


def runtime_levers(analysis: Analysis, request: Request, analyze: Analyze
                   ) -> tuple[tuple[RuntimeLever, ...], tuple[str, ...]]:
    """The levers that help, and a note for each one tried that does not."""
    options = request.runtime or RuntimeOptions()
    if analysis.fit is None:
        return (), ()
    from graphmem.pipeline.device_total import gpu_runtime  # a GPU's verdict was read

    if (gpu_runtime(analysis, options.name) != Runtime.ORT_CUDA
            or options.arena_extend is not ArenaExtend.NEXT_POWER_OF_TWO):
        return (), ()
    changed = analyze(replace(request, runtime=replace(
        options, arena_extend=ArenaExtend.SAME_AS_REQUESTED), suggest=SuggestOptions(False),
        sweep=None))
    lever = _lever(analysis, changed)
    if lever.helps:
        return (lever,), ()
    held = lever.device_total_bytes
    said = (f" ({format_bytes(held)} against {format_bytes(lever.base_device_total_bytes or 0)})"
            if held is not None else "")
    return (), (f"onnxruntime's arena extended by request ({ARENA_BY_REQUEST}) would not hold"
                f" less here{said}: keep its default",)


def _lever(base: Analysis, changed: Analysis) -> RuntimeLever:
    from graphmem.suggest.cards import RuntimeLever

    return RuntimeLever(
        option=ARENA_BY_REQUEST, setting=ARENA_SETTING,
        device_total_bytes=_device_total(changed), base_device_total_bytes=_device_total(base),
        max_batch=_max_batch(changed), base_max_batch=_max_batch(base),
        fits=changed.fit.fits if changed.fit is not None else None)


def _device_total(analysis: Analysis) -> int | None:
    fit = analysis.fit
    if fit is None or analysis.dims.free:
        return None
    total = size_of(fit.required_bytes)
    return total if isinstance(total, int) else None


def _max_batch(analysis: Analysis) -> int | None:
    result = analysis.max_batch
    return None if result is None else result.max_batch
