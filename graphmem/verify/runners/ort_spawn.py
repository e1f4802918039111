"""verify's side of its child process (ort_guard.py says what the child does): start it as
the leader of a process group of its own, holding the read end of a pipe whose write end only
verify keeps (the pipe reads as ended when verify is gone, however it went), and stop the
whole group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path


def start_guard(folder: Path, env: Mapping[str, str],
                limit_child: Callable[[], None]) -> tuple[subprocess.Popen[bytes], int]:
    """The guard started on `folder` (its process group its own), and the write end of its
    pipe, which the caller keeps open while the guard may run and closes after."""
    life_read, life_write = os.pipe()
    try:
        guard = subprocess.Popen(
            [sys.executable, "-m", "graphmem.verify.runners.ort_guard", str(folder),
             str(life_read)], cwd=folder, env={**env, "TMPDIR": str(folder)},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=limit_child, pass_fds=(life_read,), start_new_session=True)
    except BaseException:
        os.close(life_write)
        raise
    finally:
        os.close(life_read)
    return guard, life_write


def stop_group(guard: subprocess.Popen[bytes]) -> None:
    """Kill the guard and the runner at once (the guard leads their process group), and reap
    the guard."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(guard.pid, signal.SIGKILL)
    guard.kill()  # where the group is gone, or was never made (a test's stand-in)
    guard.wait()
