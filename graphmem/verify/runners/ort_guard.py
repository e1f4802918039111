"""The child process `graphmem verify` starts, which outlives nothing: it runs the model in a
process of its own (ort_child.py) and removes the run folder if verify dies first.

A verify ended by SIGKILL (the OOM killer, `kill -9`, a CI runner's timeout) runs no code of
its own: the child it started would run on (a Loop that never ends runs forever) and the run
folder would stay in the temporary folder. So the child is two processes:
- this *guard*, started by verify (ort_spawn.start_guard) as the leader of a process group
  of its own, holding the read end of a pipe whose write end only verify holds: the pipe
  reads as ended the moment verify is gone, however it went, even before the guard looked
  (no race). It forks the *runner* and waits for the first of two things: the runner ends
  (the guard then ends as the runner did, its exit status or its signal, for verify to
  read), or the pipe ends (verify is gone: the guard kills the runner, waits for it and
  removes the run folder);
- the *runner* asks Linux to kill it when the guard dies (prctl PR_SET_PDEATHSIG), then checks
  that its parent is still the guard that forked it (had the guard died in between, the signal
  would never come), and runs the model (ort_child.main). Its TMPDIR is the run folder, so the
  scratch folder of onnxruntime's import is inside what the guard removes.

verify kills the whole group (the guard and the runner) on its time limit, Ctrl-C and SIGTERM.
On a system without PR_SET_PDEATHSIG or fork the runner is the guard's own process, as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
from pathlib import Path

from graphmem.core.scratch import remove_tree

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_POLL_S = 0.05  # where pidfd_open is missing: how often the guard looks at the runner


def main(folder: Path, life: int) -> int:
    guard = os.getpid()
    if not hasattr(os, "fork") or not _can_die_with_parent():
        os.close(life)
        return _run(folder)
    runner = os.fork()
    if runner == 0:  # the runner: never returns into the guard's code
        code = 1
        try:
            os.close(life)
            _die_with(guard)
            code = _run(folder)
        finally:
            os._exit(code)
    return _watch(folder, life, runner)


def _run(folder: Path) -> int:
    from graphmem.verify.runners import ort_child  # imports onnxruntime: after the fork

    return ort_child.main(folder)


def _can_die_with_parent() -> bool:
    return sys.platform.startswith("linux")


def _die_with(guard: int) -> None:
    """Linux kills this process when its parent dies; if the parent is already not the guard
    that forked it (it died before the request), end now."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != guard:
        os._exit(1)


def _watch(folder: Path, life: int, runner: int) -> int:
    """Wait for the runner's end or verify's; mirror the first, or clean up after the second."""
    pidfd = _pidfd(runner)
    while True:
        watched = [life] if pidfd is None else [life, pidfd]
        ready = select.select(watched, [], [], None if pidfd is not None else _POLL_S)[0]
        if life in ready and not os.read(life, 1):  # verify is gone
            with contextlib.suppress(ProcessLookupError):
                os.kill(runner, signal.SIGKILL)
            os.waitpid(runner, 0)
            remove_tree(str(folder))
            return 1
        done, status = os.waitpid(runner, os.WNOHANG)
        if done:
            return _ended_as(status)


def _pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:  # a kernel before 5.3
        return None


def _ended_as(status: int) -> int:
    """End this process as the runner ended: its exit status, or the signal that killed it."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2])))
