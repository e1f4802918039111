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

from graphmem.cli.commands import summary
from graphmem.cli.common import Output, emit, is_model_spec
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
from graphmem.cli.option_flags import add_options, namespace_keywords
from graphmem.core.collector import keep_until_exit
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.spec import hf_config_file, model_label
from graphmem.options import request_from_flags
from graphmem.pipeline import run as pipeline
from graphmem.pipeline.request import Request

NAME = "analyze"
EXIT_OK = 0


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        NAME, help=summary(NAME))
    parser.add_argument("model", help="an .onnx file (external weight data is not read), a"
                        " PyTorch model as file.py:fn or package.module:fn, or a Hugging Face"
                        " config.json (or its folder): the model is built from it, no weights")
    add_options(parser)  # every option of the table (graphmem/options/table.py)


def run(args: argparse.Namespace, console: Console) -> int:
    from graphmem.report.terminal.summary import print_summary

    check_model_argument(args.model)
    json_out, html_out = _outputs(args)
    files = [o for o in (json_out, html_out) if o]
    request = request_from_args(args)
    if request.is_torch:
        refuse_overwrites(files, [*spec_files((args.model, args.loss, args.example_inputs)),
                                  *_config_file(args.model)])
    else:
        check_input_file("model", Path(args.model))
        refuse_overwrites(files, onnx_inputs(Path(args.model), files))
    # the user's files are imported before the analysis starts (a file that fails to import
    # is an input error like any other)
    analysis = pipeline.analyze(pipeline.resolve(request))
    keep_until_exit(analysis)  # a one-command process ends without freeing it
    emit(console, lambda out: print_summary(analysis, out, args.verbose),
         [Output(json_out, "JSON", lambda path: _write_json(analysis, path)),
          Output(html_out, "HTML report", lambda path: _write_html(analysis, path))],
         (lambda: _json_text(analysis)) if args.json == "-" else None)
    return EXIT_OK


def _json_text(analysis: object) -> str:
    from graphmem.report.json.report import to_json_text  # without --json: not imported

    return to_json_text(analysis)  # type: ignore[arg-type]


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
    default_html = f"{model_label(args.model)}.graphmem.html"
    html_text = None if args.no_html else default_html if args.html is None else args.html
    return json_out, output_file("--html", html_text)


def _config_file(model: str) -> list[tuple[str, Path]]:
    config = hf_config_file(model)
    return [] if config is None else [("the model's config", config)]


# ----- flags -> Request ------------------------------------------------------------------------
def request_from_args(args: argparse.Namespace) -> Request:
    """The Request the flags describe, checked: every refusal that needs no model is here (the
    refusals between options are the Python API's too: graphmem/options/refusals.py)."""
    if not is_model_spec(args.model):
        check_dims(args.batch, args.dims)
    request = request_from_flags(args.model, namespace_keywords(args))
    request.check()
    return request
