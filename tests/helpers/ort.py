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


def measure_data_trips(path: Path, level: str, trips_input: str, seed: int = 0,
                       dims: dict[str, int] | None = None, high: int = 8
                       ) -> tuple[int, int, int]:
    """(graphmem's predicted mem_in_use_peak, onnxruntime's, the trip count) of a model whose
    Loop reads its M from the int64 scalar input `trips_input`: the run's inputs made up from
    `seed` (M in [0, high)), M's drawn value given to graphmem as the trip dim (`dims`: more)."""
    from dataclasses import replace

    from graphmem.frontends.onnx.control_flow import data_trip_dim
    from graphmem.verify.runners.onnxruntime_runner import random_feeds

    free = analyze_onnx(path, plan=False, dims=dims)
    specs = tuple(replace(s, high=high) if s.name == trips_input else s
                  for s in input_specs(free))
    trips = int(random_feeds(specs, seed)[trips_input].reshape(-1)[0])
    analysis = analyze_onnx(path, dims={**(dims or {}), data_trip_dim(trips_input): trips},
                            plan=False)
    estimate = runtime_estimate(analysis, "ort-cpu", None, threads=1, ort_optimization=level)
    run = run_onnx(path, specs, "cpu", level, 1, seed=seed)
    return estimate.runtime_peak_bytes, run.peak_bytes, trips
