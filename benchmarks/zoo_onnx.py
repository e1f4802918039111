"""The op-coverage zoo exported to ONNX, against onnxruntime (docs/zoo.md, "ONNX exports").

`python benchmarks/zoo_onnx.py [--folder DIR] [name ...]` exports each architecture of
tests/zoo_models.py at its zoo inputs (static shapes, opset 18; the TorchScript exporter, else
dynamo: tests/helpers/zoo_onnx.py), runs it once per optimization level on onnxruntime's CPU
provider (one thread, profiler on: `mem_in_use_peak`) and prints a markdown row per
architecture and level next to graphmem's ort-cpu prediction for the same session. The
exports are kept in DIR (default: a temporary folder) and re-used when there. A failure is a
row too, with its error.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.zoo_onnx import LEVELS, measure
from tests.zoo_models import MEASURED_ONCE, ZOO

HEADER = ("| architecture | family | exporter | level | graphmem B | onnxruntime B | error | s |\n"
          "|---|---|---|---|---:|---:|---:|---:|")


def rows(names: list[str], folder: Path) -> None:
    print(HEADER, flush=True)
    for entry in ZOO + (MEASURED_ONCE if names else []):  # those measured once by name
        if names and entry.name not in names:
            continue
        for level in LEVELS:
            start = time.perf_counter()
            try:
                r = measure(entry, folder, level)
            except Exception as error:  # noqa: BLE001 (a failure is a row, with its message)
                message = f"{type(error).__name__}: {error}".splitlines()[0][:200]
                print(f"| {entry.name} | {entry.family} | | {level} | **fails**: {message} |"
                      " | | |", flush=True)
                break
            print(f"| {entry.name} | {entry.family} | {r.exporter} | {level} |"
                  f" {r.predicted_bytes:,} | {r.measured_bytes:,} | {r.error:+.2%} |"
                  f" {time.perf_counter() - start:.1f} |", flush=True)


def main(rows_of: Callable[[list[str], Path], None] = rows, doc: str = __doc__) -> None:
    """Parse the command line and print `rows_of`'s table (benchmarks/zoo_onnx_routing.py
    uses it too)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="where the exports are kept")
    parser.add_argument("names", nargs="*", help="architectures (default: the whole zoo)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    if args.folder is not None:
        args.folder.mkdir(parents=True, exist_ok=True)
        rows_of(args.names, args.folder)
        return
    with tempfile.TemporaryDirectory() as folder:
        rows_of(args.names, Path(folder))


if __name__ == "__main__":
    main()
