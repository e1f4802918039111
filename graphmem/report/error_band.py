"""The verdict's measured error band in words and as JSON, for every report alike.

Read from the verdict (graphmem/passes/fit.py `GpuFit.error_band`, `GpuFit.tight`); nothing is
recomputed here."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a GPU's verdict and runtime model: imported where the analysis has one
    from graphmem.devices.error_bands import ErrorBand
    from graphmem.passes.fit import GpuFit

_PATH_WORDS = {"ort-cuda": "onnxruntime CUDA", "torch-cuda-inference": "torch-cuda inference",
               "torch-cuda-training": "torch-cuda training", "serving": "the serving plan",
               "per-rank": "the per-rank plan"}


def range_text(band: ErrorBand) -> str:
    """`-55.7% to +6.6%`; `unmeasured` for a path never measured on a GPU."""
    if band.low_fraction is None or band.high_fraction is None:
        return "unmeasured"
    return f"{_percent(band.low_fraction)} to {_percent(band.high_fraction)}"


def _percent(error: Fraction) -> str:
    return f"{float(error):+.1%}" if error else "0%"


def band_text(band: ErrorBand) -> str:
    """The band with where it comes from, in one sentence."""
    path = _PATH_WORDS[band.path]
    if not band.measured:
        return f"Error band unmeasured for {path}: {band.reason}"
    assert band.gpu is not None and band.date is not None
    return (f"Measured error {range_text(band)} for {path} on an {band.gpu.full_name},"
            f" {band.date.isoformat()} ({band.source})")


def tight_text(fit: GpuFit) -> str:
    """`tight: within the -55.7% to +6.6% measured error of torch-cuda training on an NVIDIA
    H100 SXM5 80 GB`; "" unless the verdict is tight."""
    band = fit.error_band
    if not fit.tight or band is None or band.gpu is None:
        return ""
    return (f"tight: within the {range_text(band)} measured error of {_PATH_WORDS[band.path]}"
            f" on an {band.gpu.full_name}")


def band_json(fit: GpuFit) -> dict[str, Any] | None:
    """JSON `gpu.error_band`: low and high as fractions (predicted / measured - 1), null where
    unmeasured; null where no band applies."""
    band = fit.error_band
    if band is None:
        return None
    low, high = band.low_fraction, band.high_fraction
    return {
        "path": band.path,
        "measured": band.measured,
        "low": None if low is None else float(low),
        "high": None if high is None else float(high),
        "gpu": band.gpu.name if band.gpu is not None else None,
        "date": band.date.isoformat() if band.date is not None else None,
        "source": band.source or None,
        "quantity": band.quantity or None,
        "reason": band.reason or None,
        "text": band_text(band),
    }
