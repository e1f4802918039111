"""Errors that reach the user as one line: what is wrong and what to do."""


class GraphmemError(Exception):
    """A user-facing error; the CLI prints `graphmem: error: <message>` and exits 2."""
