"""The budgets file (`graphmem.toml`): defaults plus one `[[model]]` entry per model.

    [defaults]                      # optional; every key but path, name and baseline
    gpu = "t4"
    batch = 32
    max_memory = "90%"              # of the GPU's usable memory, or a size: "12GiB"
    fail_on_unsupported = true

    [[model]]
    path = "models/classifier.onnx" # relative to this file
    max_latency = "5ms"

    [[model]]
    name = "encoder"                # how reports name it (default: the file's stem)
    path = "models/encoder.onnx"
    dims = { seq = 512 }            # merged over the defaults' dims
    max_memory = "6GiB"             # a model's key replaces the default; false removes it
    baseline = "baselines/encoder.json"
    max_growth = "5%"

Unknown keys are errors (a typo must not silently drop a budget).
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from graphmem.errors import GraphmemError
from graphmem.gate.budgets import (
    Budgets,
    SpecError,
    parse_count,
    parse_latency_s,
    parse_memory_limit,
    parse_percent,
    parse_size,
)
from graphmem.gate.check import CheckSpec

_BUDGET_PARSERS: dict[str, Callable[[Any], Any]] = {
    "max_memory": parse_memory_limit,
    "max_latency": parse_latency_s,
    "max_params": parse_count,
    "max_flops": parse_count,
    "max_growth": parse_percent,
}
_SETTING_KEYS = {"gpu", "batch", "dims", "cuda_reserve", "fail_on_unsupported"}
_DEFAULT_KEYS = _SETTING_KEYS | set(_BUDGET_PARSERS)
_MODEL_KEYS = _DEFAULT_KEYS | {"path", "name", "baseline"}


def load_budgets_file(path: Path) -> list[CheckSpec]:
    """One CheckSpec per `[[model]]`, paths resolved against the file's folder."""
    table = _read_toml(path)
    _check_keys(table, {"defaults", "model"}, f"{path}")
    defaults = table.get("defaults", {})
    models = table.get("model")
    if not isinstance(defaults, dict):
        raise GraphmemError(f"{path}: [defaults] must be a table")
    _check_keys(defaults, _DEFAULT_KEYS, f"{path} [defaults]")
    if not isinstance(models, list) or not models:
        raise GraphmemError(f"{path} lists no model: add a [[model]] entry with path = ...")
    entries = [_entry(path, defaults, model, index) for index, model in enumerate(models, 1)]
    return _with_labels(path, entries)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise GraphmemError(f"budgets file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise GraphmemError(f"budgets file {path} cannot be read ({error})") from None
    except tomllib.TOMLDecodeError as error:
        raise GraphmemError(f"budgets file {path} is not valid TOML ({error})") from None


def _check_keys(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else (
                f"; known keys: {', '.join(sorted(allowed))}")
            raise GraphmemError(f"{where}: unknown key '{key}'{hint}")


def _entry(path: Path, defaults: Mapping[str, Any], model: Any, index: int
           ) -> tuple[Mapping[str, Any], CheckSpec]:
    where = f"{path} [[model]] #{index}"
    if not isinstance(model, dict):
        raise GraphmemError(f"{where} must be a table with path = ...")
    _check_keys(model, _MODEL_KEYS, where)
    if not isinstance(model.get("path"), str):
        raise GraphmemError(f"{where} needs path = \"model.onnx\" (relative to {path.name})")
    where = f"{where} ({model['path']})"
    merged = {**defaults, **model, "dims": {**defaults.get("dims", {}), **model.get("dims", {})}}
    folder = path.parent
    baseline = merged.get("baseline")
    spec = CheckSpec(
        model_path=folder / model["path"],
        label="",
        budgets=_budgets(merged, where),
        gpu=_typed(merged, "gpu", str, where),
        batch=_typed(merged, "batch", int, where),
        dims=_dims(merged["dims"], where),
        cuda_reserve_bytes=_parsed(merged, "cuda_reserve", parse_size, where),
        baseline_path=folder / _typed(merged, "baseline", str, where) if baseline else None,
    )
    return model, spec


def _budgets(merged: Mapping[str, Any], where: str) -> Budgets:
    return Budgets(
        max_memory=_parsed(merged, "max_memory", parse_memory_limit, where),
        max_latency_s=_parsed(merged, "max_latency", parse_latency_s, where),
        max_params=_parsed(merged, "max_params", parse_count, where),
        max_flops=_parsed(merged, "max_flops", parse_count, where),
        fail_on_unsupported=bool(_typed(merged, "fail_on_unsupported", bool, where)),
        max_growth=_parsed(merged, "max_growth", parse_percent, where),
    )


def _parsed(merged: Mapping[str, Any], key: str, parse: Callable[[Any], Any], where: str) -> Any:
    value = merged.get(key)
    if value is None or value is False:  # false removes a default budget
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise GraphmemError(f"{where}: {key} = {value!r} should be a string such as"
                            f" {_EXAMPLES.get(key, '...')!r}")
    try:
        return parse(value if isinstance(value, str) else str(value))
    except SpecError as error:
        raise GraphmemError(f"{where}: {key}: {error}") from None


_EXAMPLES = {"max_memory": "90%", "max_latency": "20ms", "max_params": "25M",
             "max_flops": "4.1G", "max_growth": "5%", "cuda_reserve": "700MiB"}


def _typed(merged: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = merged.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise GraphmemError(f"{where}: {key} = {value!r} should be a {kind.__name__}")
    return value


def _dims(dims: Any, where: str) -> dict[str, int]:
    if not isinstance(dims, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in dims.values()):
        raise GraphmemError(f"{where}: dims should be a table of integers, e.g."
                            " dims = { seq = 512 }")
    return {str(k): int(v) for k, v in dims.items()}


def _with_labels(path: Path, entries: list[tuple[Mapping[str, Any], CheckSpec]]
                 ) -> list[CheckSpec]:
    """Each model's name, or its file's stem (its relative path where stems repeat)."""
    stems = [Path(model["path"]).stem for model, _ in entries]
    labels = []
    for (model, _), stem in zip(entries, stems, strict=True):
        name = model.get("name")
        if name is not None and not isinstance(name, str):
            raise GraphmemError(f"{path}: name = {name!r} should be a string")
        labels.append(name or (stem if stems.count(stem) == 1 else model["path"]))
    return [replace(spec, label=label) for (_, spec), label in zip(entries, labels, strict=True)]
