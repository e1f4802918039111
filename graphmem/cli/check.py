"""`graphmem check`: the command line of the gate (exit 0 all budgets hold, 1 one is broken).

Usage and input errors raise GraphmemError, which the CLI turns into exit code 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from graphmem.cli.commands import summary
from graphmem.cli.common import (
    Output,
    argtype,
    dims_dict,
    emit,
    parse_dim_binding,
)
from graphmem.cli.inputs import (
    OutputFile,
    check_dims,
    check_input_file,
    check_model_argument,
    onnx_inputs,
    output_file,
    refuse_overwrites,
    spec_files,
)
from graphmem.cli.option_flags import add_model_options, argparse_keywords, namespace_keywords
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.spec import hf_config_file
from graphmem.gate.budgets import (
    Budgets,
    complete_budgets,
    parse_count,
    parse_latency_s,
    parse_memory_limit,
    parse_percent,
    parse_size,
)
from graphmem.gate.margin import parse_margin
from graphmem.gate.sequences import min_sequences, serving_context
from graphmem.options.table import BY_KEYWORD, model_options

if TYPE_CHECKING:
    from graphmem.gate.check import CheckSpec
    from graphmem.gate.options import RequestBuilder

EXIT_PASSED = 0
EXIT_FAILED = 1

# Options that describe one model; with --budgets they belong in the file (and so do
# analyze's model options: `given_model_options`).
_MODEL_OPTIONS = ("gpu", "batch", "dim", "cuda_reserve", "max_memory", "margin",
                  "max_tensor_memory",
                  "max_latency",
                  "max_params", "max_flops", "fail_on_unsupported", "baseline", "max_growth",
                  "min_sequences")


NAME = "check"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        NAME, help=summary(NAME),
        description="Check a model against budgets (memory, latency, params, FLOPs,"
        " unsupported ops, growth over a baseline), run as analyze's options say (--train,"
        " --tensor-parallel, --serve ...: a training job's memory is its most-loaded"
        " rank's). Exit 0: every budget holds; 1: one is broken; 2: usage or input error.")
    parser.add_argument("model", nargs="?", help="an .onnx file, a PyTorch model as file.py:fn"
                        " or pkg.module:fn, or a Hugging Face config.json (or its folder); or"
                        " use --budgets")
    parser.add_argument("--gpu", help="GPU name from 'graphmem gpus'; with it the model must"
                        " at least fit (--max-memory 100%%) unless --max-memory says otherwise")
    parser.add_argument("--batch", type=int, help="bind the batch axis (a dim named like a"
                        " batch, else a dynamic axis 0 of the inputs)")
    parser.add_argument("--dim", action="append", type=parse_dim_binding, default=[],
                        metavar="NAME=VALUE", help="bind a named dynamic dim (repeatable)")
    parser.add_argument("--cuda-reserve", type=argtype(parse_size), metavar="SIZE",
                        help="non-tensor CUDA memory to assume (default: measured per GPU"
                        " generation: docs/runtime-models.md)")
    budgets = parser.add_argument_group("budgets")
    budgets.add_argument("--max-memory", type=argtype(parse_memory_limit), metavar="LIMIT",
                         help="peak memory: with --gpu, the GPU's device total against a"
                         " share of its memory (90%%) or a size (12GiB); without, the"
                         " live-tensor peak against a size")
    budgets.add_argument("--margin", type=argtype(parse_margin), metavar="PCT",
                         help="headroom on the GPU (10%%): the device total x (1 + margin)"
                         " must fit its memory (needs --gpu)")
    budgets.add_argument("--max-tensor-memory", type=argtype(parse_size), metavar="SIZE",
                         help="graphmem's live-tensor peak (12GiB), apart from what the runtime"
                         " and the GPU add: a budget on the model's own tensors")
    budgets.add_argument("--max-latency", type=argtype(parse_latency_s), metavar="TIME",
                         help="roofline latency estimate (20ms; needs --gpu)")
    budgets.add_argument("--max-params", type=argtype(parse_count), metavar="N",
                         help="parameter count (25M, 1.5B, 25000000)")
    budgets.add_argument("--max-flops", type=argtype(parse_count), metavar="N",
                         help="FLOPs per run at the bound dims (4.1G, 4.1e9; 1 MAC = 2 FLOPs)")
    budgets.add_argument("--fail-on-unsupported", action="store_true",
                         help="fail when an op has no cost rule or a shape is unknown")
    budgets.add_argument("--baseline", type=Path, metavar="PREVIOUS.json",
                         help="an earlier graphmem JSON (analyze or check) at the same dims")
    budgets.add_argument("--max-growth", type=argtype(parse_percent), metavar="PCT",
                         help="allowed growth of peak memory, params and FLOPs over --baseline"
                         " (5%%)")
    budgets.add_argument("--min-sequences", type=argtype(parse_count), metavar="N",
                         help="serving: at least N sequences of --context tokens fit at once in"
                         " the paged KV cache, served by --engine (needs --gpu; see"
                         " docs/serving.md)")
    budgets.add_argument("--budgets", type=Path, metavar="FILE.toml",
                         help="check every model a budgets file lists (see docs/gate.md)")
    outputs = parser.add_argument_group("outputs")
    outputs.add_argument("--json", metavar="PATH", help="write verdicts and analyses as JSON"
                         " ('-' for stdout)")
    outputs.add_argument("--junit", metavar="PATH", help="write JUnit XML for CI test reports")
    add_model_options(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    from graphmem.gate.check import run_check
    from graphmem.report.json.gate import check_json_text, write_check_json
    from graphmem.report.terminal.gate import print_check

    json_out = output_file("--json", args.json, stdout_ok=True)
    junit_out = output_file("--junit", args.junit)
    outputs = [o for o in (json_out, junit_out) if o]
    for flag, path in (("--budgets", args.budgets), ("--baseline", args.baseline)):
        if path is not None:
            check_input_file(flag, path)
    specs = _specs(args)
    _check_specs(specs, args)
    refuse_overwrites(outputs, _inputs(specs, args.budgets, outputs))
    report = run_check(specs, _builder())
    emit(console, lambda out: print_check(report, out),
         [Output(json_out, "JSON", lambda path: write_check_json(report, path)),
          Output(junit_out, "JUnit XML", lambda path: _write_junit(report, path))],
         (lambda: check_json_text(report)) if args.json == "-" else None)
    return EXIT_PASSED if report.passed else EXIT_FAILED


def _write_junit(report: Any, path: Path) -> None:
    from graphmem.report.junit import write_junit  # looked up now: tests replace it

    write_junit(report, path)


def _check_specs(specs: list[CheckSpec], args: argparse.Namespace) -> None:
    """What each model's check needs and no analysis tells, before the first analysis: dims
    in range, known GPUs, budgets that can be evaluated, baselines that are files."""
    from graphmem.devices.gpus import find_gpu
    from graphmem.passes.dims import check_dim_value

    check_dims(args.batch, args.dim)
    for spec in specs:
        check_model_argument(str(spec.model_path))
        if not isinstance(spec.model, str):  # a file or a config's folder, not a spec
            check_input_file("model", spec.model_path)
        if spec.gpu is not None:
            find_gpu(spec.gpu)
        source = str(spec.baseline_path) if spec.baseline_path is not None else None
        complete_budgets(spec.budgets, spec.gpu, source)
        if args.budgets is None:  # the command line's dims and baseline are checked above
            continue
        where = f"{args.budgets} [{spec.label}]"
        batch = {} if spec.batch is None else {"batch": spec.batch}
        for name, value in {**batch, **spec.dims}.items():
            check_dim_value(f"{where} {name} = {value}", value)
        if spec.baseline_path is not None:
            check_input_file(f"{where} baseline", spec.baseline_path)


def _inputs(specs: list[CheckSpec], budgets: Path | None, outputs: list[OutputFile]
            ) -> list[tuple[str, Path]]:
    """Every file the check reads: an output must be none of them."""
    inputs = [] if budgets is None else [(f"an input of the check (the budgets file {budgets})",
                                          budgets)]
    for spec in specs:
        inputs += [(f"an input of the check ({what})", path)
                   for what, path in _model_inputs(spec, outputs)]
        if spec.baseline_path is not None:
            inputs.append((f"an input of the check (the baseline {spec.baseline_path})",
                           spec.baseline_path))
    return inputs


def _model_inputs(spec: CheckSpec, outputs: list[OutputFile]) -> list[tuple[str, Path]]:
    """The files a model entry reads: an .onnx file and its external data, a config, the
    .py files of a spec and of its loss and example inputs."""
    config = hf_config_file(str(spec.model_path))
    if config is not None:
        return [(f"the model's config {config}", config)]
    files = [str(spec.options.get(key) or "") for key in ("loss", "example_inputs")]
    if isinstance(spec.model, str):
        return spec_files([spec.model, *files])
    return [*onnx_inputs(spec.model_path, outputs, str(spec.model_path)), *spec_files(files)]


def _specs(args: argparse.Namespace) -> list[CheckSpec]:
    from graphmem.frontends.torch.spec import model_label
    from graphmem.gate.budgets_file import load_budgets_file
    from graphmem.gate.check import CheckSpec

    if args.budgets is not None:
        given = [f"--{o.replace('_', '-')}" for o in _MODEL_OPTIONS if getattr(args, o)]
        given += [BY_KEYWORD[keyword].flag for keyword in given_model_options(args)]
        if args.model or given:
            extra = ", ".join(([args.model] if args.model else []) + given)
            raise GraphmemError(f"--budgets {args.budgets} checks the models the file lists:"
                                f" put {extra} in the file (or drop --budgets)")
        return load_budgets_file(args.budgets, _builder())
    if not args.model:
        raise GraphmemError("give a model (graphmem check model.onnx --gpu t4 --batch 32 ...)"
                            " or a budgets file (graphmem check --budgets graphmem.toml)")
    context, options = serving_context(args.min_sequences, args.context, model_keywords(args))
    budgets = Budgets(max_memory=args.max_memory, margin=args.margin,
                      max_tensor_bytes=args.max_tensor_memory,
                      max_latency_s=args.max_latency,
                      max_params=args.max_params, max_flops=args.max_flops,
                      fail_on_unsupported=args.fail_on_unsupported, max_growth=args.max_growth,
                      min_sequences=min_sequences(args.min_sequences, context,
                                                  engine=args.engine))
    return [CheckSpec(model_path=Path(args.model), label=model_label(args.model),
                      budgets=budgets, gpu=args.gpu, batch=args.batch, dims=dims_dict(args.dim),
                      cuda_reserve_bytes=args.cuda_reserve, baseline_path=args.baseline,
                      options=options)]


def _builder() -> RequestBuilder:
    from graphmem.options.check_entry import request_builder

    return request_builder()


# ----- analyze's model options (the option table's, graphmem/cli/option_flags.py) -------------
# check's own settings of an analyze keyword (--gpu, --batch, --dim, --cuda-reserve), and the
# serving flags that also size the --min-sequences budget (`model_keywords`)
_OWN = ("gpu", "batch", "dims", "cuda_reserve_bytes")
_SERVING = ("engine", "context")


def given_model_options(args: argparse.Namespace) -> dict[str, Any]:
    """The model options given on the command line ({keyword: value}, defaults left out)."""
    defaults = {o.keyword: argparse_keywords(o).get("default") for o in model_options()}
    return {keyword: value for keyword, value in namespace_keywords(args, _OWN).items()
            if value != defaults[keyword]}


def model_keywords(args: argparse.Namespace) -> dict[str, Any]:
    """The Python API's keywords of the model options given (`graphmem.api.build_request`);
    --engine serves the model with --serve, else it names the --min-sequences budget's
    engine; --context is placed by `serving_context`."""
    keywords = {k: v for k, v in given_model_options(args).items() if k not in _SERVING}
    if "inputs" in keywords:
        keywords["inputs"] = tuple(keywords["inputs"])
    if args.serve and args.engine is not None:
        keywords["engine"] = args.engine
    return keywords
