"""verify's run folder (graphmem/verify/runners/onnxruntime_runner.py): it never holds a copy
of the model (the child reads the user's file), and it is gone on every path: the run
succeeded, the child reported an error (exit 2), the time limit killed the child, the child
died of a signal."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from graphmem.errors import GraphmemError
from graphmem.verify.runners import onnxruntime_runner as runner
from graphmem.verify.runners.onnxruntime_runner import InputSpec, RunLimits, run_onnx
from tests.helpers.samples import SAMPLES_DIR

pytestmark = [pytest.mark.slow, pytest.mark.ort]
INPUTS = (InputSpec("x", (2, 3, 32, 32), "float32"),)


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder every run folder is made in, empty before each test."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _model(tmp_path: Path) -> Path:
    return Path(shutil.copy(SAMPLES_DIR / "tiny_cnn.onnx", tmp_path / "model.onnx"))


def _seen_folder(monkeypatch: pytest.MonkeyPatch, before_run: Any = None) -> list[list[str]]:
    """What the run folder held after each child ended (its files' names)."""
    seen: list[list[str]] = []
    real = runner._bounded_run

    def spying(folder: Path, *args: Any) -> Any:
        if before_run is not None:
            before_run()
        try:
            return real(folder, *args)
        finally:
            seen.append(sorted(p.name for p in folder.iterdir()))

    monkeypatch.setattr(runner, "_bounded_run", spying)
    return seen


def test_a_run_holds_no_copy_and_leaves_nothing(tmp_path: Path, scratch: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _seen_folder(monkeypatch)
    measured = run_onnx(_model(tmp_path), INPUTS, threads=1)
    assert measured.nodes
    (names,) = seen
    assert "request.json" in names and not [n for n in names if n.endswith(".onnx")]
    assert list(scratch.iterdir()) == []


def test_an_error_in_the_child_leaves_nothing(tmp_path: Path, scratch: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # the file is replaced by garbage after the checks: the child's own read refuses it
    path = _model(tmp_path)
    _seen_folder(monkeypatch, before_run=lambda: path.write_bytes(b"\xff" * 64))
    with pytest.raises(GraphmemError, match="not a valid ONNX model"):
        run_onnx(path, INPUTS, threads=1)
    assert list(scratch.iterdir()) == []


def test_the_time_limit_leaves_nothing(tmp_path: Path, scratch: Path) -> None:
    with pytest.raises(GraphmemError, match=r"time limit of 0\.01 s"):
        run_onnx(_model(tmp_path), INPUTS, threads=1, limits=RunLimits(time_s=0.01))
    assert list(scratch.iterdir()) == []


def test_a_child_killed_by_a_signal_leaves_nothing(tmp_path: Path, scratch: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    real = subprocess.Popen

    def killed(argv: list[str], **options: Any) -> Any:  # the child dies as it starts
        return real([sys.executable, "-c", "import os, signal;"
                     " os.kill(os.getpid(), signal.SIGKILL)"], **options)

    monkeypatch.setattr(runner.subprocess, "Popen", killed)
    with pytest.raises(GraphmemError, match="ended with signal SIGKILL"):
        run_onnx(_model(tmp_path), INPUTS, threads=1)
    assert list(scratch.iterdir()) == []


_RUN_FOREVER = """
import sys
from pathlib import Path
from graphmem.verify.runners.onnxruntime_runner import InputSpec, RunLimits, run_onnx
run_onnx(Path(sys.argv[1]), (InputSpec("x", (2, 8), "float32"),), limits=RunLimits(300))
"""


def test_sigterm_kills_the_child_and_removes_the_folder(tmp_path: Path) -> None:
    """`kill PID` of a verify whose model loops without end: the child is killed and the run
    folder removed, as on Ctrl-C (Python's default for SIGTERM would leave both behind)."""
    import os
    import signal
    import time

    import onnx

    from tests.hostile_models import loop_forever

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    onnx.save(loop_forever(), tmp_path / "model.onnx")
    process = subprocess.Popen([sys.executable, "-c", _RUN_FOREVER, str(tmp_path / "model.onnx")],
                               env={**os.environ, "TMPDIR": str(scratch)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(scratch.glob("graphmem-verify-*/*")) and time.monotonic() < deadline:
        time.sleep(0.2)  # the run folder holds the request once the child is started
    (folder,) = scratch.glob("graphmem-verify-*")
    time.sleep(1.0)  # the child is running the Loop
    children = _processes_naming(folder)
    assert children, "the child is not running"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert "KeyboardInterrupt" in err  # the script does not catch it; graphmem's main does
    assert not list(scratch.iterdir())
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()
                and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()]


def _processes_naming(folder: Path) -> list[int]:
    """The processes whose command line names `folder` (verify's child)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if entry.name.isdigit() and str(folder) in command:
            found.append(int(entry.name))
    return found
