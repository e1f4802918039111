"""Fixtures shared by the test files (instead of test files importing each other)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from graphmem.cli.main import main
from tests.onnx_builders import mlp_model

Run = Callable[..., tuple[int, str, str]]
# the modules whose analysis entry points the `work` fixture replaces
ANALYSIS_MODULES = ("graphmem.pipeline.analysis", "graphmem.gate.check", "graphmem.cli.fits",
                    "graphmem.verify.onnx_run", "graphmem.frontends.torch.analyze",
                    "graphmem.verify.torch_run")


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    """tests/onnx_builders.py's MLP saved as mlp.onnx."""
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    return path


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every entry into the analysis, made to fail loudly (exit 3, recorded): a refused input
    must never reach it."""
    calls: list[str] = []

    def forbidden(name: str) -> Callable[..., object]:
        def run(*args: object, **kwargs: object) -> object:
            calls.append(name)
            raise AssertionError(f"{name} ran")  # an Exception: main() reports exit 3
        return run

    for module in ANALYSIS_MODULES:  # imported before any patch: each binds the real function
        importlib.import_module(module)
    monkeypatch.setattr("graphmem.pipeline.analysis.analyze_onnx", forbidden("analyze_onnx"))
    monkeypatch.setattr("graphmem.gate.check.analyze_onnx", forbidden("check"))
    monkeypatch.setattr("graphmem.cli.fits.analyze_onnx", forbidden("fits"))
    monkeypatch.setattr("graphmem.verify.onnx_run.verify_onnx", forbidden("verify_onnx"))
    monkeypatch.setattr("graphmem.frontends.torch.analyze.analyze_torch",
                        forbidden("analyze_torch"))
    monkeypatch.setattr("graphmem.verify.torch_run.verify_torch", forbidden("verify_torch"))
    return calls


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """graphmem's command line in-process: (exit code, stdout, stderr)."""
    def run_cli(*args: str | Path) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err
    return run_cli
