"""CPU seconds of the analysing stage (`run_passes`) and each of its passes, in-process.

    python benchmarks/pass_times.py MODEL [--repeat 5]
    PYTHONPATH=/tmp/base python benchmarks/pass_times.py /tmp/helper_22k.onnx  # another tree

Runs `graphmem analyze MODEL --batch 1 --dim seq=4096 --gpu a100-80gb` (JSON to a temporary
folder), timing each pass at its first call inside the real command, then calls `run_passes`
again on the same inputs `--repeat` times (the collector paused, as the command pauses it) and
prints each pass's first-call and least CPU seconds. PYTHONPATH names the tree measured;
compare trees in fresh processes taken in turn (the load changes) and read the ratios.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import tempfile
import time
from collections.abc import Callable
from typing import Any

PASSES = {
    "graphmem.pipeline.run": ("value_bytes", "analyze_liveness", "compute_costs",
                              "count_params", "group_by_module", "with_plans"),
    "graphmem.pipeline.planning": ("build_memory_model", "find_schedule", "plan_arena",
                                   "solve_max_batch"),
    # imported where a GPU is named (planning.py `_roofline`): timed in its own module
    "graphmem.passes.roofline": ("estimate_roofline",),
}


def _timed(times: dict[str, list[float]], name: str,
           function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        result = function(*args, **kwargs)
        times.setdefault(name, []).append(time.process_time() - start)
        return result

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    times: dict[str, list[float]] = {}
    for module_name, names in PASSES.items():
        module = importlib.import_module(module_name)
        for name in names:
            setattr(module, name, _timed(times, name, getattr(module, name)))
    run = importlib.import_module("graphmem.pipeline.run")
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    passes = run.run_passes

    def captured(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return _timed(times, "run_passes", passes)(*args, **kwargs)

    run.run_passes = captured
    from graphmem.cli.main import main as graphmem_main

    with tempfile.TemporaryDirectory() as folder:
        graphmem_main(["analyze", options.model, "--batch", "1", "--dim", "seq=4096", "--gpu",
                       "a100-80gb", "--json", f"{folder}/out.json", "--no-html"])
    first = {name: spent[0] for name, spent in times.items()}
    times.clear()
    args, kwargs = calls[0]
    for _ in range(options.repeat):
        gc.collect()
        gc.disable()
        _timed(times, "run_passes", passes)(*args, **kwargs)
        gc.enable()
    print("| pass | first call (CPU s) | least of the repeats (CPU s) |")
    print("|---|---|---|")
    for name in sorted(first, key=lambda n: -first[n]):
        print(f"| {name} | {first[name]:.4f} | {min(times.get(name, [0.0])):.4f} |")


if __name__ == "__main__":
    main()
