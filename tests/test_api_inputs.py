"""Keyword inputs (`model(**inputs)`, as Hugging Face models take them): a dict in the Python
API, `--input NAME=SHAPE` on the command line, on the trace and in `verify`."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

import graphmem  # noqa: E402
from graphmem.cli.main import main  # noqa: E402
from graphmem.errors import GraphmemError  # noqa: E402
from graphmem.frontends.torch.loader import (  # noqa: E402
    TensorSpec,
    parse_tensor_spec,
    spec_text,
)

pytestmark = pytest.mark.torch


class Masked(torch.nn.Module):
    """forward(x, mask=None): the mask, when given, is one more input and one more product."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        y = self.linear(x)
        return y if mask is None else y * mask


def input_names(result: graphmem.Result) -> list[str]:
    return [value.name for value in result.graph.inputs]


def test_a_named_spec_parses_and_round_trips() -> None:
    spec = parse_tensor_spec("attention_mask=4x1024:int64")
    assert spec == TensorSpec((4, 1024), torch.int64, "attention_mask")
    assert spec_text(spec) == "attention_mask=4x1024:int64"
    assert parse_tensor_spec("4x1024:int64").name is None


@pytest.mark.parametrize(("text", "message"), [
    ("2x=3", "not a Python identifier"),
    ("mask=", "expected a shape"),
    ("mask=2x0", "1 or more"),
])
def test_bad_named_specs_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(GraphmemError, match=message):
        parse_tensor_spec(text)


def test_a_dict_is_keyword_inputs_tensors_or_specs() -> None:
    model = Masked()
    x, mask = torch.zeros(2, 8), torch.ones(2, 8)
    positional = graphmem.analyze(model, [x, mask])
    keyword = graphmem.analyze(model, {"x": x, "mask": mask})
    specs = graphmem.analyze(model, {"x": "2x8", "mask": (2, 8)})
    assert keyword.peak_bytes == positional.peak_bytes == specs.peak_bytes
    assert input_names(keyword) == ["x", "mask"]
    # the mask reaches forward(): y * mask is one multiply per element, 2 * 8 = 16 FLOPs
    without = graphmem.analyze(model, {"x": x})
    assert int(keyword.costs.total_flops) - int(without.costs.total_flops) == 2 * 8


def test_positional_then_keyword_in_one_list() -> None:
    model = Masked()
    mixed = graphmem.analyze(model, ["2x8", "mask=2x8"])
    assert input_names(mixed) == ["input0", "mask"]
    assert mixed.peak_bytes == graphmem.analyze(model, ["2x8", "2x8"]).peak_bytes


@pytest.mark.parametrize(("inputs", "message"), [
    ({"x": "2x8", "masc": "2x8"}, r"forward\(x, mask\).*masc"),  # a misspelt keyword
    (["mask=2x8", "2x8"], "positional --input follows a keyword"),
    (["2x8", "mask=2x8", "mask=2x8"], "given twice"),
    ({"not a name": "2x8"}, "not a keyword of forward"),
])
def test_keyword_mistakes_are_named_before_tracing(inputs: object, message: str) -> None:
    with pytest.raises(GraphmemError, match=message):
        graphmem.analyze(Masked(), inputs)


def test_the_cli_takes_name_equals_shape(tmp_path: object,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    model = "tests/torch_models/small.py:build_tiny_gpt"
    assert main(["analyze", model, "--input", "ids=8x64:int64", "--json", "-", "--no-html"]) == 0
    keyword = json.loads(capsys.readouterr().out)
    assert main(["analyze", model, "--input", "8x64:int64", "--json", "-", "--no-html"]) == 0
    positional = json.loads(capsys.readouterr().out)
    assert keyword["memory"]["peak_bytes"] == positional["memory"]["peak_bytes"]


def test_the_cli_refuses_a_positional_after_a_keyword(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", "tests/torch_models/small.py:build_tiny_gpt", "--input",
                 "ids=8x64:int64", "--input", "8x64:int64", "--no-html"])
    assert code == 2
    assert "positional --input follows a keyword" in capsys.readouterr().err


def test_verify_calls_the_model_with_keywords() -> None:
    from graphmem.verify.runners.torch_runner import measure_step

    specs = [TensorSpec((2, 8), torch.float32), TensorSpec((2, 8), torch.float32, "mask")]
    measured = measure_step(Masked(), specs, train=True, optimizer="sgd")
    assert measured.peak_bytes > 0  # Masked.forward would fail on a third positional


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_a_hugging_face_model_with_its_attention_mask(name: str) -> None:
    pytest.importorskip("transformers")
    from tests.torch_models import hf

    model = getattr(hf, name)()
    ids, mask = torch.zeros(2, 64, dtype=torch.int64), torch.ones(2, 64, dtype=torch.int64)
    with_mask = graphmem.analyze(model, {"input_ids": ids, "attention_mask": mask}, train=True)
    without = graphmem.analyze(model, {"input_ids": ids}, train=True)
    assert input_names(with_mask) == ["input_ids", "attention_mask"]
    mask_value = with_mask.graph.values["attention_mask"]
    assert mask_value.consumers  # the model read it: it was passed as attention_mask=
    # the mask is [2, 64] int64 = 2 * 64 * 8 = 1,024 bytes more resident input at least
    assert with_mask.peak_bytes >= without.peak_bytes + 2 * 64 * 8
