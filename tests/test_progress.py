"""Progress on long work: the outermost stage is shown, a count inside it joins its line,
nested re-analyses stay quiet, and nothing is drawn without a reporter (pipes, CI, the API)."""

from __future__ import annotations

import io

from rich.console import Console

from graphmem.core.progress import reporting, stage, steps
from graphmem.report.terminal.progress import RichReporter, stderr_reporter


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def begin(self, label: str, total: int | None) -> None:
        self.events.append(("begin", label, total))

    def relabel(self, label: str, total: int | None) -> None:
        self.events.append(("relabel", label, total))

    def advance(self, done: int) -> None:
        self.events.append(("advance", done))

    def end(self) -> None:
        self.events.append(("end",))


def test_only_the_outermost_stage_and_one_count_are_shown() -> None:
    recorder = Recorder()
    with reporting(recorder), stage("suggestions"), steps("checkpoint plans", 2) as done:
        for index in range(2):
            with stage("reading the model"):  # a re-analysis: quiet
                pass
            done(index + 1)
    assert recorder.events == [
        ("begin", "suggestions", None),
        ("relabel", "suggestions: checkpoint plans", 2),
        ("advance", 1), ("advance", 2),
        ("relabel", "suggestions", None),
        ("end",),
    ]


def test_nothing_is_reported_without_a_reporter() -> None:
    with stage("x"), steps("y", 3) as done:
        done(1)  # no reporter: a no-op


def test_the_rich_reporter_draws_on_a_terminal_and_stderr_reporter_knows_pipes() -> None:
    buffer = io.StringIO()
    reporter = RichReporter(Console(file=buffer, force_terminal=True, width=80))
    with reporting(reporter), steps("tracing the model", 4) as done:
        done(2)
    assert "tracing the model" in buffer.getvalue()
    assert stderr_reporter() is None  # pytest captures stderr: not a terminal
