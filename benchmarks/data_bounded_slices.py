"""Dims the data sets within an input's extent, planned at their bound, against onnxruntime
(docs/runtime-models.md, "Sizes that follow the data"; graphmem/passes/extent_bounds.py).

`python benchmarks/data_bounded_slices.py [--folder DIR] [name ...]` prints one markdown row
per graph and optimization level: graphmem's ort-cpu prediction (no dim given: each data-sized
dim at its bound) next to onnxruntime's measured `mem_in_use_peak` (one thread, the inputs
verify makes up; tests/helpers/ort.py `measure_all`). The graphs: the small hand-built ones
of tests/helpers/data_slices.py (a Slice of data starts/ends at top level, with steps,
negative indices, two axes, in a Loop body, in an If branch), the TorchScript exports of
tests/helpers/data_slice_exports.py, and the zoo's DLRM (tests/helpers/zoo_onnx.py). The
exports are kept in DIR (default: a temporary folder) and re-used when there.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import zoo_onnx
from tests.helpers import data_slice_exports, data_slices
from tests.helpers.ort import measure_all
from tests.helpers.zoo_onnx import LEVELS, export
from tests.zoo_models import MEASURED_ONCE, ZOO

HEADER = ("| graph | whole extent | level | graphmem B | onnxruntime B | error |\n"
          "|---|---|---|---:|---:|---:|")


def _dlrm(folder: Path) -> Path:
    return export(next(e for e in ZOO + MEASURED_ONCE if e.name == "dlrm"), folder).path


def graphs() -> dict[str, tuple[Callable[[Path], Path], str]]:
    """name -> (what writes it into a folder, whether its data takes the whole extent)."""
    found: dict[str, tuple[Callable[[Path], Path], str]] = {
        f"slice_{kind}": (lambda folder, kind=kind: data_slices.save(kind, folder),
                          "yes" if whole else "no")
        for kind, (_, whole) in data_slices.KINDS.items()}
    # the exports' runs take part: 4 ids of a bag's 12 (DLRM: of 8), 20 positions of 40
    found.update({name: (lambda folder, name=name: data_slice_exports.export(name, folder),
                         "no") for name in data_slice_exports.EXPORTS})
    found["dlrm"] = (_dlrm, "no")
    return found


def rows(names: list[str], folder: Path) -> None:
    measured_rows(HEADER, graphs(), names, folder)


def measured_rows(header: str, found: dict[str, tuple[Callable[[Path], Path], str]],
                  names: list[str], folder: Path) -> None:
    """One row per graph of `found` (all, or those `names` lists) and level: graphmem's
    prediction, onnxruntime's measurement, the error (benchmarks/ort_loops.py too)."""
    print(header, flush=True)
    for name, (write, kind) in found.items():
        if names and name not in names:
            continue
        path = write(folder)
        for level in LEVELS:
            predicted, measured = measure_all(path, None, level)
            print(f"| {name} | {kind} | {level} | {predicted:,} | {measured:,} |"
                  f" {predicted / measured - 1:+.2%} |", flush=True)


if __name__ == "__main__":
    zoo_onnx.main(rows, __doc__)
