"""Numbers, option pairs, model arguments and the user's Python code: every bad input is one
error line, exit 2, before any work; never exit 3 and never the user's own exit code."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from graphmem.core.symbolic import SymInt
from graphmem.errors import GraphmemError
from graphmem.gate.budgets import (
    SpecError,
    parse_count,
    parse_latency_s,
    parse_memory_limit,
    parse_percent,
    parse_size,
)
from graphmem.passes.dims import check_sizes_fit
from tests.helpers.cli import Run

BUILD = "import torch\n\ndef build():\n    return torch.nn.Linear(4, 4)\n"



@pytest.fixture
def torch_model(tmp_path: Path) -> Path:
    """A model file that leaves a mark when imported: a refused command never imports it."""
    path = tmp_path / "model.py"
    path.write_text(f"from pathlib import Path\nPath(__file__).with_suffix('.imported')"
                    f".touch()\n{BUILD}")
    return path




def one_line(result: tuple[int, str, str], *fragments: str) -> str:
    code, _, err = result
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphmem: error: "), err
    assert "internal error" not in err and "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def refused_early(result: tuple[int, str, str], calls: list[str], *fragments: str) -> None:
    one_line(result, *fragments)
    assert calls == []  # before any analysis


# ----- numbers ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "fragment"), [
    (["--memory-budget", "1e999GiB"], "more than 4 EiB"),
    (["--memory-budget", "0B"], "above 0"),
    (["--memory-budget", "90"], "has no unit"),
    (["--cuda-reserve", "inf"], "not a size"),
    (["--cuda-reserve", "1e999GiB"], "more than 4 EiB"),
    (["--cuda-reserve", "8EiB"], "not a size"),
    (["--batch", "0"], "--batch 0"),
    (["--batch", "-3"], "--batch -3"),
    (["--batch", str(2**62)], "implausibly large"),
    (["--dim", "batch=0"], "--dim batch=0"),
    (["--dim", f"batch={2**62}"], "implausibly large"),
    (["--dim", "batch=" + "9" * 5000], "implausibly large"),
    (["--grad-accum", "0", "--train"], "--grad-accum 0"),
    (["--depth", "0"], "--depth 0"),
    (["--train", "--gpus", "0"], "--gpus 0"),
    (["--train", "--tensor-parallel", str(2**40)], "--tensor-parallel"),
    (["--train", "--gpus", "2", "--reduce-bucket-size", str(2**62)], "--reduce-bucket-size"),
    (["--train", "--gpus", "2", "--reduce-bucket-size", "0"], "--reduce-bucket-size 0"),
    (["--gpus", "4"], "add --train"),
    (["--kv-cache", "99999999999,8,128"], "implausibly large"),
    (["--kv-cache", "32,8"], "LAYERS,KV_HEADS,HEAD_DIM"),
    (["--kv-cache", "auto", "--train"], "drop --train"),
    (["--kv-dtype", "float7"], "--kv-dtype float7"),
    (["--runtime", "ort-cuda"], "add --gpu"),
])
def test_analyze_numbers_are_checked_before_the_analysis(
        mlp: Path, work: list[str], run: Run, args: list[str], fragment: str) -> None:
    refused_early(run("analyze", mlp, "--no-html", *args), work, fragment)


@pytest.mark.parametrize(("args", "fragment"), [
    (["--max-memory", "99999999999999"], "has no unit"),
    (["--max-memory", "90"], "say 90%"),  # 90 bytes was never meant
    (["--max-memory", "1e999GiB"], "more than 4 EiB"),
    (["--max-flops", "1e308G"], "not a count from 0 to 2**63-1"),
    (["--max-params", str(2**63)], "not a count"),
    (["--max-latency", "1e999s"], "not a finite duration"),
    (["--max-growth", "1e999%", "--baseline", "b.json"], "not a finite percentage"),
    (["--cuda-reserve", "1e999GiB", "--max-params", "1M"], "more than 4 EiB"),
    (["--batch", "0", "--max-params", "1M"], "--batch 0"),
    (["--dim", "batch=-1", "--max-params", "1M"], "--dim batch=-1"),
    (["--gpu", "t5", "--max-params", "1M"], "t5"),
    (["--max-latency", "20ms"], "--gpu"),
])
def test_check_numbers_are_checked_before_the_analysis(
        mlp: Path, work: list[str], run: Run, args: list[str], fragment: str) -> None:
    refused_early(run("check", mlp, *args), work, fragment)


@pytest.mark.parametrize(("args", "fragment"), [
    (["--seed", "-1"], "--seed -1"),
    (["--seed", str(2**32)], "--seed"),
    (["--threads", "0"], "--threads 0"),
    (["--threads", "1000000"], "--threads 1000000"),
    # a run starts every thread: 1,024 on a 3-node MLP ran past 300 s (os.cpu_count() + 1
    # is more threads than this machine has cores, whatever the machine)
    (["--threads", str((os.cpu_count() or 1) + 1)], "give at most"),
    (["--batch", "0"], "--batch 0"),
    (["--dim", "batch=99999999999"], "implausibly large"),
    (["--optimizer", "sgd"], "add --train"),
])
def test_verify_numbers_are_checked_before_the_run(
        mlp: Path, work: list[str], run: Run, args: list[str], fragment: str) -> None:
    refused_early(run("verify", mlp, *args), work, fragment)


@pytest.mark.parametrize(("args", "fragment"), [
    (["--batch", "0"], "--batch 0"),
    (["--batch", str(2**62)], "implausibly large"),
    (["--cuda-reserve", "1e999GiB"], "more than 4 EiB"),
])
def test_gpus_fits_numbers_are_checked_before_the_analysis(
        mlp: Path, work: list[str], run: Run, args: list[str], fragment: str) -> None:
    refused_early(run("gpus", "--fits", mlp, *args), work, fragment)


def test_a_budgets_file_is_checked_whole_before_the_first_model(
        mlp: Path, tmp_path: Path, work: list[str], run: Run) -> None:
    budgets = tmp_path / "graphmem.toml"
    entry = '[[model]]\npath = "mlp.onnx"\nmax_params = "1M"\n'
    budgets.write_text(f"{entry}batch = 2\n{entry}name = 'second'\nbatch = 0\n")
    refused_early(run("check", "--budgets", budgets), work, "batch = 0")
    budgets.write_text(f"{entry}batch = 2\nmax_memory = '90'\n")
    refused_early(run("check", "--budgets", budgets), work, "max_memory", "has no unit")
    budgets.write_text(f"{entry}batch = 2\ngpu = 't5'\n")
    refused_early(run("check", "--budgets", budgets), work, "t5")


def test_budget_parsers_refuse_what_cannot_be_a_budget() -> None:
    for parse, text in ((parse_size, "1e999GiB"), (parse_size, "5EiB"), (parse_size, "8EB"),
                        (parse_memory_limit, "90"), (parse_memory_limit, "0GiB"),
                        (parse_memory_limit, "1e999GiB"), (parse_count, "1e308G"),
                        (parse_count, "1e999"), (parse_latency_s, "1e999s"),
                        (parse_percent, "1e999%")):
        with pytest.raises(SpecError):
            parse(text)
    assert parse_size(str(2**62)) == 2**62  # the largest size
    assert parse_memory_limit("90B").bytes == 90  # bytes, said so
    assert parse_count(str(2**63 - 1024)) == 2**63 - 1024


def test_a_tensor_beyond_2_62_bytes_is_named(tmp_path: Path, run: Run) -> None:
    # x[batch, seq, 8192] float32 at batch = seq = 2**24: 2**24 * 2**24 * 8192 * 4 = 2**63 bytes
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq", 8192])
            for n in ("x", "y")]
    graph = helper.make_graph(nodes, "wide", info[:1], info[1:])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "wide.onnx")
    line = one_line(run("analyze", tmp_path / "wide.onnx", "--batch", str(2**24), "--dim",
                        f"seq={2**24}", "--no-html"), "tensor 'x'", "more than 2**62 bytes")
    assert "batch=16777216" in line


def test_check_sizes_fit_passes_formulas_and_the_limit() -> None:
    check_sizes_fit({"a": SymInt.const(2**62), "b": SymInt.symbol("n") * 2**70, "c": None}, {})
    with pytest.raises(GraphmemError, match=r"tensor 'big'.*n=2"):
        check_sizes_fit({"big": SymInt.const(2**62 + 1)}, {"n": 2})


# ----- --optimizer and other pairs -------------------------------------------------------------
def test_optimizer_without_train_is_refused(mlp: Path, torch_model: Path, work: list[str],
                                            run: Run) -> None:
    refused_early(run("analyze", mlp, "--batch", "2", "--optimizer", "sgd", "--no-html"), work,
                  "--optimizer sgd", "add --train")
    refused_early(run("analyze", f"{torch_model}:build", "--input", "2x4", "--optimizer", "sgd",
                      "--no-html"), work, "add --train")
    refused_early(run("verify", f"{torch_model}:build", "--input", "2x4", "--optimizer",
                      "adamw"), work, "add --train")
    assert not torch_model.with_suffix(".imported").exists()


def test_the_optimizer_still_defaults_to_adam(mlp: Path, run: Run) -> None:
    import json

    code, out, err = run("analyze", mlp, "--batch", "2", "--train", "--json", "-", "--no-html")
    assert code == 0, err
    assert json.loads(out)["config"]["optimizer"] == "adam"


# ----- PyTorch inputs and the user's code ------------------------------------------------------
@pytest.mark.parametrize(("shape", "fragment"), [
    ("99999999999x99999999999", "implausibly large"),
    ("x".join(["2"] * 30), "30 dims"),
    ("16777216x16777216x16777216", "more than 2**62 bytes"),
    ("4x" + "9" * 5000, "implausibly large"),
    ("0x4", "1 or more"),
])
def test_torch_input_shapes_are_checked_before_the_model_is_imported(
        torch_model: Path, work: list[str], run: Run, shape: str, fragment: str) -> None:
    refused_early(run("analyze", f"{torch_model}:build", "--input", shape, "--no-html"), work,
                  fragment)
    refused_early(run("verify", f"{torch_model}:build", "--input", shape), work, fragment)
    assert not torch_model.with_suffix(".imported").exists()


@pytest.mark.parametrize(("source", "fragment"), [
    ("import sys\nsys.exit(3)\n", "importing model_exit.py failed: SystemExit(3)"),
    ("raise SystemExit(7)\n", "importing model_exit.py failed: SystemExit(7)"),
    ("class Stop(BaseException):\n    pass\nraise Stop('no')\n", "Stop('no')"),
])
def test_a_file_that_exits_at_import_is_one_line(tmp_path: Path, work: list[str], run: Run,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 source: str, fragment: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model_exit.py").write_text(source)
    (tmp_path / "ok.py").write_text(BUILD)
    refused_early(run("analyze", "ok.py:build", "--input", "2x4", "--train", "--loss",
                      "model_exit.py:loss", "--no-html"), work, fragment)
    refused_early(run("analyze", "ok.py:build", "--example-inputs", "model_exit.py:inputs",
                      "--no-html"), work, fragment)
    monkeypatch.undo()  # the model itself is imported by the real analysis
    monkeypatch.chdir(tmp_path)
    one_line(run("analyze", "model_exit.py:build", "--input", "2x4", "--no-html"), fragment)
    one_line(run("verify", "model_exit.py:build", "--input", "2x4"), fragment)


def test_functions_that_exit_are_one_line(tmp_path: Path, work: list[str], run: Run,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exits.py").write_text("def build():\n    raise SystemExit(7)\n")
    (tmp_path / "ok.py").write_text(BUILD)
    refused_early(run("analyze", "ok.py:build", "--example-inputs", "exits.py:build",
                      "--no-html"), work, "calling exits.py:build() failed: SystemExit(7)")
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    one_line(run("analyze", "exits.py:build", "--input", "2x4", "--no-html"),
             "calling exits.py:build() failed: SystemExit(7)")


@pytest.mark.torch
def test_a_forward_that_exits_is_one_line(tmp_path: Path, run: Run) -> None:
    (tmp_path / "exits.py").write_text(
        "import sys\nimport torch\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
        "        sys.exit(5)\n\ndef build():\n    return M()\n")
    one_line(run("analyze", f"{tmp_path / 'exits.py'}:build", "--input", "2x4", "--no-html"),
             "SystemExit(5)")


@pytest.mark.parametrize("command", [["analyze"], ["verify"], ["check"]])
def test_a_python_file_without_its_function_is_named(torch_model: Path, work: list[str],
                                                     run: Run, command: list[str]) -> None:
    budget = ["--max-params", "1M"] if command == ["check"] else []
    refused_early(run(*command, torch_model, *budget), work, "is a Python file",
                  f"{torch_model}:build_model")


@pytest.mark.parametrize("command", [["gpus", "--fits"]])
def test_onnx_only_commands_say_so_for_a_python_file(torch_model: Path, work: list[str],
                                                     run: Run, command: list[str]) -> None:
    refused_early(run(*command, torch_model), work, "is a Python file", "torch.onnx.export")


@pytest.mark.parametrize("model", ["a\0b.onnx", "m" * 5000 + ".onnx", "x" * 5000 + ":fn",
                                   "/dev/zero"], ids=["nul", "long", "long-spec", "device"])
@pytest.mark.parametrize("command", [["analyze"], ["verify"], ["check", "--max-params", "1M"],
                                     ["gpus", "--fits"]], ids=lambda c: c[0])
def test_unusable_model_arguments_are_one_line(tmp_path: Path, run: Run,
                                               monkeypatch: pytest.MonkeyPatch,
                                               command: list[str], model: str) -> None:
    monkeypatch.chdir(tmp_path)
    words = [*command[:2], model, *command[2:]] if command[0] == "gpus" else [
        command[0], model, *command[1:]]
    one_line(run(*words, *(["--no-html"] if command == ["analyze"] else [])))
    assert list(tmp_path.iterdir()) == []
