"""The time limit of the fuzz corpus's isolated cases (tests/test_fuzz_cli.py): a case's own
timeout_s times this session's load factor, never above CEILING_S (issue 26's contract: no
hang past 60 s). The factor is the wall time of a trivial analyze in a forked child over its
CPU time, measured once per session and at least 1: on 2 cores shared by 8 busy processes a
case takes about 4 times its quiet time, where a fixed 6 s flaked (docs/testing.md)."""

from __future__ import annotations

import contextlib
import functools
import io
import multiprocessing
import os
import shutil
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

from graphmem.cli.main import main

CEILING_S = 60.0
BASELINE_MODEL = Path(__file__).resolve().parents[2] / "samples" / "tiny_cnn.onnx"
# what a baseline that failed scales by: every case gets the ceiling
_FAILED_FACTOR = CEILING_S / 6.0


def _baseline_child(model: Path, sender: Connection) -> None:
    os.chdir(model.parent)  # whatever it writes stays in its own folder
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(["analyze", str(model), "--batch", "1", "--no-html", "--json",
                     str(model.with_suffix(".json"))])
    sender.send((code, time.process_time()))
    sender.close()
    os._exit(0)  # no atexit, no pytest teardown in the child


@functools.cache
def load_factor() -> float:
    """How many times its CPU time a trivial analyze (samples/tiny_cnn.onnx, in a folder of
    its own) takes in wall time, in a forked child as the isolated cases run; at least 1."""
    with tempfile.TemporaryDirectory(prefix="graphmem-fuzz-baseline-") as folder:
        model = Path(shutil.copy(BASELINE_MODEL, folder))
        context = multiprocessing.get_context("fork")
        receiver, sender = context.Pipe(duplex=False)
        start = time.monotonic()
        child = context.Process(target=_baseline_child, args=(model, sender), daemon=True)
        child.start()
        sender.close()
        result = receiver.recv() if receiver.poll(CEILING_S) else None
        wall_s = time.monotonic() - start
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join()
    if result is None or result[0] != 0:
        return _FAILED_FACTOR
    return max(1.0, wall_s / max(result[1], 1e-3))


def case_limit_s(timeout_s: float) -> float:
    """An isolated case's limit: its own timeout, scaled by the load, at most the ceiling."""
    return min(CEILING_S, timeout_s * load_factor())
