"""`graphmem check --json`: the verdict of every budget, and each model's whole analysis.

    {"schema_version": 1, "kind": "graphmem check", "graphmem_version": ..., "passed": bool,
     "exit_code": 0 | 1, "budget_count": N, "failure_count": F,
     "models": [{"name", "path", "gpu", "dims", "passed", "seconds",
                 "budgets": [{"name", "value", "limit", "unit", "passed", "message"}],
                 "per_rank": null | {"strategy", "data_parallel", "tensor_parallel",
                     "pipeline_parallel", "context_parallel", "expert_parallel",
                     "most_loaded_stage", "parameters", "device_total_bytes", "description",
                     "ranks": [{"stage", "parameters", "device_total_bytes", "most_loaded"}]},
                 "kv_cache": null | {"context", "per_token_bytes", "sequence_bytes",
                     "sequences", "layer_groups": [{"type", "layers", "tokens", "bytes"}]},
                 "analysis": <the `graphmem analyze --json` object>}]}

An infinite growth (from a baseline value of 0) is written as null. A check JSON with one
model is a valid `--baseline` for the next check.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphmem.core.json_schema import CHECK_KIND, SCHEMA_VERSION
from graphmem.core.output_files import write_output_text
from graphmem.core.version import __version__
from graphmem.report.json.report import to_dict

if TYPE_CHECKING:  # gate/check.py reads baselines, whose schema is defined here
    from graphmem.gate.budgets import BudgetResult, ModelNumbers
    from graphmem.gate.check import CheckReport, ModelCheck
    from graphmem.gate.ranks import RankNumbers



def check_to_dict(report: CheckReport) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": CHECK_KIND,
        "graphmem_version": __version__,
        "passed": report.passed,
        "exit_code": 0 if report.passed else 1,
        "budget_count": report.budget_count,
        "failure_count": report.failure_count,
        "models": [_model(m) for m in report.models],
    }


def _model(model: ModelCheck) -> dict[str, Any]:
    return {
        "name": model.spec.label,
        "path": str(model.spec.model_path),
        "gpu": model.numbers.gpu_name,
        "dims": model.numbers.dims,
        "passed": model.passed,
        "seconds": round(model.seconds, 3),
        "budgets": [_budget(r) for r in model.results],
        "per_rank": _per_rank(model.numbers.rank),
        "kv_cache": _kv_cache(model.numbers),
        "analysis": to_dict(model.analysis),
    }


def _per_rank(rank: RankNumbers | None) -> dict[str, Any] | None:
    """A training job's most-loaded rank (its device total is what max_memory and margin
    read) and every pipeline rank; null for a single-GPU run."""
    if rank is None:
        return None
    return {"strategy": rank.strategy, "data_parallel": rank.data_parallel,
            "tensor_parallel": rank.tensor_parallel,
            "pipeline_parallel": rank.pipeline_parallel,
            "context_parallel": rank.context_parallel, "expert_parallel": rank.expert_parallel,
            "most_loaded_stage": rank.stage, "parameters": rank.parameters,
            "device_total_bytes": rank.device_total_bytes, "description": rank.description,
            "ranks": [{"stage": r.stage, "parameters": r.parameters,
                       "device_total_bytes": r.device_total_bytes,
                       "most_loaded": r.most_loaded} for r in rank.ranks]}


def _kv_cache(numbers: ModelNumbers) -> dict[str, Any] | None:
    """The served KV cache per layer type (what min_sequences reads); null unserved."""
    if numbers.serving_sequences is None:
        return None
    return {"context": numbers.serving_context,
            "per_token_bytes": numbers.serving_per_token_bytes,
            "sequence_bytes": numbers.serving_sequence_bytes,
            "sequences": numbers.serving_sequences,
            "layer_groups": [{"type": use.label, "layers": use.layers, "tokens": use.tokens,
                              "bytes": use.bytes} for use in numbers.serving_groups]}


def _budget(result: BudgetResult) -> dict[str, Any]:
    return {
        "name": result.name,
        "value": _finite(result.value),
        "limit": _finite(result.limit),
        "unit": result.unit,
        "passed": result.passed,
        "message": result.message,
    }


def _finite(value: float) -> float | int | None:
    if math.isinf(value) or math.isnan(value):
        return None
    return int(value) if float(value).is_integer() else value


def check_json_text(report: CheckReport) -> str:
    return json.dumps(check_to_dict(report), indent=2) + "\n"


def write_check_json(report: CheckReport, path: Path) -> None:
    write_output_text(path, [check_json_text(report)])
