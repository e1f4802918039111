"""`graphmem gpus --fits` and `graphmem verify` from Python: graphmem.gpu_fits and
graphmem.verify_model (`graphmem.verify` is the package of the runners)."""

from __future__ import annotations

import pytest

import graphmem
from graphmem.errors import GraphmemError
from graphmem.pipeline.request import Request
from graphmem.pipeline.run import fits_on_gpus
from tests.helpers.samples import TINY_CNN

pytestmark = pytest.mark.skipif(TINY_CNN is None, reason="samples/tiny_cnn.onnx is missing")


@pytest.mark.slow
def test_gpu_fits_is_the_gpus_command() -> None:
    from graphmem.devices.gpus import find_gpu

    rows = graphmem.gpu_fits(TINY_CNN, batch=8, gpus=["t4", "l4"])
    expected = fits_on_gpus(Request(TINY_CNN, batch=8, plan=False),
                            [find_gpu("t4"), find_gpu("l4")], None)[1]
    assert [row.fit.gpu.name for row in rows] == ["t4", "l4"]
    assert rows == expected  # the same pipeline call the command line makes
    assert all(row.fit.fits and row.max_batch is not None for row in rows)


def test_gpu_fits_refuses_what_the_command_refuses() -> None:
    with pytest.raises(GraphmemError, match=r"t5.*t4"):  # a typo, with the close match
        graphmem.gpu_fits(TINY_CNN, gpus=["t5"])
    with pytest.raises(GraphmemError, match=r"give an \.onnx file"):
        graphmem.gpu_fits("tests/torch_models/small.py:build_convnet")


@pytest.mark.slow
@pytest.mark.ort
def test_verify_runs_an_onnx_model() -> None:
    result = graphmem.verify_model(TINY_CNN, batch=2, optimized_run=False)
    assert result.nodes and result.optimized is None
    assert abs(result.error_pct) < 1  # tiny_cnn matches onnxruntime exactly (docs/verify.md)


@pytest.mark.slow
@pytest.mark.torch
def test_verify_runs_a_pytorch_step_with_keyword_inputs() -> None:
    result = graphmem.verify_model("tests/torch_models/small.py:build_tiny_gpt",
                             {"ids": "2x16:int64"}, train=True, optimizer="sgd")
    assert result.inputs == ("ids=2x16:int64",) and result.train
    assert result.measured.peak_bytes > 0 and result.predicted_activation_peak_bytes > 0


@pytest.mark.parametrize(("model", "options", "message"), [
    (object(), {}, "name the model as 'file.py:fn'"),
    (TINY_CNN, {"inputs": "2x3"}, "an ONNX model takes batch= and dims="),
])
def test_verify_refuses_what_it_cannot_run(model: object, options: dict,
                                           message: str) -> None:
    with pytest.raises(GraphmemError, match=message):
        graphmem.verify_model(model, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(("flags", "keywords"), [
    (["--gpu", "t4", "--batch", "32", "--max-memory", "90%", "--max-params", "1M"],
     {"gpu": "t4", "batch": 32, "max_memory": "90%", "max_params": "1M"}),
    (["--batch", "32", "--max-params", "1k"], {"batch": 32, "max_params": "1k"}),
    (["--gpu", "t4", "--batch", "32", "--max-latency", "1us"],
     {"gpu": "t4", "batch": 32, "max_latency": "1us"}),
])
def test_check_model_passes_where_the_command_does(flags: list[str], keywords: dict,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from graphmem.cli.main import main

    code = main(["check", str(TINY_CNN), *flags])
    capsys.readouterr()
    report = graphmem.check_model(TINY_CNN, **keywords)
    assert code in (0, 1) and report.passed is (code == 0)
    assert [r.passed for r in report.models[0].results] != []


@pytest.mark.parametrize(("keywords", "message"), [
    ({"max_memory": "90"}, "say 90%"),  # a bare number is refused, as --max-memory 90 is
    ({"gpu": "t5"}, r"did you mean 't4'"),
    ({"context": 5}, "add min_sequences=N"),
])
def test_check_model_refuses_before_any_analysis(keywords: dict, message: str) -> None:
    with pytest.raises(GraphmemError, match=message):
        graphmem.check_model(TINY_CNN, **keywords)
