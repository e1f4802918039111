"""Python's cyclic garbage collector held off during a bulk stage of the analysis.

Importing a large graph and running the passes over it allocate millions of small objects
(protobuf wrappers, SymInts, per-node tuples) that live to the end of the stage or die at
once by reference counting. Each automatic collection walks every tracked object, and on a
growing heap the full collections repeat: about 15% of the CPU of a 20,000-node analysis
(measured in benchmarks/results/speed.md). The stages create little cyclic garbage; what
they do create is collected by the first automatic collection after the stage.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

# set by freeze_start_up_objects: this process runs one command and ends (the console script)
_ONE_COMMAND: list[bool] = []
# what a one-command process keeps to its end (`keep_until_exit`)
_KEPT: list[object] = []


@contextmanager
def collector_paused(last: bool = False) -> Iterator[None]:
    """No automatic cyclic collection inside the block; nested blocks and a collector the
    caller already disabled are left as they are. `last`: a stage whose results live to the
    command's end (the analysis's passes and runtime model, the writers: pipeline/run.py,
    cli/common.py); in a one-command process what is alive is frozen before the collector is
    back, as the process's end does (`freeze_before_exit`): the first automatic collection
    after the block would walk everything the block made, and by the luck of the collector's
    counts a whole generation of the analysis with it (0.1 CPU s at 22,000 nodes), to free
    nothing the process still needs freed. Such a stage makes no cyclic garbage worth
    collecting (a frozen object is never freed)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if last and _ONE_COMMAND:
            gc.freeze()
        if was_enabled:
            gc.enable()


def freeze_start_up_objects() -> None:
    """Every object alive now (the interpreter's and the imported modules', which live to the
    end of the process) moved out of the collector's generations (gc.freeze), so that no
    later full collection walks them again: 2 to 3% of a 22,000-node command's CPU. Only for
    a process that runs one command (the console script): a library caller's heap is its own."""
    gc.freeze()
    _ONE_COMMAND[:] = [True]


def freeze_before_exit() -> None:
    """Every object the command left moved out of the collector's generations before the
    process ends: the interpreter's shutdown runs a full collection, which would walk the
    whole analysis (about 225,000 objects at 22,000 nodes: 0.3 to 0.4 CPU s of the command)
    only to find it all still referenced. Exit handlers still run; the memory goes back with
    the process. Only for the console script's one-command process."""
    gc.freeze()


def keep_until_exit(result: object) -> None:
    """In the console script's one-command process, `result` (the command's analysis) is
    held to the process's end instead of freed object by object when the command returns:
    at 22,000 nodes that is about 10^6 objects, 0.02 CPU s, and `end_process` then ends the
    process without freeing anything. In a caller's process (main() from a test, the API)
    nothing is held."""
    if _ONE_COMMAND:
        _KEPT.append(result)


def end_process(code: int) -> NoReturn:
    """The console script's end: the exit handlers run and stdout and stderr are flushed as
    at any exit, then the process ends without the interpreter's teardown, which frees every
    module and object one at a time (0.01 CPU s of a small model's command, about 0.03 with
    a 22,000-node analysis kept): the memory goes back with the process, as mypy's fast exit
    does. Where that could skip work, the ordinary exit runs instead: a PyTorch command (the
    user's model, loss or inputs file ran in this process: a file it left open is flushed as
    it is freed; torch's own teardown), another thread still running (the interpreter would
    wait for it), a profiler or tracer watching (`python -m cProfile -m graphmem` writes its
    statistics after the command returns), or a flush failing (a closed pipe: Python reports
    it as it always does)."""
    threading = sys.modules.get("threading")
    watched = sys.getprofile() is not None or sys.gettrace() is not None or _monitored()
    if "torch" in sys.modules or watched or (
            threading is not None and threading.active_count() > 1):
        sys.exit(code)
    atexit._run_exitfuncs()  # what the interpreter's exit runs first
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except BaseException:  # noqa: BLE001 - the ordinary exit says what went wrong
        sys.exit(code)
    os._exit(code)


def _monitored() -> bool:
    """Whether a tool watches through sys.monitoring (Python 3.12+: cProfile, coverage and
    debuggers use it there, and sys.getprofile() then answers None)."""
    monitoring = getattr(sys, "monitoring", None)
    return monitoring is not None and any(
        monitoring.get_tool(tool) is not None for tool in range(6))
