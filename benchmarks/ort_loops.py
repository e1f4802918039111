"""What onnxruntime's Loop and Scan hold, modelled (graphmem/runtime_models/ort_loop.py),
against its measured `mem_in_use_peak`.

`python benchmarks/ort_loops.py [--folder DIR] [name ...]` prints one markdown row per graph
and optimization level: graphmem's ort-cpu prediction next to onnxruntime's measurement (one
thread, the inputs verify makes up; tests/helpers/ort.py `measure_all`). The graphs are the
hand-built Loops of tests/helpers/loop_models.py, `fit` (what the model was checked on while
it was written) and `held out` (run only once it was), Scans of several lengths and Ifs. The
exports with a Loop (the EmbeddingBags, DLRM) are benchmarks/data_bounded_slices.py's.
"""

from __future__ import annotations

import sys
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


if __name__ == "__main__":
    zoo_onnx.main(rows, __doc__)
