"""`graphmem verify`: run the model on onnxruntime and print graphmem's prediction beside it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from graphmem.errors import GraphmemError


def add_verify_parser(commands: Any) -> None:
    from graphmem.cli import parse_dim_binding

    parser = commands.add_parser(
        "verify", help="run an ONNX model on onnxruntime and compare graphmem's prediction",
        description="Run the model for real on onnxruntime (random inputs: floats standard"
        " normal, integers in [0, 100) and below the size of any table they index, booleans"
        " random) with its profiler, and print graphmem's predicted activation peak and"
        " per-node output sizes next to what onnxruntime measured. Models with external data"
        " need the data file.")
    parser.add_argument("model", help="an .onnx file")
    parser.add_argument("--batch", type=int, help="bind the first dynamic dim of the inputs")
    parser.add_argument("--dim", action="append", type=parse_dim_binding, default=[],
                        metavar="NAME=VALUE", help="bind a named dynamic dim (repeatable)")
    parser.add_argument("--provider", choices=("cpu", "cuda"), default="cpu",
                        help="onnxruntime execution provider (default cpu)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="onnxruntime intra-op threads (default: one per core); kernel"
                        " scratch such as Conv's im2col buffers grows with it")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--no-optimized-run", action="store_true",
                        help="skip the second run with every graph optimization on")
    parser.add_argument("--all-nodes", action="store_true",
                        help="list every node's output bytes, not only those that differ")
    parser.add_argument("--json", metavar="PATH", help="write the comparison as JSON"
                        " ('-' for stdout)")


def run_verify_command(args: argparse.Namespace, console: Console) -> int:
    from graphmem.reports.verify_report import (
        print_verification,
        verification_json_text,
        write_verification_json,
    )
    from graphmem.verify import verify_onnx

    if args.threads is not None and args.threads < 1:
        raise GraphmemError(f"--threads {args.threads}: give 1 or more")
    model = Path(args.model)
    json_path = None if args.json in (None, "-") else Path(args.json)
    if json_path and json_path.exists() and model.exists() and (
            json_path.resolve() == model.resolve()):
        raise GraphmemError(f"'{json_path}' is the model itself: choose another output path")
    result = verify_onnx(model, batch=args.batch, dims=_dims(args.dim), provider=args.provider,
                         threads=args.threads, seed=args.seed,
                         optimized_run=not args.no_optimized_run)
    if args.json == "-":
        sys.stdout.write(verification_json_text(result))
        console = Console(stderr=True, highlight=False)
    print_verification(result, console, all_nodes=args.all_nodes)
    if json_path:
        write_verification_json(result, json_path)
        console.print(f"JSON written to {json_path}", soft_wrap=True)
    return 0


def _dims(bindings: list[tuple[str, int]]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for name, value in bindings:
        if dims.get(name, value) != value:
            raise GraphmemError(f"--dim {name} is given twice ({dims[name]} and {value})")
        dims[name] = value
    return dims
