"""How graphmem's time and memory grow with the counts a hostile model can choose (issue 26,
items 8-11): each model of tests/hostile_models.py at 10^3, 10^4 and 10^5 of its count,
analysed by `python -m graphmem analyze MODEL --batch 2 --html out.html` in a fresh process and
folder (4 GB address-space limit; a run past --limit seconds is stopped and shown as such).

    python benchmarks/hostile_scaling.py [--counts 1000,10000,100000] [--limit 120]
                                         [--only outputs,functions]
    python benchmarks/hostile_scaling.py --carriers [--bulk-bytes 2000000000]
    python benchmarks/hostile_scaling.py --unpacked [--counts 1000000,40000000]

`--carriers`: instead, where bulk hides and what a file declares (tests/hostile_carriers.py):
each bulk carrier written as a sparse file of --bulk-bytes, and again at 31 MiB (just under
the optimizing session's budget), each declared carrier at 10^12 elements; `analyze` and
`verify --memory-limit 3GiB` of each, with the CPU seconds of the process (its children
included) and its own peak RSS (not its children's: verify's run is bounded by its limit).

`--unpacked`: bulk written for real as runs of small fields of one tag (tests/hostile_unpacked.py:
a tensor's int64_data or float_data one field a number, a Constant's value_ints, 40 million
empty nodes...), each at each count, `analyze` with the default options.

Columns: wall seconds of the whole process, its CPU seconds (user + system, from wait4: the
machines this runs on are shared, and under load wall time is a multiple of CPU time; compare
rows of one run), its peak RSS (ru_maxrss of the process, spawned, not forked), and how it
ended (exit code; `2` is a stated refusal, its line shown).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import hostile_carriers as carriers
from tests import hostile_models as hostile
from tests import hostile_unpacked as unpacked
from tests.helpers.hostile_run import Outcome, run_cli

# what each count means, and the builder (the depth and the constant's elements scale too)
COUNTS = {
    "outputs": "graph outputs",
    "functions": "local functions, one call each",
    "sum-inputs": "inputs of one Sum",
    "concat-inputs": "inputs of one Concat",
    "split-outputs": "outputs of one Split",
    "inputs": "graph inputs, each added by a node of its own",
    "relu-chain": "Relu nodes in a chain",
    "identity-chain": "Identity nodes in a chain",
    "if-arms": "If nodes in a chain (two arms each)",
    "attributes": "attributes of one node",
    "nested-functions": "function calls nested",
    "cos-with-if": "int64 ConstantOfShape elements (x10^4), beside an If",
    "doc-string": "doc string bytes (x10^3)",
}
_SCALE = {"cos-with-if": 10**4, "doc-string": 10**3}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1000,10000,100000")
    parser.add_argument("--limit", type=float, default=120.0, help="seconds per run")
    parser.add_argument("--only", default="", help="comma-separated builders")
    parser.add_argument("--carriers", action="store_true", help="the bulk and declared rows")
    parser.add_argument("--bulk-bytes", type=int, default=2_000_000_000)
    parser.add_argument("--unpacked", action="store_true", help="runs of small fields")
    args = parser.parse_args()
    if args.carriers:
        return carrier_rows(args.bulk_bytes, args.limit)
    if args.unpacked:
        return unpacked_rows([int(c) for c in args.counts.split(",")], args.limit)
    counts = [int(c) for c in args.counts.split(",")]
    names = [n for n in COUNTS if not args.only or n in args.only.split(",")]
    print("| model | count | seconds | CPU s | peak RSS | exit |")
    print("|---|---:|---:|---:|---:|---|")
    for name in names:
        for count in counts:
            print(_row(name, count, args.limit), flush=True)
    return 0


def _row(name: str, count: int, limit_s: float) -> str:
    with tempfile.TemporaryDirectory(prefix="graphmem-bench-") as folder:
        model = hostile.BUILDERS[name](count * _SCALE.get(name, 1))
        (Path(folder) / "model.onnx").write_bytes(model.SerializeToString())
        del model
        outcome = run_cli(Path(folder), "analyze", "model.onnx", "--batch", "2", "--html",
                          "out.html", limit_s=limit_s)
    return (f"| {name} ({COUNTS[name]}) | {count:,} | {outcome.seconds:.1f} |"
            f" {outcome.cpu_seconds:.1f} | {outcome.max_rss_bytes / 2**20:,.0f} MiB |"
            f" {_ended(outcome)} |")


def carrier_rows(bulk_bytes: int, limit_s: float) -> int:
    """One row per carrier, size and command (module docstring)."""
    print("| carrier | size | command | CPU s | peak RSS | exit |")
    print("|---|---:|---|---:|---:|---|")
    for name in carriers.SPARSE_CARRIERS:
        for size in (bulk_bytes, 31 * 2**20):
            for command in ("analyze", "verify"):
                print(_carrier_row(name, size, command, limit_s, sparse=True), flush=True)
    for name in carriers.DECLARED:
        for command in ("analyze", "verify"):
            print(_carrier_row(name, 10**12, command, limit_s, sparse=False), flush=True)
    return 0


def _carrier_row(name: str, size: int, command: str, limit_s: float, sparse: bool) -> str:
    with tempfile.TemporaryDirectory(prefix="graphmem-bench-") as folder:
        path = Path(folder) / "model.onnx"
        if sparse:
            carriers.write_carrier(path, name, size)
        else:
            path.write_bytes(carriers.DECLARED[name](size).SerializeToString())
        limit = ("--memory-limit", "3GiB") if command == "verify" else ()
        outcome = run_cli(Path(folder), command, "model.onnx", "--batch", "2", *limit,
                          limit_s=limit_s)
    what = f"{size:,} bytes (sparse)" if sparse else f"{size:.0e} elements"
    return (f"| {name} | {what} | {command} | {outcome.cpu_seconds:.1f} |"
            f" {outcome.max_rss_bytes / 2**20:,.0f} MiB | {_ended(outcome)} |")


def unpacked_rows(counts: list[int], limit_s: float) -> int:
    """One row per run of small fields and count (module docstring)."""
    print("| run | fields | file | CPU s | peak RSS | exit |")
    print("|---|---:|---:|---:|---:|---|")
    for name in unpacked.UNPACKED:
        for count in counts:
            with tempfile.TemporaryDirectory(prefix="graphmem-bench-") as folder:
                size = unpacked.write_unpacked(Path(folder) / "model.onnx", name, count)
                outcome = run_cli(Path(folder), "analyze", "model.onnx", "--batch", "2",
                                  limit_s=limit_s)
            print(f"| {name} | {count:,} | {size / 1e6:,.0f} MB | {outcome.cpu_seconds:.1f} |"
                  f" {outcome.max_rss_bytes / 2**20:,.0f} MiB | {_ended(outcome)} |", flush=True)
    return 0


def _ended(outcome: Outcome) -> str:
    ended = str(outcome.code)
    if outcome.code == 2:
        ended += ": " + outcome.err.strip().removeprefix("graphmem: error: ")[:90]
    return ended


if __name__ == "__main__":
    sys.exit(main())
