"""Read a baseline: an earlier graphmem JSON (`analyze --json` or `check --json`).

Growth is measured against its peak memory, parameter count and FLOPs. Only schema version 1
is read, and only with every dim bound (with free dims its numbers are formulas).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from graphmem.errors import GraphmemError
from graphmem.gate.budgets import Baseline
from graphmem.reports.json_report import SCHEMA_VERSION


def load_baseline(path: Path, model_label: str | None = None) -> Baseline:
    """The baseline numbers in `path`; a check JSON with several models is matched by label."""
    data = _read_json(path)
    analysis = _analysis_dict(data, path, model_label)
    version = analysis.get("schema_version")
    if version != SCHEMA_VERSION:
        raise GraphmemError(
            f"baseline {path} has schema_version {version!r}; this graphmem reads version"
            f" {SCHEMA_VERSION}: regenerate it with 'graphmem analyze MODEL --json {path}'")
    try:
        free = analysis["dims"]["free"]
        numbers = (analysis["memory"]["peak_bytes"], analysis["params"]["count"],
                   analysis["flops"]["total"])
        dims = {str(k): int(v) for k, v in analysis["dims"]["bound"].items()}
        mode = str(analysis["config"]["mode"])
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise GraphmemError(f"baseline {path} lacks the field {error} of a graphmem JSON:"
                            " regenerate it with 'graphmem analyze MODEL --json FILE'") from None
    if free or not all(isinstance(n, int) for n in numbers):
        raise GraphmemError(
            f"baseline {path} was analyzed with unbound dims ({', '.join(free) or 'formulas'}):"
            " its numbers are formulas; regenerate it with the dims bound (--batch/--dim)")
    peak, params, flops = numbers
    return Baseline(source=str(path), dims=dims, mode=mode, peak_bytes=peak, params=params,
                    flops=flops)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise GraphmemError(f"baseline {path} does not exist: write one with 'graphmem analyze"
                            f" MODEL --batch N --json {path}'") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise GraphmemError(f"baseline {path} is not a graphmem JSON file ({error})") from None
    if not isinstance(data, dict):
        raise GraphmemError(f"baseline {path} is not a graphmem JSON file (not an object)")
    return data


def _analysis_dict(data: dict[str, Any], path: Path, label: str | None) -> dict[str, Any]:
    """The analysis in an analyze JSON, or one model's analysis in a check JSON."""
    models = data.get("models")
    if not isinstance(models, list):
        return data
    if len(models) == 1:
        return models[0].get("analysis") or {}
    matching = [m for m in models if m.get("name") == label]
    if len(matching) != 1:
        names = ", ".join(str(m.get("name")) for m in models)
        raise GraphmemError(f"baseline {path} holds {len(models)} models ({names}) and none is"
                            f" named '{label}': name the model the same, or give its own JSON")
    return matching[0].get("analysis") or {}
