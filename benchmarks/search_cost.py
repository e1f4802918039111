"""CPU seconds of the two largest-batch searches' own work on the decoders, this tree against
another, alternating (in fresh processes, as benchmarks/alternate.py runs whole commands).

    python benchmarks/search_cost.py /tmp/base [--rounds 3] [--only helper_22k,torchscript]

Each run is `graphmem analyze MODEL --batch 1 --dim seq=4096 --gpu a100-80gb` in-process with
the collector as the command sets it, timing (time.process_time) the live-tensor search
(`planning.solve_max_batch`), the device-total search (`verdict.device_max_batch`) and the
runtime model's estimates made inside them (`device_total.runtime_estimate`: rtpos's part).
"own" is both searches less those estimates; "the probes' sizing" is what the device-total
probe (`device_total.DeviceTotalProbe`) spends outside the estimates: its set-up and each
batch's sizes and routed dims bound. The table gives each column's minimum over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from same_answers import DECODER_OPTIONS, TREE, _decoder_commands  # noqa: E402

_CHILD = r"""
import json, sys, time
from graphmem.cli.main import main
from graphmem.core.collector import freeze_start_up_objects
import graphmem
import graphmem.pipeline.device_total as device_total
import graphmem.pipeline.planning as planning
import graphmem.pipeline.verdict as verdict
assert graphmem.__file__.startswith(sys.argv[2]), graphmem.__file__

freeze_start_up_objects()
spent = {"live": 0.0, "device": 0.0, "estimates": 0.0, "probes": 0.0}
inside = []

def timed(module, name, key, counted=lambda: True):
    original = getattr(module, name)
    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            if counted():
                spent[key] += time.process_time() - start
    setattr(module, name, wrapper)

def in_search(module, name):
    original = getattr(module, name)
    def wrapper(*args, **kwargs):
        inside.append(name)
        try:
            return original(*args, **kwargs)
        finally:
            inside.pop()
    setattr(module, name, wrapper)

timed(planning, "solve_max_batch", "live")
timed(verdict, "device_max_batch", "device")
in_search(planning, "solve_max_batch")
in_search(verdict, "device_max_batch")
timed(device_total, "runtime_estimate", "estimates", lambda: bool(inside))
# the device-total probe's own set-up and re-sizing per batch (device_total.py, estimates in)
timed(device_total.DeviceTotalProbe, "__init__", "probes", lambda: bool(inside))
timed(device_total.DeviceTotalProbe, "_estimate", "probes", lambda: bool(inside))
code = main(sys.argv[3:])
json.dump(spent, open(sys.argv[1], "w"))
"""


def search_seconds(tree: Path, model: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "times.json"
        command = [sys.executable, "-c", _CHILD, str(out), str(tree), "analyze", model,
                   *DECODER_OPTIONS, "--json", f"{folder}/out.json", "--html", f"{folder}/out.html"]
        # cwd: `python -c` puts the working folder first on sys.path, before PYTHONPATH
        subprocess.run(command, env=dict(os.environ, PYTHONPATH=str(tree)), check=False,
                       cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        spent: dict[str, float] = json.loads(out.read_text())
    spent["own"] = spent["live"] + spent["device"] - spent["estimates"]
    spent["sizing"] = spent["probes"] - spent["estimates"]
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated decoder names")
    options = parser.parse_args()
    wanted = set(options.only.split(",")) - {""}
    models = [(name, arguments[0]) for name, arguments in _decoder_commands()
              if name in wanted or not wanted]
    print("| model | tree | live search | device search | its estimates | the probes' sizing |"
          " own | own ratio | own less sizing |\n|---|---|---|---|---|---|---|---|---|")
    for name, model in models:
        runs: dict[Path, list[dict[str, float]]] = {options.base: [], TREE: []}
        for _ in range(options.rounds):
            for tree in runs:
                runs[tree].append(search_seconds(tree, model))
        best = {tree: {key: min(run[key] for run in found) for key in found[0]}
                for tree, found in runs.items()}
        for tree, label in ((options.base, "base"), (TREE, "this")):
            row = best[tree]
            ratio = row["own"] / best[options.base]["own"]
            print(f"| {name} | {label} | {row['live']:.3f} | {row['device']:.3f} |"
                  f" {row['estimates']:.3f} | {row['sizing']:.3f} | {row['own']:.3f} |"
                  f" {ratio:.2f} | {row['own'] - row['sizing']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
