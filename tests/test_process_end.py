"""The console script's process ends without the interpreter's teardown (core/collector.py
`end_process`), and nothing a normal exit does for the user is lost: exit handlers, buffered
output, the exit code, a thread still running, a closed pipe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphmem.core import collector

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "samples" / "tiny_cnn.onnx"


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, check=False)


@pytest.mark.parametrize("code", [0, 1, 2, 3, 141])
def test_exit_handlers_run_and_buffered_output_is_written(tmp_path: Path, code: int) -> None:
    marker = tmp_path / "handler.txt"
    script = (
        "import atexit, sys\n"
        "from graphmem.core.collector import end_process\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').write('ran'))\n"
        "sys.stdout.write('no newline, still buffered')\n"
        "sys.stderr.write('to stderr')\n"
        f"end_process({code})\n"
        "print('never reached')\n"
    )
    done = _run(script)
    assert done.returncode == code
    assert done.stdout == "no newline, still buffered"  # flushed; nothing after the end
    assert done.stderr == "to stderr"
    assert marker.read_text() == "ran"


def test_a_running_thread_is_waited_for(tmp_path: Path) -> None:
    # a thread still running: the ordinary exit, which waits for it as Python always does
    script = (
        "import threading, time, sys\n"
        "from graphmem.core.collector import end_process\n"
        "def late():\n"
        "    time.sleep(0.3)\n"
        "    print('thread done', flush=True)\n"
        "threading.Thread(target=late).start()\n"
        "end_process(4)\n"
    )
    done = _run(script)
    assert done.returncode == 4
    assert done.stdout == "thread done\n"


def test_a_pytorch_command_s_process_ends_as_python_ends_it(tmp_path: Path) -> None:
    # the user's code ran in a PyTorch command: a file it left open (written, not closed) is
    # flushed by the interpreter's teardown, which such a process keeps (a stand-in module
    # named torch: importing torch itself takes seconds)
    left_open = tmp_path / "user.log"
    script = (
        "import sys, types\n"
        "from graphmem.core.collector import end_process\n"
        "sys.modules['torch'] = types.ModuleType('torch')\n"
        f"log = open({str(left_open)!r}, 'w')\n"
        "log.write('written by the model file')\n"
        "end_process(0)\n"
    )
    done = _run(script)
    assert done.returncode == 0
    assert left_open.read_text() == "written by the model file"


def test_a_profiled_command_writes_its_statistics(tmp_path: Path) -> None:
    # `python -m cProfile -o FILE -m graphmem ...`: the profiler writes FILE after the
    # command returns, so a watched process takes the ordinary exit
    stats = tmp_path / "analyze.prof"
    done = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(stats), "-m", "graphmem",
                           "analyze", str(TINY), "--no-html"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert stats.stat().st_size > 0


def test_the_command_s_outputs_are_whole(tmp_path: Path) -> None:
    # `python -m graphmem` ends through end_process: its files and its stdout are complete
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    done = subprocess.run([sys.executable, "-m", "graphmem", "analyze", str(TINY), "--json",
                           str(out), "--html", str(page)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["schema_version"] == 1
    assert page.read_text().rstrip().endswith("</html>")
    assert done.stdout.rstrip().endswith(f"HTML report written to {page}")
    # and `--json -`: the whole document on stdout
    done = subprocess.run([sys.executable, "-m", "graphmem", "analyze", str(TINY), "--json",
                           "-", "--no-html"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300, check=False)
    assert done.returncode == 0 and json.loads(done.stdout)["schema_version"] == 1
    # a usage error: one line, exit 2
    done = subprocess.run([sys.executable, "-m", "graphmem", "analyze",
                           str(tmp_path / "missing.onnx")], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1


def test_only_a_one_command_process_keeps_its_result(monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list[object] = []
    monkeypatch.setattr(collector, "_KEPT", kept)
    monkeypatch.setattr(collector, "_ONE_COMMAND", [])
    collector.keep_until_exit("a caller's analysis")  # main() from a caller: freed as usual
    assert kept == []
    monkeypatch.setattr(collector, "_ONE_COMMAND", [True])
    collector.keep_until_exit("the console script's analysis")
    assert kept == ["the console script's analysis"]
