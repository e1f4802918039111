"""Progress on stderr while graphmem works (graphmem/core/progress.py marks the stages)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from graphmem.core.progress import Reporter
from graphmem.core.safe_text import markup_text

if TYPE_CHECKING:
    from rich.progress import TaskID


class RichReporter:
    """One transient line: a spinner, the stage, a bar when it is counted, the time taken."""

    def __init__(self, console: Console) -> None:
        # imported here: a pipe or a CI log draws no progress and need not load it (0.03 s)
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 TextColumn("{task.fields[count]}"),
                                 TimeElapsedColumn(), console=console, transient=True)
        self.task: TaskID | None = None
        self.total: int | None = None

    def begin(self, label: str, total: int | None) -> None:
        self.progress.start()
        self.total = total
        self.task = self.progress.add_task(markup_text(label), total=total,
                                           count=_count_text(0, total))

    def relabel(self, label: str, total: int | None) -> None:
        if self.task is not None:
            self.total = total
            self.progress.update(self.task, description=markup_text(label),
                                 total=total, completed=0, count=_count_text(0, total))

    def advance(self, done: int) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=done,
                                 count=_count_text(done, self.total))

    def end(self) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None
        self.progress.stop()


def _count_text(done: int, total: int | None) -> str:
    """`3/12` with a known total, `3` without one, nothing for a stage not yet counted."""
    if total is not None:
        return f"{done}/{total}"
    return str(done) if done else ""


def stderr_reporter() -> Reporter | None:
    """A reporter drawing on stderr when it is a terminal, else None (pipes and CI logs)."""
    console = Console(stderr=True, highlight=False, emoji=False)
    return RichReporter(console) if console.is_terminal else None
