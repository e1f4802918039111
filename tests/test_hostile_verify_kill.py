"""`graphmem verify` ended by SIGKILL leaves nothing running and nothing behind (issue 26, cause
12; graphmem/verify/runners/ort_guard.py): its child (the guard and the runner it forks) is
gone within seconds, and so is the run folder, even though verify ran no code of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

from tests.hostile_models import loop_forever

pytestmark = [pytest.mark.slow, pytest.mark.ort]
REPO = Path(__file__).resolve().parents[1]
GONE_WITHIN_S = 5.0


def _start_verify(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    """`graphmem verify` of a Loop that never ends, with a temporary folder of its own, once
    onnxruntime is running the Loop (its profile file exists); and that folder."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    onnx.save(loop_forever(), tmp_path / "model.onnx")
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(REPO)}
    verify = subprocess.Popen([sys.executable, "-m", "graphmem", "verify", "model.onnx",
                               "--batch", "2", "--time-limit", "300"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(scratch.glob("graphmem-verify-*/ort_profile*")):
        assert time.monotonic() < deadline and verify.poll() is None, verify.communicate()
        time.sleep(0.1)
    return verify, scratch


def _descendants(root: int) -> list[int]:
    """Every live process below `root` (by /proc's parent links)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def _alive(pids: list[int]) -> list[int]:
    """Those of `pids` still running (a zombie, waiting for its reaper, has ended)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in "ZX":
            alive.append(pid)
    return alive


def _gone(pids: list[int], scratch: Path) -> tuple[list[int], list[str]]:
    """Wait up to GONE_WITHIN_S for the processes and the temporary folder's files to go."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while (_alive(pids) or any(scratch.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(pids), sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*"))


def test_sigkill_of_verify_ends_its_child_and_removes_the_run_folder(tmp_path: Path) -> None:
    verify, scratch = _start_verify(tmp_path)
    children = _descendants(verify.pid)
    assert len(_alive(children)) == 2, children  # the guard and the runner running the Loop
    verify.kill()  # SIGKILL: verify runs no code of its own
    verify.communicate()
    assert _gone(children, scratch) == ([], [])


def test_the_runner_dies_with_its_guard(tmp_path: Path) -> None:
    """SIGKILL of the guard alone: the runner, killed by Linux with it (PR_SET_PDEATHSIG),
    stops running the Loop, verify says how its child ended and removes the folder."""
    verify, scratch = _start_verify(tmp_path)
    guard, runner = _descendants(verify.pid)
    os.kill(guard, signal.SIGKILL)
    _, err = verify.communicate(timeout=60)
    assert verify.returncode == 2
    assert "ended with signal SIGKILL" in err and len(err.strip().splitlines()) == 1
    assert _gone([runner], scratch) == ([], [])


def test_a_verify_gone_before_the_guard_starts_leaves_nothing(tmp_path: Path) -> None:
    """The race: verify dies between starting the guard and the guard watching its pipe. The
    pipe then reads as ended at once: the guard kills the runner and removes the folder."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "request.json").write_text("{}")
    read, write = os.pipe()
    os.close(write)  # verify is gone before the guard starts
    guard = subprocess.Popen([sys.executable, "-m", "graphmem.verify.runners.ort_guard",
                              str(folder), str(read)], pass_fds=(read,),
                             env={**os.environ, "PYTHONPATH": str(REPO)},
                             stderr=subprocess.PIPE, text=True)
    os.close(read)
    _, err = guard.communicate(timeout=60)
    assert guard.returncode == 1, err
    assert not folder.exists()
