"""`graphmem verify`: run the model on onnxruntime and print graphmem's prediction beside it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from graphmem.cli.commands import summary
from graphmem.cli.common import (
    Output,
    dims_dict,
    emit,
    is_model_spec,
    parse_dim_binding,
    parse_size_bytes,
    word_choice,
)
from graphmem.cli.inputs import (
    MAX_SEED,
    OutputFile,
    check_dims,
    check_input_file,
    check_int_range,
    check_model_argument,
    onnx_inputs,
    output_file,
    refuse_overwrites,
    spec_files,
)
from graphmem.core.conventions import DEFAULT_OPTIMIZER, Amp, Optimizer
from graphmem.core.output_files import write_output_text
from graphmem.errors import GraphmemError
from graphmem.pipeline.request import MAX_THREADS

DEFAULT_TIME_LIMIT_S = 600
MAX_TIME_LIMIT_S = 7 * 24 * 3600
MIN_MEMORY_LIMIT_BYTES = 512 * 2**20

NAME = "verify"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        NAME, help=summary(NAME),
        description="Run the model for real on onnxruntime (random inputs: floats standard"
        " normal, integers in [0, 100) and below the size of any table they index, booleans"
        " random) with its profiler, and print graphmem's predicted activation peak and"
        " per-node output sizes next to what onnxruntime measured. Models with external data"
        " need the data file.")
    parser.add_argument("model", help="an .onnx file, or a PyTorch model as file.py:fn or"
                        " package.module:fn (then one real step runs on torch)")
    parser.add_argument("--batch", type=int, help="bind the batch axis: a dim named like a"
                        " batch, else a dynamic axis 0 of the inputs")
    parser.add_argument("--dim", action="append", type=parse_dim_binding, default=[],
                        metavar="NAME=VALUE", help="bind a named dynamic dim (repeatable)")
    parser.add_argument("--provider", choices=("cpu", "cuda"), default="cpu",
                        help="onnxruntime execution provider (default cpu)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="onnxruntime intra-op threads (default: one per core); kernel"
                        " scratch such as Conv's im2col buffers grows with it")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--time-limit", type=int, default=DEFAULT_TIME_LIMIT_S,
                        metavar="SECONDS", help="stop each onnxruntime run after this long"
                        f" (default {DEFAULT_TIME_LIMIT_S})")
    parser.add_argument("--memory-limit", type=parse_size_bytes, metavar="SIZE",
                        help="the memory each onnxruntime run may map, e.g. 8GiB (default:"
                        " three quarters of the machine's memory)")
    parser.add_argument("--no-optimized-run", action="store_true",
                        help="skip the second run with every graph optimization on")
    parser.add_argument("--all-nodes", action="store_true",
                        help="list every node's output bytes, not only those that differ")
    parser.add_argument("--json", metavar="PATH", help="write the comparison as JSON"
                        " ('-' for stdout)")
    torch_options = parser.add_argument_group("PyTorch models (MODEL is file.py:fn)")
    torch_options.add_argument("--input", action="append", default=[],
                               metavar="[NAME=]SHAPE[:DTYPE]",
                               help="an example input, e.g. 8x3x224x224 or 4x128:int64"
                               " (repeatable, one per positional input); NAME=SHAPE is a"
                               " keyword input, e.g. attention_mask=4x128:int64")
    torch_options.add_argument("--train", action="store_true",
                               help="measure one whole training step, not inference")
    torch_options.add_argument("--optimizer", **word_choice(Optimizer, "--optimizer"),
                               help=f"with --train (default {DEFAULT_OPTIMIZER})")
    torch_options.add_argument("--amp", **word_choice(Amp, "--amp"),
                               help="autocast precision")
    torch_options.add_argument("--loss", metavar="FILE.py:FN",
                               help="loss(output) -> scalar, or mse (default: cross-entropy)")


def run(args: argparse.Namespace, console: Console) -> int:
    from graphmem.report.verify import (
        print_verification,
        verification_json_text,
        write_verification_json,
    )
    from graphmem.verify.onnx_run import RunLimits, verify_onnx

    check_model_argument(args.model)
    json_out = output_file("--json", args.json, stdout_ok=True)
    _check_options(args)
    if is_model_spec(args.model):
        return _verify_torch(args, json_out, console)
    if args.input or args.train or args.amp or args.loss:
        raise GraphmemError("--input/--train/--amp/--loss are for PyTorch models"
                            " (file.py:fn); an ONNX model's shapes come from --batch/--dim")
    model = Path(args.model)
    check_input_file("model", model)
    check_dims(args.batch, args.dim)
    dims = dims_dict(args.dim)
    outputs = [json_out] if json_out else []
    refuse_overwrites(outputs, onnx_inputs(model, outputs))
    result = verify_onnx(model, batch=args.batch, dims=dims, provider=args.provider,
                         threads=args.threads, seed=args.seed,
                         optimized_run=not args.no_optimized_run,
                         limits=RunLimits(args.time_limit, args.memory_limit or 0))
    emit(console, lambda out: print_verification(result, out, all_nodes=args.all_nodes),
         [Output(json_out, "JSON", lambda path: write_verification_json(result, path))],
         (lambda: verification_json_text(result)) if args.json == "-" else None)
    return 0


def _check_options(args: argparse.Namespace) -> None:
    """The numbers and option pairs, before the model is read or run."""
    check_int_range("--seed", args.seed, 0, MAX_SEED)
    check_int_range("--time-limit", args.time_limit, 1, MAX_TIME_LIMIT_S)
    if args.memory_limit is not None and args.memory_limit < MIN_MEMORY_LIMIT_BYTES:
        raise GraphmemError(f"--memory-limit {args.memory_limit:,} bytes: onnxruntime needs"
                            " more to start; give at least 512MiB")
    from graphmem.verify.onnx_run import check_run_threads

    check_int_range("--threads", args.threads, 1, MAX_THREADS)
    check_run_threads("--threads", args.threads)
    if args.optimizer is not None and not args.train:
        raise GraphmemError(f"--optimizer {args.optimizer} describes a training step: add"
                            " --train (or drop --optimizer)")
    args.optimizer = args.optimizer or DEFAULT_OPTIMIZER


def _verify_torch(args: argparse.Namespace, json_out: OutputFile | None,
                  console: Console) -> int:
    from graphmem.frontends.torch.loader import load_loss, parse_tensor_spec
    from graphmem.report.verify import print_torch_verification, torch_verification_json
    from graphmem.verify.torch_run import verify_torch

    if args.batch is not None or args.dim or args.threads is not None:
        raise GraphmemError("--batch/--dim/--threads are for ONNX models; for a PyTorch model"
                            " give the shapes with --input, e.g. --input 8x3x224x224")
    for text in args.input:
        parse_tensor_spec(text)
    refuse_overwrites([json_out] if json_out else [], spec_files((args.model, args.loss)))
    loss = load_loss(args.loss) if args.loss else None
    result = verify_torch(args.model, args.input, train=args.train, optimizer=args.optimizer,
                          amp=args.amp, loss=loss, device=args.provider, seed=args.seed)
    text = torch_verification_json(result)
    emit(console, lambda out: print_torch_verification(result, out),
         [Output(json_out, "JSON", lambda path: write_output_text(path, [text]))],
         (lambda: text) if args.json == "-" else None)
    return 0

