"""The command line as a table of commands over the pipeline: each command turns flags into a
Request and renders; the helpers every command shares exist once (graphmem/cli/common.py)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import onnx
import pytest
from rich.console import Console

from graphmem.cli import common
from graphmem.cli.analyze import request_from_args
from graphmem.cli.inputs import OutputFile
from graphmem.cli.main import COMMANDS, build_parser, main
from graphmem.pipeline.request import Request
from tests.onnx_builders import mlp_model

CLI = Path(__file__).resolve().parent.parent / "graphmem" / "cli"


def test_every_command_is_a_module_of_the_table() -> None:
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if a.dest == "command"]
    assert list(subparsers.choices) == list(COMMANDS) == ["analyze", "gpus", "check", "verify"]
    for command in COMMANDS.values():
        assert callable(command.add_parser) and callable(command.run)


@pytest.mark.parametrize("name", ["parse_dim_binding", "is_model_spec", "_dims", "_dims_dict",
                                  "dims_dict", "argtype", "_argtype", "emit"])
def test_shared_helpers_are_defined_once(name: str) -> None:
    defined = [path.name for path in CLI.glob("*.py")
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.FunctionDef) and node.name == name]
    assert defined in ([], ["common.py"])


def test_the_cli_imports_no_pipeline_internals() -> None:
    """Commands reach the analysis through graphmem.pipeline.run and render: no suggestion
    driver, no runtime estimate, no planning, no front end of their own."""
    banned = ("graphmem.suggest", "graphmem.pipeline.planning", "graphmem.pipeline.runtime",
              "graphmem.pipeline.suggestions", "graphmem.runtime_models.select",
              "graphmem.distributed.attach", "graphmem.frontends.torch.kv")
    for path in CLI.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(banned), (path.name, node.module)


def test_flags_become_one_request(tmp_path: Path) -> None:
    args = build_parser().parse_args([
        "analyze", "m.onnx", "--batch", "8", "--dim", "seq=64", "--gpu", "t4", "--train",
        "--amp", "bf16", "--runtime", "torch-cuda", "--gpus", "4", "--strategy", "zero3",
        "--memory-budget", "80%", "--cuda-reserve", "1GiB"])
    request = request_from_args(args)
    assert isinstance(request, Request) and not request.is_torch
    assert (request.batch, dict(request.dims), request.gpu) == (8, {"seq": 64}, "t4")
    assert request.training is not None and request.training.amp == "bf16"
    assert request.training.optimizer == "adam"
    assert request.runtime is not None and request.runtime.name == "torch-cuda"
    assert request.distributed is not None and request.distributed.strategy == "zero3"
    assert request.suggest.enabled and request.suggest.budget_share == 0.8
    assert request.cuda_reserve_bytes == 1 << 30


def test_emit_moves_the_console_to_stderr_for_json_on_stdout(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = OutputFile("--html", tmp_path / "r.html")
    common.emit(Console(), lambda console: console.print("summary"),
                [common.Output(None, "JSON", lambda path: None),
                 common.Output(html, "HTML report", lambda path: path.write_text("page"))],
                lambda: '{"a": 1}\n')
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"a": 1}
    assert "summary" in captured.err and "HTML report written to" in captured.err
    assert (tmp_path / "r.html").read_text() == "page"


@pytest.mark.ort
def test_analyze_json_on_stdout_end_to_end(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    assert main(["analyze", str(path), "--batch", "2", "--no-html", "--json", "-"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["memory"]["peak_bytes"] > 0 and data["memory"]["runtime"] is not None
    assert "live tensors at the peak" in captured.err
