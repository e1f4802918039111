"""`graphmem gpus`: the GPU table; with `--fits MODEL`, which of them run an ONNX model."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from graphmem.cli.commands import summary
from graphmem.cli.common import dims_dict, is_model_spec, parse_dim_binding, parse_size_bytes
from graphmem.cli.inputs import check_dims, check_input_file, check_model_argument
from graphmem.errors import GraphmemError
from graphmem.pipeline import run as pipeline
from graphmem.pipeline.request import Request, SuggestOptions

NAME = "gpus"
EXIT_OK = 0


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        NAME, help=summary(NAME))
    parser.add_argument("--fits", metavar="MODEL",
                        help="an .onnx model: which GPUs run it (peak, latency, max batch)")
    parser.add_argument("--batch", type=int, help="with --fits: bind the batch dim")
    parser.add_argument("--dim", action="append", type=parse_dim_binding, default=[],
                        metavar="NAME=VALUE", help="with --fits: bind a named dynamic dim")
    parser.add_argument("--cuda-reserve", type=parse_size_bytes, metavar="SIZE",
                        help="with --fits: non-tensor CUDA memory to assume")


def run(args: argparse.Namespace, console: Console) -> int:
    from graphmem.report.terminal.gpus import print_gpu_table

    if args.fits is None:
        if args.batch is not None or args.dim or args.cuda_reserve is not None:
            raise GraphmemError("--batch/--dim/--cuda-reserve go with --fits MODEL")
        print_gpu_table(console)
        return EXIT_OK
    check_model_argument(args.fits, onnx_only="graphmem gpus --fits")
    check_input_file("--fits", Path(args.fits))
    check_dims(args.batch, args.dim)
    dims = dims_dict(args.dim)
    if is_model_spec(args.fits):
        raise GraphmemError(f"--fits {args.fits}: give an .onnx file (for a PyTorch model use"
                            " 'graphmem analyze file.py:fn --input SHAPE --gpu NAME')")
    print_fits(Request(Path(args.fits), batch=args.batch, dims=dims, plan=False,
                       suggest=SuggestOptions(enabled=False)), args.cuda_reserve, console)
    return EXIT_OK


def print_fits(request: Request, cuda_reserve_bytes: int | None, console: Console) -> None:
    """The model (planned without a GPU) against every GPU of the table."""
    from graphmem.devices.gpus import load_gpu_table
    from graphmem.report.terminal.plan import gpu_fits_table

    analysis, rows = pipeline.fits_on_gpus(request, load_gpu_table(), cuda_reserve_bytes)
    console.print(gpu_fits_table(analysis, rows))
