"""graphmem's onnxruntime CPU model next to onnxruntime's own measurement of the same run."""

from __future__ import annotations

from pathlib import Path

from graphmem import analyze_onnx
from graphmem.pipeline.runtime import runtime_estimate
from graphmem.verify.onnx_run import input_specs
from graphmem.verify.runners.onnxruntime_runner import run_onnx


def measure_all(path: Path, dims: dict[str, int] | None = None,
                level: str = "all") -> tuple[int, int]:
    """(graphmem's predicted mem_in_use_peak at `level`, onnxruntime's measured one)."""
    analysis = analyze_onnx(path, dims=dims, plan=False)
    estimate = runtime_estimate(analysis, "ort-cpu", None, threads=1, ort_optimization=level)
    run = run_onnx(path, input_specs(analysis), "cpu", level, 1)
    return estimate.runtime_peak_bytes, run.peak_bytes
