"""Fixtures shared by the test files (instead of test files importing each other)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
import pytest

# the shared helpers assert: have pytest explain their failures as it does a test's
pytest.register_assert_rewrite("tests.helpers")

from tests.helpers import mypy_run  # noqa: E402 (after the rewrite hook, as pytest asks)
from tests.helpers.samples import TINY_CNN  # noqa: E402
from tests.helpers.untrusted import recorded_opens  # noqa: E402
from tests.onnx_builders import mlp_model  # noqa: E402

# graphmem itself is imported in the fixtures: a module broken mid-change fails the tests that
# need it, not the collection of every test
if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis
    from tests.helpers.cli import Run

# fixtures that trace a PyTorch model: a test using one is marked `torch` (pyproject.toml markers)
TORCH_FIXTURES = frozenset({"training"})
# every way into an analysis, which the `work` fixture replaces: the commands and the API call
# them through their modules (`run.analyze(...)`), so replacing the attribute reaches every caller
ANALYSIS_ENTRIES = ("graphmem.pipeline.run.analyze", "graphmem.verify.onnx_run.verify_onnx",
                    "graphmem.verify.torch_run.verify_torch")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if TORCH_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.torch)


def pytest_collection_finish(session: pytest.Session) -> None:
    """mypy over the package starts now, in the background, where the session will run
    tests/test_typing.py's test of it (tests/helpers/mypy_run.py); not in a pytest-xdist
    worker (each collects every test): there the test starts it."""
    worker = hasattr(session.config, "workerinput")
    if not session.config.option.collectonly and not worker and any(
            item.nodeid == mypy_run.TEST for item in session.items):
        mypy_run.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    mypy_run.stop()


@pytest.fixture(autouse=True)
def no_report_left_in_the_working_folder() -> Iterator[None]:
    """A test that runs `analyze` without --html/--no-html writes ./<model>.graphmem.html into
    the folder the suite runs from (the checkout): fail it, and remove what it wrote."""
    before = set(Path.cwd().glob("*.graphmem.html"))
    yield
    left = set(Path.cwd().glob("*.graphmem.html")) - before
    for path in left:
        path.unlink()
    assert not left, (f"the test wrote {', '.join(sorted(p.name for p in left))} into the"
                      " working folder: give --no-html or an --html path under tmp_path")


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

    for entry in ANALYSIS_ENTRIES:
        monkeypatch.setattr(entry, forbidden(entry.rsplit(".", 1)[1]))
    return calls


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """graphmem's command line in-process: (exit code, stdout, stderr)."""
    from graphmem.cli.main import main

    def run_cli(*args: str | Path) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err
    return run_cli


@pytest.fixture
def collector_on() -> Iterator[None]:
    """Python's cycle collector on for the test, as it was after (core/collector.py's tests)."""
    was_enabled = gc.isenabled()
    gc.enable()
    yield
    if not was_enabled:
        gc.disable()


@pytest.fixture
def opened_paths() -> Iterator[list[str]]:
    """Every path Python opens during the test (tests/helpers/untrusted.py)."""
    with recorded_opens() as paths:
        yield paths


# ----- the tiny CNN analysed once per test module, for the HTML report's tests ------------------


@pytest.fixture(scope="module")
def training() -> Analysis:
    """tests/models.py's TinyCNN, a whole Adam training step at batch 4 on a T4 (torch.fx)."""
    pytest.importorskip("torch")
    from graphmem import analyze_torch
    from tests.models import TinyCNN

    return analyze_torch(TinyCNN(), ["4x3x32x32"], train=True, optimizer="adam", gpu="t4")


@pytest.fixture(scope="module")
def inference() -> Analysis:
    """samples/tiny_cnn.onnx at batch 8 on a T4."""
    from graphmem import analyze_onnx

    assert TINY_CNN is not None
    return analyze_onnx(TINY_CNN, batch=8, gpu="t4")
