"""The `graphmem` command line: analyze a model, list the GPUs it knows.

Every user-facing error is one line `graphmem: error: <what is wrong and what to do>` on stderr
with exit code 2; nothing the user gave is modified.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from rich.console import Console

from graphmem import __version__
from graphmem.check_command import add_check_parser, run_check_command
from graphmem.distributed_command import add_distributed_options, apply_distributed_options
from graphmem.errors import GraphmemError
from graphmem.passes.runtime_model import RUNTIMES
from graphmem.runtime_analysis import ORT_OPTIMIZATION_LEVELS
from graphmem.suggest_command import (
    add_suggest_options,
    budget_bytes,
    wants_suggestions,
    with_graph_suggestions,
)
from graphmem.verify_command import add_verify_parser, run_verify_command

if TYPE_CHECKING:
    from graphmem.analysis import Analysis
    from graphmem.planning import SweepRequest

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERNAL = 3

_SIZE_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
               "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


class _Parser(argparse.ArgumentParser):
    """argparse with graphmem's one-line error format."""

    def error(self, message: str) -> NoReturn:
        raise GraphmemError(f"{message} (see '{self.prog} --help')")


def parse_dim_binding(text: str) -> tuple[str, int]:
    """`batch=8` -> ("batch", 8)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not re.fullmatch(r"-?\d+", value.strip()):
        raise argparse.ArgumentTypeError(f"'{text}' is not NAME=INTEGER, e.g. --dim seq=512")
    return name.strip(), int(value)


def parse_size_bytes(text: str) -> int:
    """`512MiB`, `1.5GiB`, `800000000` -> bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size such as 512MiB or 1.5GiB")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="graphmem", description=(
        "Static GPU memory and compute analysis of deep-learning models, before any GPU time."))
    parser.add_argument("--version", action="version", version=f"graphmem {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback behind an error (anywhere on the line)")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_analyze(commands.add_parser(
        "analyze", help="analyze a model (ONNX file or PyTorch file.py:fn): memory, FLOPs, fit"))
    _add_gpus(commands.add_parser(
        "gpus", help="list the GPUs graphmem knows, with their datasheet figures"))
    add_check_parser(commands)
    add_verify_parser(commands)
    return parser


def _add_gpus(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fits", metavar="MODEL",
                        help="an .onnx model: which GPUs run it (peak, latency, max batch)")
    parser.add_argument("--batch", type=int, help="with --fits: bind the batch dim")
    parser.add_argument("--dim", action="append", type=parse_dim_binding, default=[],
                        metavar="NAME=VALUE", help="with --fits: bind a named dynamic dim")
    parser.add_argument("--cuda-reserve", type=parse_size_bytes, metavar="SIZE",
                        help="with --fits: non-tensor CUDA memory to assume")


def _add_analyze(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="an .onnx file (external weight data is not read), or a"
                        " PyTorch model as file.py:fn or package.module:fn")
    parser.add_argument("--gpu", help="GPU name from 'graphmem gpus' (e.g. t4, a100-80gb)")
    parser.add_argument("--batch", type=int, help="bind the first dynamic dim of the inputs")
    parser.add_argument("--dim", action="append", type=parse_dim_binding, default=[],
                        metavar="NAME=VALUE", help="bind a named dynamic dim (repeatable)")
    parser.add_argument("--json", metavar="PATH", help="write the JSON result ('-' for stdout)")
    parser.add_argument("--html", metavar="PATH",
                        help="write the HTML report here (default: ./<model>.graphmem.html)")
    parser.add_argument("--no-html", action="store_true", help="do not write the HTML report")
    parser.add_argument("--cuda-reserve", type=parse_size_bytes, metavar="SIZE",
                        help="non-tensor CUDA memory to assume (default: measured, see README)")
    parser.add_argument("--depth", type=int, default=2, metavar="N",
                        help="group FLOPs, parameters and peak memory by module path at depth N")
    parser.add_argument("--runtime", choices=RUNTIMES,
                        help="model what this runtime holds (default: ort-cuda for ONNX with"
                        " --gpu, ort-cpu for ONNX without, torch-cuda for PyTorch with --gpu)")
    parser.add_argument("--ort-optimization", choices=ORT_OPTIMIZATION_LEVELS,
                        help="ort-cpu: the session's graph optimization level; graphmem plans"
                        " the graph onnxruntime optimizes at that level (default: all,"
                        " onnxruntime's default, for models with up to 256 MiB of weights;"
                        " above, the graph as written unless a level is given)")
    parser.add_argument("--sweep", metavar="DIM=VALUES",
                        help="peak, fit, latency and throughput at each value of a dim, e.g."
                        " batch=1,2,4,...,256 (ONNX models)")
    add_distributed_options(parser)
    add_suggest_options(parser)
    torch_options = parser.add_argument_group("PyTorch models (MODEL is file.py:fn or pkg.mod:fn)")
    torch_options.add_argument("--input", action="append", default=[], metavar="SHAPE[:DTYPE]",
                               help="an example input, e.g. 32x3x224x224 or 4x1024:int64"
                               " (repeat for each positional input)")
    torch_options.add_argument("--example-inputs", metavar="FILE.py:FN",
                               help="a function returning the example inputs (a tensor or a"
                               " tuple of them), called on the meta device; instead of --input")
    torch_options.add_argument("--train", action="store_true",
                               help="analyze one whole training step (forward, backward, update)")
    torch_options.add_argument("--optimizer", default="adam",
                               help="sgd, momentum, adam or adamw (default adam)")
    torch_options.add_argument("--amp", choices=("fp16", "bf16"), help="autocast precision")
    torch_options.add_argument("--grad-accum", type=int, default=1, metavar="N",
                               help="micro-batches per optimizer step (memory is per micro-batch)")
    torch_options.add_argument("--loss", metavar="FILE.py:FN",
                               help="loss(output) -> scalar (default: cross-entropy)")


def main(argv: Sequence[str] | None = None) -> int:
    stdout = Console(highlight=False)
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        args = build_parser().parse_args([w for w in words if w != "--debug"])
        if args.command == "gpus":
            return _run_gpus(args, stdout)
        if args.command == "check":
            return run_check_command(args, stdout)
        if args.command == "verify":
            return run_verify_command(args, stdout)
        return _run_analyze(args, stdout)
    except GraphmemError as error:
        if _debug(argv) and error.__cause__ is not None:
            traceback.print_exception(error.__cause__)
        print(f"graphmem: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("graphmem: error: interrupted", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:  # noqa: BLE001 - a bug must still end in one clear line
        if _debug(argv):
            traceback.print_exc()
        print(f"graphmem: error: internal error ({type(error).__name__}: {error}); please report"
              " it with the model (--debug shows the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


def _debug(argv: Sequence[str] | None) -> bool:
    """`--debug` anywhere on the command line, or GRAPHMEM_DEBUG=1: show tracebacks."""
    words = sys.argv[1:] if argv is None else argv
    return "--debug" in words or bool(os.environ.get("GRAPHMEM_DEBUG"))


def _run_gpus(args: argparse.Namespace, console: Console) -> int:
    from graphmem.reports.gpu_table import print_gpu_table

    if args.fits is None:
        if args.batch is not None or args.dim or args.cuda_reserve is not None:
            raise GraphmemError("--batch/--dim/--cuda-reserve go with --fits MODEL")
        print_gpu_table(console)
        return EXIT_OK
    from graphmem.fits_command import print_fits

    print_fits(args.fits, args.batch, _dims_dict(args.dim), args.cuda_reserve, console)
    return EXIT_OK


def _run_analyze(args: argparse.Namespace, console: Console) -> int:
    from graphmem.analysis import analyze_onnx
    from graphmem.reports.json_report import to_json_text, write_json
    from graphmem.reports.terminal import print_summary

    model_path = Path(args.model)
    default_html = f"{_report_stem(args.model)}.graphmem.html"
    html_path = None if args.no_html else Path(args.html or default_html)
    json_path = None if args.json in (None, "-") else Path(args.json)
    _refuse_overwriting_input(model_path, [p for p in (html_path, json_path) if p])
    dims = _dims_dict(args.dim)
    if args.depth < 1:
        raise GraphmemError(f"--depth {args.depth}: give 1 or more (1 = top-level modules)")
    if _is_torch_spec(args.model):
        analysis = _analyze_torch(args)
    else:
        _refuse_torch_options(args)
        analysis = analyze_onnx(model_path, batch=args.batch, dims=dims, gpu=args.gpu,
                                cuda_reserve_bytes=args.cuda_reserve, module_depth=args.depth,
                                sweep=_sweep_request(args.sweep), train=args.train,
                                optimizer=args.optimizer, amp=args.amp,
                                grad_accum=args.grad_accum)
        if wants_suggestions(args):
            analysis = with_graph_suggestions(analysis, _budget(args), functools.partial(
                analyze_onnx, model_path, batch=args.batch, dims=dims, gpu=args.gpu, plan=False,
                train=True, optimizer=args.optimizer, amp=args.amp, grad_accum=args.grad_accum))
    analysis = _with_runtime(args, analysis)
    analysis = apply_distributed_options(analysis, args)
    if args.json == "-":
        sys.stdout.write(to_json_text(analysis))
        console = Console(stderr=True, highlight=False)
    print_summary(analysis, console)
    if json_path:
        write_json(analysis, json_path)
        console.print(f"JSON written to {json_path}")
    if html_path:
        from graphmem.reports.html import write_html

        write_html(analysis, html_path)
        console.print(f"HTML report written to {html_path}")
    return EXIT_OK


def _with_runtime(args: argparse.Namespace, analysis: Analysis) -> Analysis:
    """--runtime, or the default for the input kind (graphmem/runtime_analysis.py)."""
    from graphmem.gpus import find_gpu
    from graphmem.runtime_analysis import check_runtime, default_runtime, with_runtime

    is_onnx = not _is_torch_spec(args.model)
    has_gpu, training = args.gpu is not None, analysis.mode == "training"
    runtime = args.runtime or default_runtime(is_onnx, has_gpu, training)
    if runtime is None:
        return analysis
    check_runtime(runtime, is_onnx, has_gpu, training)
    gpu = find_gpu(args.gpu) if has_gpu else None
    return with_runtime(analysis, runtime, gpu, args.cuda_reserve,
                        ort_optimization=args.ort_optimization)


def _sweep_request(text: str | None) -> SweepRequest | None:
    from graphmem.passes.sweep import parse_sweep
    from graphmem.planning import SweepRequest

    return None if text is None else SweepRequest(*parse_sweep(text))


def _is_torch_spec(model: str) -> bool:
    return ":" in model and not Path(model).exists() and not model.endswith(".onnx")


def _report_stem(model: str) -> str:
    return model.rpartition(":")[2] if _is_torch_spec(model) else Path(model).stem


def _refuse_torch_options(args: argparse.Namespace) -> None:
    given = [flag for flag, value in (("--input", args.input), ("--loss", args.loss),
                                      ("--example-inputs", args.example_inputs)) if value]
    if given:
        raise GraphmemError(
            f"{', '.join(given)} apply to PyTorch models (file.py:fn); ONNX models take"
            " --batch/--dim (and --train computes cross-entropy on the first output)")
    if not args.train and (args.amp or args.grad_accum != 1):
        raise GraphmemError("--amp/--grad-accum describe a training step: add --train")


def _analyze_torch(args: argparse.Namespace) -> Analysis:
    from graphmem.importers.torch_loader import load_callable
    from graphmem.torch_analysis import analyze_torch

    if args.batch is not None or args.dim:
        raise GraphmemError("--batch/--dim bind ONNX dims; for a PyTorch model give the"
                            " shapes with --input, e.g. --input 32x3x224x224")
    if args.sweep:
        raise GraphmemError("--sweep varies a dynamic dim of an ONNX model; a PyTorch model is"
                            " traced at fixed shapes: run it once per --input instead")
    loss = load_callable(args.loss) if args.loss else None
    _resolve_example_inputs(args)
    return analyze_torch(args.model, args.input, train=args.train, optimizer=args.optimizer,
                         amp=args.amp, grad_accum=args.grad_accum, loss=loss, gpu=args.gpu,
                         cuda_reserve_bytes=args.cuda_reserve, module_depth=args.depth,
                         suggest=wants_suggestions(args), memory_budget_bytes=_budget(args))


def _resolve_example_inputs(args: argparse.Namespace) -> None:
    """--example-inputs FILE.py:FN becomes the --input list it stands for."""
    from graphmem.importers.torch_loader import load_example_inputs, spec_text

    if args.example_inputs is None:
        return
    if args.input:
        raise GraphmemError("give the inputs either with --input or with --example-inputs,"
                            " not both")
    args.input = [spec_text(spec) for spec in load_example_inputs(args.example_inputs)]


def _budget(args: argparse.Namespace) -> int | None:
    return budget_bytes(args.memory_budget, args.gpu, args.cuda_reserve)


def _dims_dict(bindings: list[tuple[str, int]]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for name, value in bindings:
        if name in dims and dims[name] != value:
            raise GraphmemError(f"--dim {name} is given twice ({dims[name]} and {value})")
        dims[name] = value
    return dims


def _refuse_overwriting_input(model_path: Path, outputs: list[Path]) -> None:
    for output in outputs:
        if output.exists() and model_path.exists() and output.resolve() == model_path.resolve():
            raise GraphmemError(f"'{output}' is the model itself: choose another output path")
        if output.is_dir():
            raise GraphmemError(f"'{output}' is a directory: give a file path for the output")


if __name__ == "__main__":
    sys.exit(main())
