"""The README's "How to read" transcript is a real run's first lines, at 80 columns."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.helpers.cli import Run

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
INTRO = "How to read the first lines of `graphmem "

pytestmark = pytest.mark.slow


def transcript() -> tuple[list[str], list[str]]:
    """(the command's arguments, the indented block after the intro line)."""
    start = README.index(INTRO) + len(INTRO)
    command, _, rest = README[start:].partition("`")
    lines = []
    for line in rest.splitlines()[2:]:  # the intro's end, a blank line, the block
        if not line.startswith("    "):
            break
        lines.append(line[4:])
    return shlex.split(command), lines


def test_the_transcript_is_a_real_run(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    args, shown = transcript()
    assert args[0] == "analyze" and len(shown) >= 10
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run(*args, "--no-html")
    assert code == 0, err
    lines = [line.rstrip() for line in out.splitlines()]
    assert lines[:len(shown)] == shown
