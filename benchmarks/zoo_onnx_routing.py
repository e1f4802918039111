"""The zoo's ONNX mixtures of experts: how much of graphmem's error is the routing.

`python benchmarks/zoo_onnx_routing.py [--folder DIR] [name ...]` exports each mixture of
experts of tests/zoo_models.py (the zoo's and those measured once, e.g. DBRX; as
benchmarks/zoo_onnx.py does), runs it once on onnxruntime's CPU provider to read every
NonZero's count for the inputs verify makes up (seed 0), and prints per optimization level
graphmem's ort-cpu prediction under --moe-routing balanced, the same prediction with those
counts given (--dim), and onnxruntime's measured `mem_in_use_peak`. Where the second is to
the byte, the first's error is the routing (data), not a sizing rule.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import zoo_onnx
from graphmem.api import analyze_onnx
from graphmem.passes.routed_dims import count_dim
from graphmem.pipeline.runtime import runtime_estimate
from graphmem.verify.onnx_run import input_specs
from graphmem.verify.runners.onnxruntime_runner import run_onnx
from tests.helpers.zoo_onnx import LEVELS, export, run_counts
from tests.zoo_models import MEASURED_ONCE, ZOO

HEADER = ("| architecture | level | balanced B | at the run's counts B | onnxruntime B |"
          " balanced error | at counts error | the run's expert loads |\n"
          "|---|---|---:|---:|---:|---:|---:|---|")


def rows(names: list[str], folder: Path) -> None:
    print(HEADER, flush=True)
    for entry in (*ZOO, *MEASURED_ONCE):
        if entry.family != "moe" or (names and entry.name not in names):
            continue
        try:
            path = export(entry, folder).path
        except Exception as error:  # noqa: BLE001 (a failure is a row, with its message)
            message = f"{type(error).__name__}: {error}".splitlines()[0][:200]
            print(f"| {entry.name} | | **fails**: {message} | | | | | |", flush=True)
            continue
        counts = run_counts(path, folder)
        balanced = analyze_onnx(path, plan=False)
        dims = {dim: counts[node.outputs[0].name] for node in balanced.graph.nodes
                if node.op_type == "NonZero" and (dim := count_dim(node.outputs[0]))}
        given = analyze_onnx(path, dims=dims, plan=False) if dims else balanced
        loads = [counts[node.outputs[0].name] for node in balanced.graph.nodes
                 if node.op_type == "NonZero" and node.outputs[0].shape is not None
                 and len(node.outputs[0].shape) == 2 and node.inputs[0] is not None
                 and node.inputs[0].shape is not None and len(node.inputs[0].shape) == 2]
        for level in LEVELS:
            ours, theirs = (runtime_estimate(a, "ort-cpu", None, threads=1,
                                             ort_optimization=level).runtime_peak_bytes
                            for a in (balanced, given))
            measured = run_onnx(path, input_specs(balanced), "cpu", level, 1).peak_bytes
            print(f"| {entry.name} | {level} | {ours:,} | {theirs:,} | {measured:,} |"
                  f" {ours / measured - 1:+.2%} | {theirs / measured - 1:+.2%} |"
                  f" {' '.join(map(str, loads))} |", flush=True)


if __name__ == "__main__":
    zoo_onnx.main(rows, __doc__)
