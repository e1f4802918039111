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
    # the CPU's kernel scratch is its own figure: the allocator's peak less the tensor peak
    scratch = data["measured_kernel_scratch_bytes"]
    assert data["measured_allocator_peak_bytes"] == measured + scratch
    assert data["traced_for"] is None  # on the CPU, the CPU's kernels are traced


@pytest.mark.slow
@pytest.mark.torch
def test_verify_prints_the_kernels_scratch_as_its_own_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    # ConvNet's training step: convolution_backward's oneDNN buffers, freed before it returns
    assert main(["verify", CONVNET, "--input", "8x3x32x32", "--train"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "kernels' scratch (measured, not in either figure above): +" in out
    assert "inside aten::convolution_backward" in out


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


@pytest.mark.parametrize(("device", "name", "expected"), [
    ("cpu", "NVIDIA H100 80GB HBM3", None),
    ("cuda", "NVIDIA H100 80GB HBM3", "h100-sxm"),  # torch.cuda.get_device_name() spellings
    ("cuda", "NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("cuda", "Some Future GPU 9000", None),  # not in the table: the CPU's kernels are traced
])
def test_verify_on_a_gpu_traces_that_gpus_cuda_kernels(
        device: str, name: str, expected: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    from graphmem.verify import torch_run

    monkeypatch.setattr(torch_run, "cuda_device_name", lambda: name)
    assert torch_run.traced_for(device) == expected
