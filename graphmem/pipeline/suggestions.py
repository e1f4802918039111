"""Suggestions on an Analysis: the request's options for the driver, and its changes as
re-runs of the pipeline (graphmem/suggest/driver.py asks; this module answers with
`analyze(replace(request, ...))`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.request import PooledHead, Request, rerun_request

if TYPE_CHECKING:
    from graphmem.suggest.cards import Analysed
    from graphmem.suggest.driver import Change

Analyze = Callable[[Request], Analysis]


def with_suggestions(analysis: Analysis, request: Request, analyze: Analyze) -> Analysis:
    """`analysis` with the suggestions the request asks for (or that are automatic: a
    training step over its budget); `analyze` is the pipeline, for the re-runs."""
    options = request.suggest
    if options.enabled is False:
        return analysis
    from graphmem.suggest.driver import SuggestInputs, suggest  # a command without them: unread

    inputs = SuggestInputs(
        traced=request.is_torch, training=analysis.training is not None,
        amp=analysis.training.amp if analysis.training else None,
        batch=_batch(analysis, request), budget_bytes=budget_bytes(analysis, request),
        enabled=options.enabled)

    def reanalyze(change: Change) -> Analysed | None:
        changed = changed_request(request, analysis, change)
        return None if changed is None else analyze(changed)

    report = suggest(analysis, inputs, reanalyze)
    return analysis if report is None else replace(analysis, suggestions=report)


def budget_bytes(analysis: Analysis, request: Request) -> int | None:
    """The budget in bytes; a share is of the GPU's usable memory, as the fit line says."""
    options = request.suggest
    if options.budget_share is not None and analysis.fit is not None:
        return int(analysis.fit.usable_bytes * options.budget_share)
    return options.budget_bytes


def changed_request(request: Request, base: Analysis, change: Change) -> Request | None:
    """The request for `base` with `change`; None where its front end cannot make it."""
    training = request.training
    if training is not None:
        checkpoints = training.checkpoints if change.checkpoints is None else change.checkpoints
        training = replace(training, amp=change.amp, checkpoints=checkpoints)
    changed = rerun_request(request, training=training)
    if change.batch is not None:
        changed = _at_batch(changed, base, change.batch)
    if change.pooled_head is not None:
        path, positions = change.pooled_head
        if not request.is_torch or not _can_pool(request, path, positions):
            return None
        changed = replace(changed, pooled_heads=(*changed.pooled_heads,
                                                 PooledHead(path, positions)))
    return changed


def _at_batch(request: Request, base: Analysis, batch: int) -> Request:
    if request.is_torch:
        from graphmem.frontends.torch.import_step import with_batch

        return replace(request, inputs=tuple(with_batch(request.inputs, batch)))
    batch_dim = base.dims.batch_dim
    assert batch_dim is not None  # the driver asks only where the analysis has a batch
    return replace(request, batch=None, dims={**base.dims.given, batch_dim: batch})


def _can_pool(request: Request, path: str, positions: int) -> bool:
    from graphmem.frontends.torch.rewrites import can_pool

    return can_pool(request.model, path, positions)


def _batch(analysis: Analysis, request: Request) -> int | None:
    """The analysed (micro-)batch: a traced step's, or an ONNX graph's bound batch dim."""
    if request.is_torch:
        return analysis.training.micro_batch if analysis.training else None
    dims = analysis.dims
    return dims.bound.get(dims.batch_dim) if dims.batch_dim is not None else None
