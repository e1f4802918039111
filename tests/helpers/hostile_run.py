"""`python -m graphmem` in a child process of its own folder, measured: exit, output, seconds,
peak RSS, files left behind (tests/test_hostile_limits.py, benchmarks/hostile_scaling.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT_S = 60.0
# a decoy beside every model: it must stay as it is and appear in no output
SECRET_FILE, SECRET_TOKEN = "secret.txt", "AKIA-graphmem-decoy-7f3a9c"
SECRET_TEXT = f"API_KEY={SECRET_TOKEN}\n"
_SCANNED_BYTES = 64 * 2**20  # files the run made, read for the token up to this size
_ADDRESS_SPACE_BYTES = 4 * 10**9
_PEAK_FILE = ".peak_rss_kib"
# `python -m graphmem ARGV` under the address-space limit, its own peak RSS (VmHWM) written at
# exit: ru_maxrss would start at the parent's RSS (Linux carries the peak across exec)
_LIMITED_MAIN = (
    "import atexit, re, resource, runpy, sys\n"
    f"resource.setrlimit(resource.RLIMIT_AS, ({_ADDRESS_SPACE_BYTES}, {_ADDRESS_SPACE_BYTES}))\n"
    "def peak():\n"
    "    status = open('/proc/self/status').read()\n"
    f"    open({_PEAK_FILE!r}, 'w').write(re.search(r'VmHWM:\\s+(\\d+)', status)[1])\n"
    "atexit.register(peak)\n"
    "sys.argv = ['graphmem', *sys.argv[1:]]\n"
    "runpy.run_module('graphmem', run_name='__main__', alter_sys=True)\n")


@dataclass(frozen=True)
class Outcome:
    code: int | str  # the exit code, or how the process ended instead
    out: str
    err: str
    seconds: float
    max_rss_bytes: int
    left_behind: tuple[str, ...]
    cpu_seconds: float = 0.0  # user + system CPU of the process (wait4's rusage)
    leaked: tuple[str, ...] = ()  # where the decoy secret was changed or shown


def run_cli(folder: Path, *argv: str, limit_s: float = LIMIT_S) -> Outcome:
    """`python -m graphmem argv` in `folder`, with empty HOME and TMPDIR of its own."""
    home, temp = folder / "home", folder / "tmp"
    home.mkdir()
    temp.mkdir()
    secret = SECRET_TEXT
    (folder / SECRET_FILE).write_text(secret)
    before = {p.relative_to(folder) for p in folder.rglob("*")}
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(temp), "PYTHONPATH": str(REPO)}
    env.pop("XDG_CACHE_HOME", None)
    out_path, err_path = home.parent / ".out", home.parent / ".err"
    with out_path.open("w") as out, err_path.open("w") as err:
        # no preexec_fn: the child is spawned, not forked, so its peak RSS is its own (a
        # forked child's ru_maxrss starts at its parent's)
        process = subprocess.Popen([sys.executable, "-c", _LIMITED_MAIN, *argv], cwd=folder,
                                   env=env, stdout=out, stderr=err)
    start = time.monotonic()
    code: int | str
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - start > limit_s:
            os.kill(process.pid, signal.SIGKILL)
            _, status, usage = os.wait4(process.pid, 0)
            break
        time.sleep(0.02)
    seconds = time.monotonic() - start
    process.returncode = 0  # reaped here: Popen must not wait for it again
    if seconds > limit_s:
        code = f"hung: killed after {limit_s:g} s"
    elif os.WIFSIGNALED(status):
        code = f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    else:
        code = os.WEXITSTATUS(status)
    texts = out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
    out_path.unlink()
    err_path.unlink()
    peak_file = folder / _PEAK_FILE
    peak_bytes = usage.ru_maxrss * 1024  # a crash writes no peak: the upper bound
    if peak_file.is_file():
        peak_bytes = int(peak_file.read_text()) * 1024
        peak_file.unlink()
    left = [str(p.relative_to(folder)) for p in folder.rglob("*")
            if p.relative_to(folder) not in before]
    return Outcome(code, *texts, seconds, peak_bytes, tuple(sorted(left)),
                   usage.ru_utime + usage.ru_stime, _leaked(folder, secret, texts, left))


def _leaked(folder: Path, secret: str, texts: tuple[str, str], made: list[str]
            ) -> tuple[str, ...]:
    """Where the decoy secret was changed, or its token shown: stdout, stderr, a file the run
    made (or any file below the folder's top: the outputs, home, temp)."""
    decoy = folder / SECRET_FILE
    found = [] if decoy.is_file() and not decoy.is_symlink() and decoy.read_text() == secret \
        else [f"{SECRET_FILE} changed"]
    found += [name for name, text in zip(("stdout", "stderr"), texts, strict=True)
              if SECRET_TOKEN in text]
    for name in made:
        path = folder / name
        if path.is_file() and not path.is_symlink() and path.stat().st_size <= _SCANNED_BYTES \
                and SECRET_TOKEN.encode() in path.read_bytes():
            found.append(name)
    return tuple(found)


RSS_LIMIT_BYTES = 2**30


def broken_promises(outcome: Outcome, allowed: frozenset[int] = frozenset({0, 1, 2}),
                    outputs: tuple[str, ...] = ()) -> list[str]:
    """What the outcome breaks of the hostile-input contract, one line each: exit in
    `allowed`, an error as one line, no traceback, done within LIMIT_S, peak RSS under
    RSS_LIMIT_BYTES, nothing left behind but `outputs`, the decoy secret unchanged and
    shown nowhere."""
    problems = []
    if outcome.code not in allowed:
        problems.append(f"exit {outcome.code} (allowed {sorted(allowed)})")
    text = outcome.out + outcome.err
    if "Traceback" in text or "internal error" in text:
        problems.append("a traceback or internal error: " + text[-500:])
    if outcome.code == 2:
        lines = outcome.err.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("graphmem: error: "):
            problems.append(f"not one error line: {outcome.err[-500:]!r}")
    if outcome.seconds > LIMIT_S:
        problems.append(f"took {outcome.seconds:.1f} s")
    if outcome.max_rss_bytes > RSS_LIMIT_BYTES:
        problems.append(f"peak RSS {outcome.max_rss_bytes / 2**20:,.0f} MiB")
    stray = [p for p in outcome.left_behind if p not in outputs]
    if stray:
        problems.append(f"left behind: {stray}")
    if outcome.leaked:
        problems.append(f"the decoy secret leaked: {list(outcome.leaked)}")
    return problems
