"""Whole-process CPU seconds of the decoders' command, this tree against another, alternating.

    python benchmarks/alternate.py /tmp/base [--rounds 2] [--only helper_22k,torchscript]

Each run is `python -m graphmem analyze MODEL --batch 1 --dim seq=4096 --gpu a100-80gb` with
JSON and HTML written to a temporary folder (as benchmarks/speed_targets.py runs it), in a
fresh process with PYTHONPATH set to the tree; the seconds are the child's user + system CPU
(wait4's rusage), bytecode cached by a first, uncounted run of each tree. Base and this tree
alternate within each round, so both see the same load; read the ratio, not the seconds.
The models are benchmarks/same_answers.py's decoders.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from same_answers import DECODER_OPTIONS, TREE, _decoder_commands  # noqa: E402


def cpu_seconds(tree: Path, model: str) -> float:
    """The command's CPU seconds (user + system of the child)."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "graphmem", "analyze", model, *DECODER_OPTIONS,
                   "--json", f"{folder}/out.json", "--html", f"{folder}/out.html"]
        # cwd: `python -m` puts the working folder first on sys.path, before PYTHONPATH; run
        # from a checkout's root, every tree would import that checkout's graphmem
        # the bytecode cache on, as speed_targets.py runs it: this project's sessions set
        # PYTHONDONTWRITEBYTECODE, and the first, uncounted run wrote nothing then (a tree
        # whose cache an earlier run had written was compared with one compiling every module)
        environment = {key: value for key, value in os.environ.items()
                       if key != "PYTHONDONTWRITEBYTECODE"}
        child = subprocess.Popen(command, env=dict(environment, PYTHONPATH=str(tree)),
                                 cwd=folder, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        if os.waitstatus_to_exitcode(status) not in (0, 1):
            raise SystemExit(f"{tree}: graphmem failed on {model}")
        return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="")
    options = parser.parse_args()
    models = [(name, arguments[0]) for name, arguments in _decoder_commands()
              if not options.only or name in options.only.split(",")]
    for tree in (options.base, TREE):  # bytecode written, not counted
        cpu_seconds(tree, str(SAMPLES_TINY))
    print("| model | base (CPU s) | this tree (CPU s) | ratio |\n|---|---|---|---|")
    for name, model in models:
        base, ours = [], []
        for _ in range(options.rounds):
            base.append(cpu_seconds(options.base, model))
            ours.append(cpu_seconds(TREE, model))
        ratio = sum(ours) / sum(base)
        print(f"| {name} | {', '.join(f'{s:.2f}' for s in base)} |"
              f" {', '.join(f'{s:.2f}' for s in ours)} | {ratio:.3f} |", flush=True)


SAMPLES_TINY = TREE / "samples" / "tiny_gpt.onnx"

if __name__ == "__main__":
    main()
