"""The measured error of each verdict path, read from data/error_bands.toml.

Each path (onnxruntime on CUDA, PyTorch inference and training steps, a serving plan, a
distributed job's rank) has one band: the lowest and highest error of graphmem's prediction
against the GPU in the latest measurement, the two rows that set it, the GPU and the results
file they come from; or, for a path never measured on a GPU, why not. This module only loads,
validates and looks the bands up; graphmem/passes/fit.py applies them to a verdict.
"""

from __future__ import annotations

import datetime
import functools
from dataclasses import dataclass
from fractions import Fraction
from importlib import resources
from typing import Any

from graphmem.devices.gpus import GpuSpec, find_gpu
from graphmem.errors import GraphmemError

ORIGIN = "graphmem/devices/data/error_bands.toml"
PATHS = ("ort-cuda", "torch-cuda-inference", "torch-cuda-training", "serving", "per-rank")
_SOURCE_FOLDER = "benchmarks/results/"
_MEASURED_KEYS = frozenset({"path", "measured", "gpu", "date", "source", "quantity", "low",
                            "high"})
_UNMEASURED_KEYS = frozenset({"path", "measured", "reason"})
_ROW_KEYS = frozenset({"case", "predicted", "measured"})


class ErrorBandTableError(GraphmemError):
    """The error band data file is malformed; the message names the file and the band."""


@dataclass(frozen=True)
class BandRow:
    """One measured row of a results table: graphmem's prediction and the GPU's number."""

    case: str  # the model, input and step, as the results file names them
    predicted_bytes: int
    measured_bytes: int

    @property
    def error(self) -> Fraction:
        """predicted / measured - 1: negative where the prediction was low."""
        return Fraction(self.predicted_bytes, self.measured_bytes) - 1


@dataclass(frozen=True)
class ErrorBand:
    """One verdict path's measured error; `measured` False: never measured on a GPU."""

    path: str  # one of PATHS
    measured: bool
    low: BandRow | None = None  # the most negative error (None: unmeasured)
    high: BandRow | None = None  # the most positive error, or a row at 0%
    gpu: GpuSpec | None = None
    date: datetime.date | None = None
    source: str = ""  # the results file, relative to the project's root
    quantity: str = ""  # what the GPU measured
    reason: str = ""  # why the path is unmeasured

    @property
    def low_fraction(self) -> Fraction | None:
        return None if self.low is None else self.low.error

    @property
    def high_fraction(self) -> Fraction | None:
        return None if self.high is None else self.high.error


@functools.cache
def load_error_bands() -> dict[str, ErrorBand]:
    """Every path's band, validated: path -> band."""
    text = (resources.files("graphmem.devices.data") / "error_bands.toml").read_text("utf-8")
    return parse_error_bands(text, ORIGIN)


def error_band(path: str) -> ErrorBand:
    """The band of one verdict path (one of PATHS)."""
    return load_error_bands()[path]


def runtime_band_path(runtime: str, training: bool) -> str | None:
    """The verdict path of a runtime model's device total; None: a runtime off the GPU."""
    if runtime == "torch-cuda":
        return "torch-cuda-training" if training else "torch-cuda-inference"
    return runtime if runtime in PATHS else None


def parse_error_bands(text: str, origin: str) -> dict[str, ErrorBand]:
    import tomllib  # read where a band is asked for (a GPU's verdict), not at every start

    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ErrorBandTableError(f"{origin}: not valid TOML: {error}") from error
    rows = document.get("band")
    if not isinstance(rows, list):
        raise ErrorBandTableError(f"{origin}: no [[band]] tables")
    bands = [_band(row, f"{origin} [[band]] #{index}") for index, row in enumerate(rows, 1)]
    paths = [band.path for band in bands]
    if sorted(paths) != sorted(PATHS):
        raise ErrorBandTableError(f"{origin}: needs one band for each of {', '.join(PATHS)};"
                                  f" found {', '.join(paths)}")
    return {band.path: band for band in bands}


def _band(row: Any, where: str) -> ErrorBand:
    if not isinstance(row, dict):
        raise ErrorBandTableError(f"{where}: should be a table")
    path = row.get("path")
    if path not in PATHS:
        raise ErrorBandTableError(f"{where}: path {path!r} is not one of {', '.join(PATHS)}")
    where = f"{where} ({path})"
    measured = row.get("measured")
    if not isinstance(measured, bool):
        raise ErrorBandTableError(f"{where}: measured = true or false")
    _known_keys(row, _MEASURED_KEYS if measured else _UNMEASURED_KEYS, where)
    if not measured:
        return ErrorBand(path, False, reason=_text(row, "reason", where))
    source = _text(row, "source", where)
    if not source.startswith(_SOURCE_FOLDER) or ".." in source or not source.endswith(".md"):
        raise ErrorBandTableError(f"{where}: source {source!r} should be a file of"
                                  f" {_SOURCE_FOLDER}")
    date = row.get("date")
    if not isinstance(date, datetime.date) or isinstance(date, datetime.datetime):
        raise ErrorBandTableError(f"{where}: date should be a day such as 2026-11-23")
    low, high = _row(row, "low", where), _row(row, "high", where)
    if not low.error <= 0 <= high.error:
        raise ErrorBandTableError(f"{where}: low's error should be <= 0 <= high's (found"
                                  f" {float(low.error):+.2%} and {float(high.error):+.2%})")
    return ErrorBand(path, True, low, high, find_gpu(_text(row, "gpu", where)), date, source,
                     _text(row, "quantity", where))


def _row(row: dict[str, Any], key: str, where: str) -> BandRow:
    value = row.get(key)
    if not isinstance(value, dict):
        raise ErrorBandTableError(f"{where}: {key} = {{ case, predicted, measured }}")
    _known_keys(value, _ROW_KEYS, f"{where} {key}")
    numbers = [value.get(name) for name in ("predicted", "measured")]
    counts = [n for n in numbers if isinstance(n, int) and not isinstance(n, bool) and n > 0]
    if len(counts) < len(numbers):
        raise ErrorBandTableError(f"{where}: {key}'s predicted and measured should be bytes > 0")
    return BandRow(_text(value, "case", f"{where} {key}"), counts[0], counts[1])


def _known_keys(row: dict[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(row) - known)
    missing = sorted(known - set(row))
    if unknown or missing:
        raise ErrorBandTableError(f"{where}: unknown keys {unknown}, missing keys {missing}")


def _text(row: dict[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ErrorBandTableError(f"{where}: {key} should be a non-empty string")
    return value
