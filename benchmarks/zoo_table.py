"""The op-coverage zoo's table (docs/zoo.md): each architecture of tests/zoo_models.py,
inference and an AdamW training step, through graphmem next to the real model.

`python benchmarks/zoo_table.py [name ...]` prints a markdown row per architecture and step:
unsupported ops, parameters (graphmem's and the real model's sum of numel), MACs over
FlopCounterMode's, and the predicted peak against a real CPU step (torch.profiler): graphmem's
live-tensor peak against the step's tensors, and its torch-cpu runtime model (the default for
a PyTorch model without --gpu: kernels' scratch added) against the allocator's peak. A failure
is a row too, with its error.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.zoo import check
from tests.zoo_models import MEASURED_ONCE, ZOO

HEADER = ("| architecture | family | step | unsupported | params | MACs / FlopCounterMode |"
          " predicted peak (B) | vs tensors | torch-cpu peak (B) | vs allocator (scratch incl.) |"
          " s |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")


def row(name: str, family: str, train: bool) -> str:
    entry = next(z for z in ZOO + MEASURED_ONCE if z.name == name)
    step = "training" if train else "inference"
    start = time.perf_counter()
    try:
        r = check(entry, train)
    except Exception as error:  # noqa: BLE001 (a failure is a row, with its message)
        message = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        return f"| {name} | {family} | {step} | **fails**: {message} | | | | | | | |"
    unsupported = ", ".join(f"{op} x{n}" for op, n in r.unsupported.items()) or "0"
    params = f"{r.params:,}" + ("" if r.params == r.real_params else f" (real {r.real_params:,})")
    return (f"| {name} | {family} | {step} | {unsupported} | {params} | {r.macs_ratio:.4f} |"
            f" {r.predicted_peak_bytes:,} | {r.peak_error:+.2%} | {r.predicted_allocator_bytes:,} |"
            f" {r.allocator_error:+.2%} |"
            f" {time.perf_counter() - start:.1f} |")


def main(names: list[str]) -> None:
    warnings.filterwarnings("ignore")
    print(HEADER, flush=True)
    for entry in ZOO + MEASURED_ONCE:
        if names and entry.name not in names:
            continue
        for train in (False, True):
            print(row(entry.name, entry.family, train), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
