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
from graphmem.cli.check import add_check_parser, run_check_command
from graphmem.cli.distributed_options import (
    add_distributed_options,
    apply_distributed_options,
    check_distributed_options,
)
from graphmem.cli.inputs import (
    OutputFile,
    check_dims,
    check_input_file,
    check_int_range,
    check_model_argument,
    is_model_spec,
    onnx_inputs,
    output_file,
    print_written,
    refuse_overwrites,
    spec_files,
    writing,
)
from graphmem.cli.suggest_options import (
    add_suggest_options,
    budget_bytes,
    wants_suggestions,
    with_graph_suggestions,
)
from graphmem.cli.verify import add_verify_parser, run_verify_command
from graphmem.errors import GraphmemError
from graphmem.gate.budgets import SpecError, parse_size
from graphmem.runtime_models.base import RUNTIMES
from graphmem.runtime_models.select import ORT_OPTIMIZATION_LEVELS

if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis
    from graphmem.pipeline.planning import SweepRequest

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERNAL = 3
DEFAULT_OPTIMIZER = "adam"


class _Parser(argparse.ArgumentParser):
    """argparse with graphmem's one-line error format."""

    def error(self, message: str) -> NoReturn:
        raise GraphmemError(f"{message} (see '{self.prog} --help')")


def parse_dim_binding(text: str) -> tuple[str, int]:
    """`batch=8` -> ("batch", 8)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not re.fullmatch(r"-?\d+", value.strip()):
        raise argparse.ArgumentTypeError(f"'{text}' is not NAME=INTEGER, e.g. --dim seq=512")
    # int() refuses thousands of digits; 21 characters keep the sign and the range check's say
    return name.strip(), int(value.strip()[:21])


def parse_size_bytes(text: str) -> int:
    """`512MiB`, `1.5GiB`, `800000000` -> bytes (finite, at most 4 EiB)."""
    try:
        return parse_size(text)
    except SpecError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


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
    torch_options.add_argument("--optimizer", help="with --train: sgd, momentum, adam or adamw"
                               f" (default {DEFAULT_OPTIMIZER})")
    torch_options.add_argument("--amp", choices=("fp16", "bf16"), help="autocast precision")
    torch_options.add_argument("--grad-accum", type=int, default=1, metavar="N",
                               help="micro-batches per optimizer step (memory is per micro-batch)")
    torch_options.add_argument("--loss", metavar="FILE.py:FN",
                               help="loss(output) -> scalar (default: cross-entropy)")


def main(argv: Sequence[str] | None = None) -> int:
    # emoji=False: a model's names are shown as written (':warning:' stays text)
    stdout = Console(highlight=False, emoji=False)
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        # --help and --version exit here (SystemExit 0); usage errors are GraphmemError
        args = build_parser().parse_args([w for w in words if w != "--debug"])
    except GraphmemError as error:
        return _usage_error(error, argv)
    try:
        return _run_command(args, stdout)
    except GraphmemError as error:
        return _usage_error(error, argv)
    except KeyboardInterrupt:
        print("graphmem: error: interrupted", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:  # noqa: BLE001 - a bug must still end in one clear line
        if _debug(argv):
            traceback.print_exc()
        _print_error(f"internal error ({type(error).__name__}: {error}); please report it with"
                     " the model (--debug shows the traceback)")
        return EXIT_INTERNAL
    except BaseException as error:  # noqa: BLE001 - SystemExit from the model's own code
        # graphmem never exits mid-command: the user's file.py (its forward, loss or inputs
        # function, run by tracing) did; its exit code must not become graphmem's.
        if _debug(argv):
            traceback.print_exc()
        _print_error(f"the model's code raised {error!r}: a model file must not exit or raise"
                     " BaseException while graphmem imports, builds or traces it")
        return EXIT_USAGE


def _run_command(args: argparse.Namespace, stdout: Console) -> int:
    if args.command == "gpus":
        return _run_gpus(args, stdout)
    if args.command == "check":
        return run_check_command(args, stdout)
    if args.command == "verify":
        return run_verify_command(args, stdout)
    return _run_analyze(args, stdout)


def _usage_error(error: GraphmemError, argv: Sequence[str] | None) -> int:
    if _debug(argv) and error.__cause__ is not None:
        traceback.print_exception(error.__cause__)
    _print_error(str(error))
    return EXIT_USAGE


def _print_error(message: str) -> None:
    """One line, whatever the message quotes: a flag's value, a path or the user's exception
    text may hold newlines (a forged second error line) or terminal escapes; each is shown
    as a visible escape (graphmem/report/safe_text.py), long names shortened."""
    from graphmem.report.safe_text import printable_text

    print(f"graphmem: error: {printable_text(message)}", file=sys.stderr)


def _debug(argv: Sequence[str] | None) -> bool:
    """`--debug` anywhere on the command line, or GRAPHMEM_DEBUG=1: show tracebacks."""
    words = sys.argv[1:] if argv is None else argv
    return "--debug" in words or bool(os.environ.get("GRAPHMEM_DEBUG"))


def _run_gpus(args: argparse.Namespace, console: Console) -> int:
    from graphmem.report.terminal.gpus import print_gpu_table

    if args.fits is None:
        if args.batch is not None or args.dim or args.cuda_reserve is not None:
            raise GraphmemError("--batch/--dim/--cuda-reserve go with --fits MODEL")
        print_gpu_table(console)
        return EXIT_OK
    check_model_argument(args.fits, onnx_only="graphmem gpus --fits")
    check_input_file("--fits", Path(args.fits))
    check_dims(args.batch, args.dim)
    dims = _dims_dict(args.dim)
    from graphmem.cli.fits import print_fits

    print_fits(args.fits, args.batch, dims, args.cuda_reserve, console)
    return EXIT_OK


def _run_analyze(args: argparse.Namespace, console: Console) -> int:
    from graphmem.pipeline.analysis import analyze_onnx
    from graphmem.report.json.report import to_json_text, write_json
    from graphmem.report.terminal.summary import print_summary

    check_model_argument(args.model)
    model_path = Path(args.model)
    json_out, html_out = _analyze_outputs(args)
    outputs = [o for o in (json_out, html_out) if o]
    _check_analyze_options(args)
    budget = _budget(args)
    if is_model_spec(args.model):
        refuse_overwrites(outputs, spec_files((args.model, args.loss, args.example_inputs)))
        analysis = _analyze_torch(args, budget)
    else:
        check_input_file("model", model_path)
        refuse_overwrites(outputs, onnx_inputs(model_path, outputs))
        dims = _dims_dict(args.dim)
        analysis = analyze_onnx(model_path, batch=args.batch, dims=dims, gpu=args.gpu,
                                cuda_reserve_bytes=args.cuda_reserve, module_depth=args.depth,
                                sweep=_sweep_request(args.sweep), train=args.train,
                                optimizer=args.optimizer, amp=args.amp,
                                grad_accum=args.grad_accum)
        if wants_suggestions(args):
            analysis = with_graph_suggestions(analysis, budget, functools.partial(
                analyze_onnx, model_path, batch=args.batch, dims=dims, gpu=args.gpu, plan=False,
                train=True, optimizer=args.optimizer, amp=args.amp, grad_accum=args.grad_accum))
    analysis = _with_runtime(args, analysis)
    analysis = apply_distributed_options(analysis, args)
    if args.json == "-":
        sys.stdout.write(to_json_text(analysis))
        console = Console(stderr=True, highlight=False, emoji=False)
    print_summary(analysis, console)
    if json_out:
        with writing(json_out):
            write_json(analysis, json_out.path)
        print_written(console, "JSON", json_out)
    if html_out:
        from graphmem.report.html.page import write_html

        with writing(html_out):
            write_html(analysis, html_out.path)
        print_written(console, "HTML report", html_out)
    return EXIT_OK


def _analyze_outputs(args: argparse.Namespace) -> tuple[OutputFile | None, OutputFile | None]:
    """--json and --html (default ./<model>.graphmem.html), checked before any work."""
    if args.no_html and args.html is not None:
        raise GraphmemError(f"--html {args.html} and --no-html contradict: give one of them")
    json_out = output_file("--json", args.json, stdout_ok=True)
    default_html = f"{_report_stem(args.model)}.graphmem.html"
    html_text = None if args.no_html else default_html if args.html is None else args.html
    return json_out, output_file("--html", html_text)


def _check_analyze_options(args: argparse.Namespace) -> None:
    """Every option that needs no model, checked before the model is read or traced."""
    from graphmem.training.onnx_step import MAX_GRAD_ACCUM

    if args.depth < 1:
        raise GraphmemError(f"--depth {args.depth}: give 1 or more (1 = top-level modules)")
    check_int_range("--grad-accum", args.grad_accum, 1, MAX_GRAD_ACCUM)
    _resolve_optimizer(args)
    if is_model_spec(args.model):
        _check_torch_options(args)
    else:
        _refuse_torch_options(args)
        check_dims(args.batch, args.dim)
        _dims_dict(args.dim)
    if args.runtime is not None:
        from graphmem.runtime_models.select import check_runtime

        check_runtime(args.runtime, not is_model_spec(args.model), args.gpu is not None,
                      args.train)
    check_distributed_options(args)


def _resolve_optimizer(args: argparse.Namespace) -> None:
    """--optimizer describes the training step: refused without --train, never ignored."""
    from graphmem.training.steps import OPTIMIZERS

    if args.optimizer is not None and not args.train:
        raise GraphmemError(f"--optimizer {args.optimizer} describes a training step: add"
                            " --train (or drop --optimizer)")
    if args.optimizer is not None and args.optimizer not in OPTIMIZERS:
        raise GraphmemError(f"--optimizer {args.optimizer}: choose one of"
                            f" {', '.join(OPTIMIZERS)}")
    args.optimizer = args.optimizer or DEFAULT_OPTIMIZER


def _with_runtime(args: argparse.Namespace, analysis: Analysis) -> Analysis:
    """--runtime, or the default for the input kind (graphmem/runtime_models/select.py)."""
    from graphmem.devices.gpus import find_gpu
    from graphmem.runtime_models.select import check_runtime, default_runtime, with_runtime

    is_onnx = not is_model_spec(args.model)
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
    from graphmem.pipeline.planning import SweepRequest

    return None if text is None else SweepRequest(*parse_sweep(text))


def _report_stem(model: str) -> str:
    return model.rpartition(":")[2] if is_model_spec(model) else Path(model).stem


def _refuse_torch_options(args: argparse.Namespace) -> None:
    given = [flag for flag, value in (("--input", args.input), ("--loss", args.loss),
                                      ("--example-inputs", args.example_inputs)) if value]
    if given:
        raise GraphmemError(
            f"{', '.join(given)} apply to PyTorch models (file.py:fn); ONNX models take"
            " --batch/--dim (and --train computes cross-entropy on the first output)")
    if not args.train and (args.amp or args.grad_accum != 1):
        raise GraphmemError("--amp/--grad-accum describe a training step: add --train")


def _check_torch_options(args: argparse.Namespace) -> None:
    """A PyTorch model's options, before its file is imported: shapes from --input."""
    from graphmem.frontends.torch.loader import parse_tensor_spec

    if args.batch is not None or args.dim:
        raise GraphmemError("--batch/--dim bind ONNX dims; for a PyTorch model give the"
                            " shapes with --input, e.g. --input 32x3x224x224")
    if args.sweep:
        raise GraphmemError("--sweep varies a dynamic dim of an ONNX model; a PyTorch model is"
                            " traced at fixed shapes: run it once per --input instead")
    if not args.train and (args.amp or args.grad_accum != 1):
        raise GraphmemError("--amp/--grad-accum describe a training step: add --train")
    if args.input and args.example_inputs:
        raise GraphmemError("give the inputs either with --input or with --example-inputs,"
                            " not both")
    for text in args.input:
        parse_tensor_spec(text)


def _analyze_torch(args: argparse.Namespace, budget: int | None) -> Analysis:
    from graphmem.frontends.torch.analyze import analyze_torch
    from graphmem.frontends.torch.loader import load_callable

    loss = load_callable(args.loss) if args.loss else None
    _resolve_example_inputs(args)
    return analyze_torch(args.model, args.input, train=args.train, optimizer=args.optimizer,
                         amp=args.amp, grad_accum=args.grad_accum, loss=loss, gpu=args.gpu,
                         cuda_reserve_bytes=args.cuda_reserve, module_depth=args.depth,
                         suggest=wants_suggestions(args), memory_budget_bytes=budget)


def _resolve_example_inputs(args: argparse.Namespace) -> None:
    """--example-inputs FILE.py:FN becomes the --input list it stands for."""
    from graphmem.frontends.torch.loader import load_example_inputs, spec_text

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


if __name__ == "__main__":
    sys.exit(main())
