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


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic cyclic collection inside the block; nested blocks and a collector the
    caller already disabled are left as they are."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
