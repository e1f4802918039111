"""A check entry's options: the Python API's keywords (graphmem/gate/options.py), read from
the option table (graphmem/options/check_entry.py), in the budgets file and on the command
line; every bad one is one line before any analysis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphmem.errors import GraphmemError
from graphmem.gate.budgets_file import load_budgets_file
from graphmem.gate.options import CHECK_OWNED
from graphmem.options.check_entry import request_builder
from graphmem.options.values import python_keywords
from tests.helpers.cli import assert_one_error_line, run_cli
from tests.helpers.llm_configs import TINY_LLAMA

BUILDER = request_builder()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    config = tmp_path / "tiny-llama"
    config.mkdir()
    (config / "config.json").write_text(json.dumps(TINY_LLAMA))
    return tmp_path


def budgets(folder: Path, text: str) -> Path:
    path = folder / "graphmem.toml"
    path.write_text(text)
    return path


def test_the_keywords_are_the_option_tables() -> None:
    # every keyword of build_request (the option table's) but the check's own settings, each
    # with the TOML types its entry takes; a Python object (ParallelLayout) takes none
    assert set(BUILDER.keywords) == set(python_keywords()) - CHECK_OWNED
    assert BUILDER.keywords["train"] == (bool,)
    assert BUILDER.keywords["tensor_parallel"] == (int,)
    assert BUILDER.keywords["pipeline_parallel"] == (int,)
    assert BUILDER.keywords["inputs"] == (list,)
    assert BUILDER.keywords["serve"] == (bool, str)  # serve = "sglang"
    assert BUILDER.keywords["lora"] == (bool, str)
    assert BUILDER.keywords["gpu_memory_utilization"] == (float, int)
    assert BUILDER.keywords["checkpoints"] == (list,)
    assert BUILDER.keywords["distributed"] == ()
    assert BUILDER.keywords["parallel"] == ()


def test_a_budgets_entry_carries_its_options(folder: Path) -> None:
    path = budgets(folder, """
[defaults]
gpu = "h100"
train = true
optimizer = "adamw"

[[model]]
path = "tiny-llama"
inputs = ["1x16:int64"]
tensor_parallel = 2
gpus = 2
max_memory = "90%"
""")
    (spec,) = load_budgets_file(path, BUILDER)
    assert spec.model_path == folder / "tiny-llama" and spec.label == "tiny-llama"
    assert dict(spec.options) == {"train": True, "optimizer": "adamw",
                                  "inputs": ["1x16:int64"], "tensor_parallel": 2, "gpus": 2}
    from graphmem.gate.check import check_request

    request = check_request(spec, BUILDER)  # built and checked, nothing analyzed
    assert request.training is not None and request.training.optimizer == "adamw"
    assert request.distributed is not None and request.distributed.tensor_parallel == 2
    assert request.inputs == ("1x16:int64",) and request.gpu == "h100"


def test_a_budgets_entry_takes_pipeline_parallel(folder: Path) -> None:
    path = budgets(folder, '[[model]]\npath = "tiny-llama"\ngpu = "h100"\ntrain = true\n'
                   'tensor_parallel = 2\npipeline_parallel = 2\ninputs = ["1x16:int64"]\n')
    from graphmem.gate.check import check_request

    (spec,) = load_budgets_file(path, BUILDER)
    request = check_request(spec, BUILDER)
    assert request.distributed is not None and request.distributed.parallel.pipeline == 2


@pytest.mark.parametrize(("entry", "fragments"), [
    ("tensor_paralel = 2", ("unknown key 'tensor_paralel'", "did you mean 'tensor_parallel'")),
    ('train = "yes"', ("train = 'yes'", "should be a boolean")),
    ('tensor_parallel = "2"', ("tensor_parallel = '2'", "should be an integer")),
    ("inputs = [1.5]", ("inputs[0] = 1.5", "should be a string or an integer")),
    ('inputs = "1x16"', ("inputs = '1x16'", "should be an array")),
    ("parallel = { pipeline = 2 }", ("parallel = ", "a Python object")),
    ("suggest = true", ("unknown key 'suggest'",)),
])
def test_bad_options_in_a_budgets_file_are_one_line(folder: Path, entry: str,
                                                    fragments: tuple[str, ...]) -> None:
    path = budgets(folder, f'[[model]]\npath = "tiny-llama"\ngpu = "h100"\n{entry}\n')
    with pytest.raises(GraphmemError) as error:
        load_budgets_file(path, BUILDER)
    for fragment in fragments:
        assert fragment in str(error.value), error.value


def test_a_bad_option_value_names_the_entry_before_any_analysis(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the second entry's optimizer is refused while the Requests are built: the first
    # entry is not analyzed first
    path = budgets(folder, '[defaults]\ngpu = "h100"\n[[model]]\npath = "tiny-llama"\n'
                   '[[model]]\nname = "bad"\npath = "tiny-llama"\ntrain = true\n'
                   'optimizer = "adamm"\n')
    code, _, err = run_cli(["check", "--budgets", str(path)], capsys)
    assert_one_error_line(code, err, "[[model]] #2", "adamm")


@pytest.mark.parametrize(("flags", "fragments"), [
    (["--gpu", "nosuchgpu"], ("nosuchgpu",)),
    (["--gpu", "h100", "--block-size", "16"], ("serve",)),
    (["--max-memory", "90%"], ("--gpu",)),
    (["--train", "--optimizer", "adamm", "--gpu", "h100"], ("adamm",)),
])
def test_cli_refusals_are_one_line(folder: Path, flags: list[str], fragments: tuple[str, ...],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["check", str(folder / "tiny-llama"), *flags], capsys)
    assert_one_error_line(code, err, *fragments)


def test_model_options_belong_in_the_budgets_file(folder: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = budgets(folder, '[[model]]\npath = "tiny-llama"\ngpu = "h100"\n')
    code, _, err = run_cli(["check", "--budgets", str(path), "--train", "--tensor-parallel",
                            "2"], capsys)
    assert_one_error_line(code, err, "--train", "--tensor-parallel", "in the file")


def test_outputs_never_overwrite_a_config_or_a_spec_file(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = folder / "tiny-llama" / "config.json"
    code, _, err = run_cli(["check", str(folder / "tiny-llama"), "--gpu", "h100", "--json",
                            str(config)], capsys)
    assert_one_error_line(code, err, "config.json")
    assert json.loads(config.read_text()) == TINY_LLAMA
    spec = folder / "net.py"
    spec.write_text("def build():\n    raise SystemExit('not imported')\n")
    code, _, err = run_cli(["check", f"{spec}:build", "--gpu", "h100", "--junit", str(spec)],
                           capsys)
    assert_one_error_line(code, err, "net.py")
    assert "not imported" in spec.read_text()


def test_a_pytorch_spec_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    # a `file.py:fn` model with its inputs, as analyze takes it
    code, out, _ = run_cli(["check", "tests/torch_models/small.py:build_convnet", "--input",
                            "2x3x32x32", "--max-params", "100M"], capsys)
    assert code == 0, out
    assert out.startswith("small.build_convnet (tests/torch_models/small.py:build_convnet)")


def test_spec_options_are_relative_to_the_budgets_file(folder: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path_factory: pytest.TempPathFactory
                                                       ) -> None:
    # loss = "losses.py:loss" beside the file, as path = "tiny-llama" is: the check run
    # from another folder reads the same file (a module name stays a module name)
    from graphmem.gate.check import check_request

    path = budgets(folder, '[[model]]\npath = "tiny-llama"\ngpu = "h100"\ntrain = true\n'
                   'inputs = ["1x16:int64"]\nloss = "losses.py:loss"\n'
                   '[[model]]\npath = "tiny-llama"\nname = "by-module"\ngpu = "h100"\n'
                   'train = true\ninputs = ["1x16:int64"]\nloss = "my_losses:loss"\n')
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    by_file, by_module = load_budgets_file(path, BUILDER)
    assert by_file.options["loss"] == str(folder / "losses.py:loss")
    assert by_module.options["loss"] == "my_losses:loss"
    request = check_request(by_file, BUILDER)
    assert request.training is not None and request.training.loss == str(folder / "losses.py:loss")
