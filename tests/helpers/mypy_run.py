"""One mypy run over the package for tests/test_typing.py, started in the background as soon
as the session has collected that test (tests/conftest.py), so that its cold minute on a clean
clone (mypy reads torch's inline types too) overlaps the tests before it: pytest runs on one
core, mypy on the other. The test waits for the run's exit and reads its output; a session
that ends first (-x, an interrupt) stops it."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
TEST = "tests/test_typing.py::test_the_package_type_checks"

_run: tuple[subprocess.Popen[bytes], IO[bytes]] | None = None


def start() -> None:
    """Start `python -m mypy` (pyproject.toml's [tool.mypy]) in the checkout, once."""
    global _run
    if _run is None:
        # a file, not a pipe: a long report must not block mypy; closed by stop()
        output = tempfile.TemporaryFile()  # noqa: SIM115
        process = subprocess.Popen([sys.executable, "-m", "mypy"], cwd=ROOT, stdout=output,
                                   stderr=subprocess.STDOUT)
        _run = process, output


def result(timeout_s: float) -> tuple[int, str]:
    """The run's exit code and output (started now if the session did not start it)."""
    start()
    assert _run is not None
    process, output = _run
    try:
        code = process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        stop()
        raise
    output.seek(0)
    return code, output.read().decode(errors="replace")


def stop() -> None:
    """End a run nobody waited for (the session stopped before the test)."""
    global _run
    if _run is not None:
        process, output = _run
        if process.poll() is None:
            process.kill()
            process.wait()
        output.close()
        _run = None
