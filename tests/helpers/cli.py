"""graphmem's command line run in-process, and the one-error-line contract of bad input."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from graphmem.cli.main import main

# conftest.py's `run` fixture: graphmem's command line in-process -> (exit code, stdout, stderr)
Run = Callable[..., tuple[int, str, str]]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_cli_with_deadline(args: list[str], capsys: pytest.CaptureFixture[str],
                          seconds: float = 120) -> tuple[int, str, str]:
    """main(args) with a deadline: a FIFO or device read would block forever."""
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(main(args)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert result, f"graphmem {' '.join(args)} did not finish in {seconds} s"
    captured = capsys.readouterr()
    return result[0], captured.out, captured.err


def assert_one_error_line(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("graphmem: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0]
