"""--example-inputs FILE.py:FN: the inputs from a user's function, called on the meta device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from graphmem.cli.main import main
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.loader import TensorSpec, load_example_inputs, spec_text

MODEL = "tests/torch_models/small.py:build_tiny_gpt"
INPUTS = '''
import torch

def ids():
    return torch.zeros(8, 64, dtype=torch.long)

def huge():
    # 4 GiB if it were real; on the meta device it costs nothing
    return (torch.empty(1 << 30), "2x3:float16")

def empty():
    return ()

def number():
    return 3

def raises():
    raise RuntimeError("no data here")

def keywords():
    return {"input_ids": torch.zeros(8, 64, dtype=torch.long), "mask": "8x64:bool"}
'''


@pytest.fixture
def inputs_file(tmp_path: Path) -> Path:
    path = tmp_path / "example_inputs.py"
    path.write_text(INPUTS)
    return path


def test_shapes_and_dtypes_are_read_on_the_meta_device(inputs_file: Path) -> None:
    assert load_example_inputs(f"{inputs_file}:ids") == [TensorSpec((8, 64), torch.int64)]
    assert load_example_inputs(f"{inputs_file}:huge") == [
        TensorSpec((1 << 30,), torch.float32), TensorSpec((2, 3), torch.float16)]


def test_a_dict_is_keyword_inputs(inputs_file: Path) -> None:
    assert load_example_inputs(f"{inputs_file}:keywords") == [
        TensorSpec((8, 64), torch.int64, "input_ids"), TensorSpec((8, 64), torch.bool, "mask")]


def test_spec_text_round_trips() -> None:
    assert spec_text(TensorSpec((4, 1024), torch.int64)) == "4x1024:int64"


@pytest.mark.torch
def test_cli_example_inputs_equal_the_same_input_flag(inputs_file: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", MODEL, "--example-inputs", f"{inputs_file}:ids", "--json", "-",
                 "--no-html"]) == 0
    from_fn = json.loads(capsys.readouterr().out)
    assert main(["analyze", MODEL, "--input", "8x64:int64", "--json", "-", "--no-html"]) == 0
    from_flag = json.loads(capsys.readouterr().out)
    assert from_fn["memory"]["peak_bytes"] == from_flag["memory"]["peak_bytes"]
    assert from_fn["flops"]["total"] == from_flag["flops"]["total"]


@pytest.mark.parametrize(("fn", "message"), [
    ("empty", "returned no inputs"),
    ("number", "returned 'int': return a tensor"),
    ("raises", "calling"),
    ("missing", "missing"),
])
def test_bad_example_inputs_are_one_line_errors(inputs_file: Path, fn: str,
                                                message: str) -> None:
    with pytest.raises(GraphmemError, match=message):
        load_example_inputs(f"{inputs_file}:{fn}")


def test_cli_refuses_both_forms(inputs_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", MODEL, "--example-inputs", f"{inputs_file}:ids",
                 "--input", "8x64:int64", "--no-html"])
    assert code == 2
    assert "either with --input or with --example-inputs" in capsys.readouterr().err
