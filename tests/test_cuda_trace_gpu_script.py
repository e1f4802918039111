"""benchmarks/cuda_trace_gpu.py on a machine without a CUDA device: it measures nothing, says
so and exits 0; with --gpu it prints the CUDA trace's predictions alone (no GPU number)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.torch]
SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "cuda_trace_gpu.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so the test means the same on every machine
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          check=False, env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin"})


def test_without_a_gpu_it_measures_nothing_and_exits_0() -> None:
    done = run()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no CUDA device: nothing measured"


def test_with_a_named_gpu_it_prints_predictions_and_no_measurement() -> None:
    done = run("--gpu", "a100-80gb", "--models", "TinyGPT")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| TinyGPT")]
    assert len(rows) == 6  # inference and five training steps
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[5:7] == ["-", "-"]  # measured, error: nothing made up
        assert int(cells[3].replace(",", "")) > 0
