"""What onnxruntime's Loop and Scan hold, modelled (graphmem/runtime_models/ort_loop.py),
against its measured `mem_in_use_peak`.

`python benchmarks/ort_loops.py [--folder DIR] [name ...]` prints one markdown row per graph
and optimization level: graphmem's ort-cpu prediction next to onnxruntime's measurement (one
thread, the inputs verify makes up; tests/helpers/ort.py `measure_all`). The graphs are the
hand-built Loops of tests/helpers/loop_models.py, `fit` (what the model was checked on while
it was written) and `held out` (run only once it was), Scans of several lengths and Ifs. The
exports with a Loop (the EmbeddingBags, DLRM) are benchmarks/data_bounded_slices.py's.

`python benchmarks/ort_loops.py --data-trips` measures Loops whose M is data (the graph input
`m`, or onnx's test_loop11's `trip_count`): the run's inputs made up by seed, M's drawn value
given to graphmem as the trip count's dim (tests/helpers/ort.py `measure_data_trips`); then
Loops whose M is worked out from an input's shape (`Size(x)`, `ReduceProd(Shape(x))`, x
[batch, 4]: 4*batch, no data dim) at batch 1, 3 and 5 (`measure_all`).

`python benchmarks/ort_loops.py --events` instead times what a long Loop costs the analysis:
the `m3` Loop at growing trip counts, its allocations and frees replayed one by one (the
bound MAX_LOOP_EVENTS lifted for the run), one row per trip count: the events the model
makes, the CPU seconds of `loop_scratch` alone and of a whole `--runtime ort-cpu` analysis
(in process, the best of two), its peak.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import zoo_onnx
from benchmarks.data_bounded_slices import measured_rows
from tests.helpers import loop_models

HEADER = ("| graph | set | level | graphmem B | onnxruntime B | error |\n"
          "|---|---|---|---:|---:|---:|")


def _writer(name: str, model: onnx.ModelProto) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / f"{name}.onnx"
        onnx.save(model, path)
        return path

    return write


def graphs() -> dict[str, tuple[Callable[[Path], Path], str]]:
    """name -> (what writes it into a folder, fit or held out)."""
    models = {name: (loop_models.loop(case), "fit") for name, case in loop_models.FIT.items()}
    models.update({name: (loop_models.loop(case), "held out")
                   for name, case in loop_models.HELD_OUT.items()})
    models["scan"] = (loop_models.scan(), "fit")
    models.update({f"scan_{rows}_rows": (loop_models.scan(rows), "held out")
                   for rows in loop_models.SCAN_HELD_OUT})
    models.update({name: (loop_models.if_model(chain, then), kind)
                   for name, (chain, then, kind) in loop_models.IF_CASES.items()})
    return {name: (_writer(name, model), kind) for name, (model, kind) in models.items()}


def rows(names: list[str], folder: Path) -> None:
    measured_rows(HEADER, graphs(), names, folder)


EVENT_TRIPS = (1_000, 10_000, 30_000, 100_000, 300_000)


def _seconds(work: Callable[[], object]) -> tuple[float, object]:
    """The best of two runs' CPU seconds, and what the work returned."""
    best, found = float("inf"), None
    for _ in range(2):
        start = time.process_time()
        found = work()
        best = min(best, time.process_time() - start)
    return best, found


def event_rows(trips_list: tuple[int, ...] = EVENT_TRIPS) -> None:
    from graphmem import analyze_onnx
    from graphmem.ops.control_flow import ControlFlowNode
    from graphmem.runtime_models import ort_loop

    ort_loop.MAX_LOOP_EVENTS = 10**12  # measured past the bound
    print("| trips | events | loop_scratch s | ort-cpu analysis s | runtime peak B |\n"
          "|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for trips in trips_list:
            case = dataclasses.replace(loop_models.FIT["m3"], trips=trips)
            path = Path(folder) / f"m{trips}.onnx"
            onnx.save(loop_models.loop(case), path)
            node = next(n for n in analyze_onnx(path, plan=False).graph.nodes
                        if isinstance(n, ControlFlowNode))
            scratch_s, scratch = _seconds(lambda node=node: ort_loop.loop_scratch(node, {}))
            assert isinstance(scratch, ort_loop.KernelScratch)
            events = len(scratch.sizes_bytes) + sum(len(f) for f in scratch.frees_after)
            whole_s, result = _seconds(lambda path=path: analyze_onnx(path, runtime="ort-cpu"))
            peak = result.runtime.runtime_peak_bytes  # type: ignore[attr-defined]
            print(f"| {trips:,} | {events:,} | {scratch_s:.2f} | {whole_s:.2f} | {peak:,} |",
                  flush=True)


DATA_TRIP_SEEDS = (0, 2, 3)


def data_trip_rows() -> None:
    print("| graph | set | level | seed | M | graphmem B | onnxruntime B | error |\n"
          "|---|---|---|---:|---:|---:|---:|---:|")
    cases = {name: (case, "fit" if name in loop_models.FIT else "held out")
             for name, case in {**loop_models.FIT, **loop_models.HELD_OUT}.items()}
    with tempfile.TemporaryDirectory() as folder:
        for name, (case, kind) in cases.items():
            path = Path(folder) / f"{name}_data.onnx"
            onnx.save(loop_models.loop(dataclasses.replace(case, data_trips=True)), path)
            _data_trip_row(f"{name} (M data)", kind, path, "m", {}, 8, DATA_TRIP_SEEDS)
        path = Path(folder) / "test_loop11.onnx"
        onnx.save(loop_models.onnx_test_loop11(), path)  # x[i] for i < 5: M at most 5
        # its cond is an input too: false at seed 2, where onnxruntime runs no iteration
        _data_trip_row("test_loop11", "fit", path, "trip_count", {"Loop_0_o1__d0": 1}, 6,
                       (0, 1, 2))
        for count in ("Size", "ReduceProd"):
            path = Path(folder) / f"{count}.onnx"
            onnx.save(loop_models.shape_trips_loop(count), path)
            _shape_trip_rows(f"M = {count} of x [batch, 4]", path)


def _shape_trip_rows(name: str, path: Path) -> None:
    """The Loop at batch 1, 3, 5: M = 4*batch, no trip dim to give."""
    from tests.helpers.ort import measure_all

    for level in ("disabled", "all"):
        for batch in (1, 3, 5):
            predicted, measured = measure_all(path, {"batch": batch}, level)
            print(f"| {name} | held out | {level} | - | {4 * batch} | {predicted:,} |"
                  f" {measured:,} | {predicted / measured - 1:+.2%} |", flush=True)


def _data_trip_row(name: str, kind: str, path: Path, trips_input: str,
                   dims: dict[str, int], high: int, seeds: tuple[int, ...]) -> None:
    from tests.helpers.ort import measure_data_trips

    for level in ("disabled", "all"):
        for seed in seeds:
            predicted, measured, trips = measure_data_trips(path, level, trips_input, seed,
                                                            dims, high)
            print(f"| {name} | {kind} | {level} | {seed} | {trips} | {predicted:,} |"
                  f" {measured:,} | {predicted / measured - 1:+.2%} |", flush=True)


if __name__ == "__main__":
    if "--data-trips" in sys.argv[1:]:
        data_trip_rows()
    elif "--events" in sys.argv[1:]:
        event_rows()
    else:
        zoo_onnx.main(rows, __doc__)
