"""`graphmem verify file.py:fn`: one real PyTorch step on the CPU next to the prediction."""

from __future__ import annotations

import json

import pytest

from graphmem.cli.main import main

CONVNET = "tests/torch_models/small.py:ConvNet"


@pytest.mark.parametrize("options", [[], ["--train", "--optimizer", "sgd"],
                                     ["--train", "--optimizer", "adamw"]])
@pytest.mark.slow
@pytest.mark.torch
def test_verify_measures_a_real_step_and_reports_the_error(
        options: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", CONVNET, "--input", "8x3x32x32", "--json", "-", *options])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mode"] == ("training" if options else "inference")
    assert data["device"] == "cpu"
    predicted, measured = data["predicted_activation_peak_bytes"], data["measured_peak_bytes"]
    assert measured > 0
    # the error verify prints is (graphmem - measured) / measured
    assert data["error_pct"] == pytest.approx((predicted - measured) / measured * 100, abs=1e-3)
    # ConvNet's prediction is within 3% of the real step (README, benchmarks/torch_accuracy.md)
    assert abs(data["error_pct"]) < 3


@pytest.mark.parametrize(("argv", "message"), [
    ([CONVNET, "--input", "8x3x32x32", "--batch", "2"], "--batch/--dim/--threads are for ONNX"),
    ([CONVNET], "no example inputs"),
    (["samples/tiny_cnn.onnx", "--train"], "are for PyTorch models"),
    (["tests/torch_models/small.py:nothing_here", "--input", "2x3"], "has no 'nothing_here'"),
])
def test_verify_torch_usage_errors_exit_2(argv: list[str], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
