"""Python's cyclic garbage collector held off during a bulk stage of the analysis.

Importing a large graph and running the passes over it allocate millions of small objects
(protobuf wrappers, SymInts, per-node tuples) that live to the end of the stage or die at
once by reference counting. Each automatic collection walks every tracked object, and on a
growing heap the full collections repeat: about 15% of the CPU of a 20,000-node analysis
(measured in benchmarks/results/speed.md). The stages create little cyclic garbage; what
they do create is collected by the first automatic collection after the stage.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# set by freeze_start_up_objects: this process runs one command and ends (the console script)
_ONE_COMMAND: list[bool] = []


@contextmanager
def collector_paused(last: bool = False) -> Iterator[None]:
    """No automatic cyclic collection inside the block; nested blocks and a collector the
    caller already disabled are left as they are. `last`: the command's last stage (writing
    its outputs); in a one-command process what is alive is frozen before the collector is
    back, as the process's end does (`freeze_before_exit`): the first automatic collection
    after the block would walk everything the block made, and by the luck of the collector's
    counts a whole generation of the analysis with it (0.1 CPU s at 22,000 nodes), to free
    nothing the process still needs freed."""
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
