"""The JSON fields of the suggestions (graphmem/suggest/cards.py): `suggestions`, the budget they
aim at (`suggestion_budget`) and the checkpointing trade-off (`checkpoint_curve`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphmem.pipeline.analysis import Analysis

if TYPE_CHECKING:  # written where the analysis has them: their modules are loaded then
    from graphmem.suggest.cards import RuntimeLever, Suggestion
    from graphmem.suggest.search import PlanOutcome


def suggestions_json(analysis: Analysis) -> dict[str, Any]:
    """Each field None when suggestions were not asked for (--suggest)."""
    report = analysis.suggestions
    if report is None:
        return {"suggestions": None, "suggestion_budget": None, "checkpoint_curve": None,
                "runtime_options": None}
    return {
        "suggestions": [_suggestion(s) for s in report.suggestions],
        "suggestion_budget": {
            "budget_bytes": report.budget_bytes,
            "source": report.budget_source or None,
            "base_peak_bytes": report.base_peak_bytes,
            "notes": list(report.notes),
        },
        "checkpoint_curve": [_point(p) for p in report.checkpoint_curve],
        "runtime_options": [_lever(lever) for lever in report.runtime_levers],
    }


def _lever(lever: RuntimeLever) -> dict[str, Any]:
    """A runtime option re-analysed: device totals (not live-tensor peaks) and largest batches,
    with it and as analysed."""
    return {
        "option": lever.option,
        "setting": lever.setting,
        "device_total_bytes": lever.device_total_bytes,
        "base_device_total_bytes": lever.base_device_total_bytes,
        "saves_bytes": lever.saves_bytes,
        "max_batch": lever.max_batch,
        "base_max_batch": lever.base_max_batch,
        "fits": lever.fits,
    }


def _suggestion(suggestion: Suggestion) -> dict[str, Any]:
    return {
        "kind": suggestion.kind,
        "title": suggestion.title,
        "targets": list(suggestion.targets),
        "saves_bytes": suggestion.saves_bytes,
        "new_peak_bytes": suggestion.new_peak_bytes,
        "extra_flops": suggestion.extra_flops,
        "extra_time_s": suggestion.extra_time_s,
        "snippet": suggestion.snippet,
        "note": suggestion.note,
    }


def _point(outcome: PlanOutcome) -> dict[str, Any]:
    return {
        "modules": list(outcome.modules),
        "peak_bytes": outcome.peak_bytes,
        "extra_flops": outcome.extra_flops,
        "extra_time_s": outcome.extra_time_s,
    }
