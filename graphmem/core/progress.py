"""Progress on long work, for people watching a terminal: stages and counted steps.

The analysis marks its stages (`stage("tracing the model")`) and counted loops (`steps(
"re-analysing checkpoint plans", 12)`); the command line installs a reporter that draws them on
stderr when it is a terminal (graphmem/report/terminal/progress.py) and none otherwise, so
pipes, CI logs and the Python API print nothing. Only the outermost stage is shown: the
re-analyses a suggestion search runs are the same pipeline, and their own stages stay quiet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol, TypeVar


class Reporter(Protocol):
    def begin(self, label: str, total: int | None) -> None: ...
    def relabel(self, label: str, total: int | None) -> None: ...
    def advance(self, done: int) -> None: ...
    def end(self) -> None: ...


T = TypeVar("T")
_REPORTER: ContextVar[Reporter | None] = ContextVar("graphmem_progress", default=None)
_ACTIVE: ContextVar[int] = ContextVar("graphmem_progress_depth", default=0)
# the label of the outermost stage being shown, and whether a count is shown inside it
_SHOWN: ContextVar[str | None] = ContextVar("graphmem_progress_shown", default=None)
_COUNTING: ContextVar[bool] = ContextVar("graphmem_progress_counting", default=False)


@contextmanager
def reporting(reporter: Reporter | None) -> Iterator[None]:
    """Draw progress with `reporter` (None: nothing) inside this block."""
    token = _REPORTER.set(reporter)
    try:
        yield
    finally:
        _REPORTER.reset(token)


@contextmanager
def stage(label: str) -> Iterator[None]:
    """A step of the work without a count ("importing model.onnx")."""
    with _marked(label, None, counts=False):
        yield


@contextmanager
def steps(label: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A counted step; the block calls the returned function with how many are done (`total`
    None: a count without a known end, "suggestions: re-analysed changes 3").

    Outermost: shown as its own line. Inside a shown stage, the first counted steps are shown
    in that stage's line ("suggestions: re-analysing checkpoint plans 3/12"); the rest of
    the nested work (the re-analyses themselves) stays quiet."""
    with _marked(label, total, counts=True) as done:
        yield done


@contextmanager
def _marked(label: str, total: int | None, counts: bool) -> Iterator[Callable[[int], None]]:
    reporter, depth, outer = _REPORTER.get(), _ACTIVE.get(), _SHOWN.get()
    if reporter is None:
        yield _ignore
        return
    if depth == 0:
        with _scoped(_ACTIVE, depth + 1), _scoped(_SHOWN, label):
            reporter.begin(label, total)
            try:
                yield reporter.advance
            finally:
                reporter.end()
        return
    counted = counts and outer is not None and not _COUNTING.get()
    with _scoped(_ACTIVE, depth + 1), _scoped(_COUNTING, _COUNTING.get() or counted):
        if not counted:
            yield _ignore
            return
        reporter.relabel(f"{outer}: {label}", total)
        try:
            yield reporter.advance
        finally:
            reporter.relabel(outer or "", None)


@contextmanager
def _scoped(variable: ContextVar[T], value: T) -> Iterator[None]:
    token = variable.set(value)
    try:
        yield
    finally:
        variable.reset(token)


def _ignore(done: int) -> None:
    del done
