"""CPU seconds of each stage of one `graphmem analyze` command, in a fresh process.

    python benchmarks/stage_times.py MODEL [analyze options...]
    python benchmarks/stage_times.py /tmp/decoder_22k.onnx --batch 1 --dim seq=4096 --gpu a100-80gb

The stages are the pipeline's own progress marks (graphmem/core/progress.py): reading the model
(file, validation, shape inference, building the graph), the passes and plans, suggestions,
the runtime model; then the verdict and distributed answers, and writing the reports, timed
around the rest of the command. Start-up is the interpreter and the command line's imports,
the command's module and what it imports with them (`start_command`; a tree before it imports
the command's module inside `main`, whose time then counts in the last stage).
JSON and HTML go to a temporary folder unless the options name them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import json, sys, time
start_up = time.process_time()
from graphmem.cli.main import main
from graphmem.core.progress import reporting
try:  # as the console script does (graphmem/cli/main.py run_command): the command's modules
    from graphmem.cli.main import start_command
    start_command(sys.argv[2:])
except ImportError:  # a tree from before 2026-11-29 02:00 UTC: imported by main, in "rest"
    from graphmem.core.collector import freeze_start_up_objects
    freeze_start_up_objects()
imports = time.process_time()

class Clock:
    def __init__(self):
        self.stages, self.label, self.start = [], None, 0.0
    def begin(self, label, total):
        self.label, self.start = label, time.process_time()
    def relabel(self, label, total):
        pass
    def advance(self, done):
        pass
    def end(self):
        self.stages.append((self.label, time.process_time() - self.start))

clock = Clock()
with reporting(clock):
    # the command line installs its own reporter only on a terminal: this one is kept
    import graphmem.cli.main as cli
    cli._progress_reporter = lambda: clock
    code = main(sys.argv[2:])
total = time.process_time()
json.dump({"exit": code, "start_up": imports, "stages": clock.stages,
           "rest": total - imports - sum(s for _, s in clock.stages), "total": total},
          open(sys.argv[1], "w"))
"""


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    with tempfile.TemporaryDirectory() as folder:
        options = sys.argv[2:]
        if "--json" not in options:
            options += ["--json", str(Path(folder) / "out.json")]
        if "--html" not in options and "--no-html" not in options:
            options += ["--html", str(Path(folder) / "out.html")]
        result_path = Path(folder) / "times.json"
        # in the temporary folder: `python -c` puts the working folder first on sys.path, so
        # run from a checkout it would import that checkout's graphmem, not PYTHONPATH's
        # bytecode written and read as an installed package has it (this project's sessions
        # set PYTHONDONTWRITEBYTECODE: every module would be compiled in every run)
        env = {key: value for key, value in os.environ.items()
               if key != "PYTHONDONTWRITEBYTECODE"}
        subprocess.run([sys.executable, "-c", _CHILD, str(result_path), "analyze",
                        str(Path(sys.argv[1]).resolve()), *options], check=True,
                       stdout=subprocess.DEVNULL, cwd=folder, env=env)
        result = json.loads(result_path.read_text())
    rows = [("interpreter and imports", result["start_up"]), *result["stages"],
            ("verdict, distributed answers, writing the reports", result["rest"]),
            ("whole process (in-process CPU)", result["total"])]
    print("| stage | CPU s |\n|---|---:|")
    for label, seconds in rows:
        print(f"| {label} | {seconds:.2f} |")
    if result["exit"] not in (0, 1):
        raise SystemExit(f"graphmem exited {result['exit']}")


if __name__ == "__main__":
    main()
