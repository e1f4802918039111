"""Errors that reach the user as one line: what is wrong and what to do."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

FIRST_LINE_CHARS = 300  # a library's message quoted in ours: its first line, shortened


class GraphmemError(Exception):
    """A user-facing error; the CLI prints `graphmem: error: <message>` and exits 2."""


class SpecError(ValueError):
    """A budget value that does not parse (`--max-memory 90`); the message says what was
    expected, and the caller names the flag or key."""


def first_line(error: BaseException, limit: int = FIRST_LINE_CHARS) -> str:
    """The first line of a library's error (its type name when it has no message)."""
    lines = str(error).strip().splitlines()
    return lines[0][:limit] if lines else type(error).__name__


@contextlib.contextmanager
def quiet_logger(name: str, level: int) -> Iterator[None]:
    """Raise a library logger's level for a block: what it logs there is not the user's
    business (the error it raises, if any, is reported as one line)."""
    import logging  # only the PyTorch front end quiets a library: not at every start

    logger = logging.getLogger(name)
    before = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)
