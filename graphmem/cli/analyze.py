"""`graphmem analyze MODEL`: the flags as one Request, the pipeline, the renderers.

No analysis here: the runtime model, suggestions, distributed memory and the KV cache are the
pipeline's (graphmem/pipeline/); this module turns flags into a Request, refuses what no model
is needed to refuse, and renders the Analysis (terminal, JSON, HTML).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from graphmem.cli.common import (
    Output,
    argtype,
    dims_dict,
    emit,
    is_model_spec,
    parse_dim_binding,
    parse_size_bytes,
)
from graphmem.cli.inputs import (
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
from graphmem.core.conventions import DEFAULT_OPTIMIZER, MAX_GRAD_ACCUM, TrainingOptions
from graphmem.distributed.kv_cache import parse_kv_option
from graphmem.distributed.strategies import LAYOUTS, STRATEGIES, DistributedConfig, ZeroSettings
from graphmem.errors import GraphmemError
from graphmem.gate.budgets import parse_memory_limit
from graphmem.pipeline import run as pipeline
from graphmem.pipeline.request import (
    KvCacheOptions,
    Request,
    RuntimeOptions,
    SuggestOptions,
    SweepRequest,
)
from graphmem.runtime_models.base import ORT_OPTIMIZATION_LEVELS, RUNTIMES

NAME = "analyze"
EXIT_OK = 0
DEFAULT_FSDP_DEPTH = 2


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        NAME, help="analyze a model (ONNX file or PyTorch file.py:fn): memory, FLOPs, fit")
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
    _add_distributed_options(parser)
    _add_suggest_options(parser)
    _add_torch_options(parser)


def _add_distributed_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("distributed training (with --train) and KV cache")
    group.add_argument("--gpus", type=int, metavar="N",
                       help="data-parallel ranks: per-GPU memory under --strategy")
    group.add_argument("--strategy", choices=STRATEGIES,
                       help="ddp, zero1, zero2, zero3 (DeepSpeed) or fsdp (full shard);"
                       " default ddp")
    group.add_argument("--tensor-parallel", type=int, metavar="T",
                       help="Megatron-style tensor parallel degree (job size = N x T GPUs)")
    group.add_argument("--state-layout", choices=LAYOUTS,
                       help="bytes of parameters/gradients/optimizer state: traced (default,"
                       " what the graph holds), zero-paper (2+2+12 bytes for Adam) or"
                       " deepspeed (its estimators' 2+2+4+4+8)")
    group.add_argument("--reduce-bucket-size", type=int, metavar="ELEMENTS",
                       help="DeepSpeed reduce_bucket_size (default 500000000 elements)")
    group.add_argument("--fsdp-depth", type=int, default=DEFAULT_FSDP_DEPTH, metavar="N",
                       help="FSDP units are the modules at this depth (default 2: h.0, h.1...)")
    group.add_argument("--kv-cache", metavar="auto|LAYERS,KV_HEADS,HEAD_DIM",
                       help="decoder KV cache: its size in batch and context and the longest"
                       " context that fits (ONNX past_key_values inputs are found without it)")
    group.add_argument("--kv-dtype", metavar="DTYPE",
                       help="dtype of the KV cache (default: the model's or the past inputs')")


def _add_suggest_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("suggestions (what to change so the model fits)")
    group.add_argument("--suggest", action="store_true",
                       help="suggest checkpointing (--train), AMP, batch, in-place ops,"
                       " FC heads and grouped convs, each saving re-analysed")
    group.add_argument("--memory-budget", type=argtype(parse_memory_limit), metavar="LIMIT",
                       help="the peak to aim at: a size (12GiB) or a share of the --gpu's"
                       " usable memory (80%%); default: the GPU's usable memory. Implies"
                       " --suggest")


def _add_torch_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("PyTorch models (MODEL is file.py:fn or pkg.mod:fn)")
    group.add_argument("--input", action="append", default=[], metavar="SHAPE[:DTYPE]",
                       help="an example input, e.g. 32x3x224x224 or 4x1024:int64"
                       " (repeat for each positional input)")
    group.add_argument("--example-inputs", metavar="FILE.py:FN",
                       help="a function returning the example inputs (a tensor or a tuple of"
                       " them), called on the meta device; instead of --input")
    group.add_argument("--train", action="store_true",
                       help="analyze one whole training step (forward, backward, update)")
    group.add_argument("--optimizer", help="with --train: sgd, momentum, adam or adamw"
                       f" (default {DEFAULT_OPTIMIZER})")
    group.add_argument("--amp", choices=("fp16", "bf16"), help="autocast precision")
    group.add_argument("--grad-accum", type=int, default=1, metavar="N",
                       help="micro-batches per optimizer step (memory is per micro-batch)")
    group.add_argument("--loss", metavar="FILE.py:FN",
                       help="loss(output) -> scalar (default: cross-entropy)")


def run(args: argparse.Namespace, console: Console) -> int:
    from graphmem.report.json.report import to_json_text
    from graphmem.report.terminal.summary import print_summary

    check_model_argument(args.model)
    json_out, html_out = _outputs(args)
    files = [o for o in (json_out, html_out) if o]
    request = request_from_args(args)
    if request.is_torch:
        refuse_overwrites(files, spec_files((args.model, args.loss, args.example_inputs)))
    else:
        check_input_file("model", Path(args.model))
        refuse_overwrites(files, onnx_inputs(Path(args.model), files))
    # the user's files are imported before the analysis starts (a file that fails to import
    # is an input error like any other)
    analysis = pipeline.analyze(pipeline.resolve(request))
    emit(console, lambda out: print_summary(analysis, out),
         [Output(json_out, "JSON", lambda path: _write_json(analysis, path)),
          Output(html_out, "HTML report", lambda path: _write_html(analysis, path))],
         (lambda: to_json_text(analysis)) if args.json == "-" else None)
    return EXIT_OK


def _write_json(analysis: object, path: Path) -> None:
    from graphmem.report.json.report import write_json  # looked up now: tests replace it

    write_json(analysis, path)  # type: ignore[arg-type]


def _write_html(analysis: object, path: Path) -> None:
    from graphmem.report.html.page import write_html

    write_html(analysis, path)  # type: ignore[arg-type]


def _outputs(args: argparse.Namespace) -> tuple[OutputFile | None, OutputFile | None]:
    """--json and --html (default ./<model>.graphmem.html), checked before any work."""
    if args.no_html and args.html is not None:
        raise GraphmemError(f"--html {args.html} and --no-html contradict: give one of them")
    json_out = output_file("--json", args.json, stdout_ok=True)
    default_html = f"{_report_stem(args.model)}.graphmem.html"
    html_text = None if args.no_html else default_html if args.html is None else args.html
    return json_out, output_file("--html", html_text)


def _report_stem(model: str) -> str:
    return model.rpartition(":")[2] if is_model_spec(model) else Path(model).stem


# ----- flags -> Request ------------------------------------------------------------------------
def request_from_args(args: argparse.Namespace) -> Request:
    """The Request the flags describe, checked: every refusal that needs no model is here."""
    _check_flags(args)
    torch = is_model_spec(args.model)
    request = Request(
        model=args.model,
        inputs=tuple(args.input), example_inputs=args.example_inputs,
        batch=args.batch, dims=dims_dict(args.dim),
        gpu=args.gpu, cuda_reserve_bytes=args.cuda_reserve,
        training=_training(args), runtime=RuntimeOptions(args.runtime, args.ort_optimization),
        distributed=_distributed(args), kv_cache=_kv_cache(args), suggest=_suggest(args),
        sweep=_sweep(args.sweep, torch), module_depth=args.depth)
    request.check()
    return request


def _check_flags(args: argparse.Namespace) -> None:
    """What only the command line can say wrong: flags given without the one they need."""
    check_int_range("--grad-accum", args.grad_accum, 1, MAX_GRAD_ACCUM)
    if args.optimizer is not None and not args.train:
        raise GraphmemError(f"--optimizer {args.optimizer} describes a training step: add"
                            " --train (or drop --optimizer)")
    if not is_model_spec(args.model):
        check_dims(args.batch, args.dim)
    if not args.train and (args.amp or args.grad_accum != 1):
        raise GraphmemError("--amp/--grad-accum describe a training step: add --train")
    if not _wants_distributed(args) and args.fsdp_depth != DEFAULT_FSDP_DEPTH:
        raise GraphmemError("--fsdp-depth goes with --strategy fsdp")


def _training(args: argparse.Namespace) -> TrainingOptions | None:
    if not args.train:
        return None
    return TrainingOptions(optimizer=args.optimizer or DEFAULT_OPTIMIZER, amp=args.amp,
                           grad_accum=args.grad_accum, loss=args.loss)


def _wants_distributed(args: argparse.Namespace) -> bool:
    return any(value is not None for value in (
        args.gpus, args.strategy, args.tensor_parallel, args.state_layout,
        args.reduce_bucket_size))


def _distributed(args: argparse.Namespace) -> DistributedConfig | None:
    if not _wants_distributed(args):
        return None
    zero = ZeroSettings()
    if args.reduce_bucket_size is not None:
        zero = ZeroSettings(reduce_bucket_size=args.reduce_bucket_size)
    return DistributedConfig(
        strategy=args.strategy or "ddp", gpus=1 if args.gpus is None else args.gpus,
        tensor_parallel=1 if args.tensor_parallel is None else args.tensor_parallel,
        layout=args.state_layout or "traced", zero=zero, fsdp_unit_depth=args.fsdp_depth)


def _kv_cache(args: argparse.Namespace) -> KvCacheOptions:
    """Always: an ONNX graph's past inputs give the cache even without --kv-cache."""
    option = args.kv_cache
    if option is None or option == "auto":
        return KvCacheOptions(auto=option == "auto", dtype=args.kv_dtype)
    return KvCacheOptions(shape=parse_kv_option(option), dtype=args.kv_dtype)


def _suggest(args: argparse.Namespace) -> SuggestOptions:
    limit = args.memory_budget
    enabled = bool(args.suggest or limit is not None)
    if limit is None:
        return SuggestOptions(enabled)
    return SuggestOptions(enabled, limit.bytes, limit.fraction, limit.text)


def _sweep(text: str | None, torch: bool) -> SweepRequest | None:
    """--sweep DIM=VALUES; a PyTorch model's is kept unparsed for the check to refuse."""
    from graphmem.passes.sweep import parse_sweep

    if text is None:
        return None
    return SweepRequest(text, ()) if torch else SweepRequest(*parse_sweep(text))
