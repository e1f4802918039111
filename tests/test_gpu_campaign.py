"""benchmarks/gpu_campaign.py without a GPU: the dry run predicts every row of a subset and
measures none (the measured columns empty, the .md and .json of the same rows), so the script
cannot rot before the next GPU; the plan's order, the rows onnxruntime's CUDA provider cannot
run, and the steps the children measure (run here on the CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPT = BENCHMARKS / "gpu_campaign.py"
sys.path.insert(0, str(BENCHMARKS))  # benchmarks/ is not a package: found through sys.path

import gpu_campaign  # noqa: E402

from graphmem.devices.gpus import find_gpu  # noqa: E402


def run(*args: str) -> subprocess.CompletedProcess[str]:
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so the test means the same on every machine
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          check=False, env=environment, timeout=300)


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.ort
def test_without_a_gpu_it_runs_dry_every_row_predicted_none_measured(tmp_path: Path) -> None:
    started = time.monotonic()
    done = run("--quick", "--only", "cnn-s,tiny_cnn.dynamo", "--out-dir", str(tmp_path))
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "no CUDA device" in done.stdout
    data = json.loads(next(tmp_path.glob("gpu-*-h100-sxm-dry.json")).read_text())
    assert data["measured"] is False
    rows = data["rows"]
    sections = [row["section"] for row in rows]
    # 2 context lines; cnn-s quick: inference, AdamW, bf16, fp16; tiny_cnn.dynamo and the
    # cnn-s export at batches 8 and 1, both levels and the arena by request
    assert sections.count("context") == 2
    assert sections.count("torch-cuda") == 4
    assert sections.count("ort-cuda") == 2 * 2 * 3
    for row in rows:
        assert row["status"] == "predicted", row
        for metric in row["metrics"].values():
            assert metric["predicted"] > 0 and metric["measured"] is None, row
            assert metric["error_pct"] is None
    markdown = next(tmp_path.glob("gpu-*-h100-sxm-dry.md")).read_text()
    table_rows = [line for line in markdown.splitlines()
                  if line.startswith("| ") and not line.startswith("| model")]
    assert len(table_rows) == len(rows)
    assert seconds < 120, f"the dry subset took {seconds:.0f} s"


@pytest.mark.slow
@pytest.mark.ort
def test_the_onnxruntime_measuring_path_runs_on_the_cpu_provider(tmp_path: Path) -> None:
    """The children, the probe and verify's runner as the GPU run uses them, on onnxruntime's
    CPU provider (a hidden check mode): the arena's numbers come back, the device's used
    memory stays empty."""
    done = run("--quick", "--only", "tiny_cnn.dynamo", "--batches", "8", "--ort-provider",
               "cpu", "--out-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    data = json.loads(next(tmp_path.glob("gpu-*.json")).read_text())
    rows = [row for row in data["rows"] if row["section"] == "ort-cuda"]
    assert len(rows) == 3  # batch 8, both levels, and ORT_DISABLE_ALL with the arena by request
    for row in rows:
        assert row["status"] == "measured", row
        assert row["metrics"]["arena peak"]["measured"] > 0
        assert row["metrics"]["arena held"]["measured"] > 0
        assert row["metrics"]["used"]["measured"] is None
    assert any("--ort-provider cpu" in note for note in data["notes"])


def test_the_plan_measures_inference_and_adamw_of_every_model_first() -> None:
    plan = gpu_campaign.torch_plan(quick=False, only=())
    models = {model for model, _ in plan}
    firsts = plan[:2 * len(models)]
    assert {step for _, step in firsts} == set(gpu_campaign.FIRST_STEPS)
    assert {model for model, _ in firsts} == models
    for model, step in plan:  # adapters and checkpointing: Hugging Face models only
        if "lora" in step or "ckpt" in step:
            assert gpu_campaign.ZOO[model].hf
    quick = gpu_campaign.torch_plan(quick=True, only=("gpt2",))
    assert quick and all(model == "gpt2-s" for model, _ in quick)


def test_rows_the_cuda_provider_cannot_run_say_why_and_keep_the_prediction() -> None:
    campaign = gpu_campaign.Campaign(find_gpu("h100-sxm"), measure=True, quick=True, only=())
    campaign.row("ort-cuda", "tiny", "ORT_ENABLE_ALL", "batch=1",
                 lambda: {"arena peak": 512, "arena held": 1 << 20, "used": 3 << 20},
                 ("ort", {}), not_run="onnxruntime 1.30.0 here has no CUDAExecutionProvider")
    row = campaign.rows[0]
    assert (row.status, row.reason) == ("not run",
                                        "onnxruntime 1.30.0 here has no CUDAExecutionProvider")
    assert row.metrics["arena peak"].predicted == 512
    assert row.metrics["used"].measured is None


def test_a_prediction_that_fails_is_a_failed_row_not_a_crash() -> None:
    campaign = gpu_campaign.Campaign(find_gpu("h100-sxm"), measure=False, quick=True, only=())

    def predict() -> dict[str, int]:
        raise RuntimeError("Expected inputs of BF16 type")

    campaign.row("torch-cuda", "mixtral-s", "inference", "4x128:int64", predict, None)
    row = campaign.rows[0]
    assert row.status == "failed"
    assert row.reason == "prediction: RuntimeError: Expected inputs of BF16 type"


def test_error_is_predicted_less_measured_over_measured() -> None:
    # (110 - 100) / 100 = +10%
    assert gpu_campaign.Metric(110, 100).error_pct == pytest.approx(10.0)
    assert gpu_campaign.Metric(110, None).error_pct is None


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize(("model", "step"), [("cnn-s", "train adamw fp16 GradScaler"),
                                              ("gpt2-s", "train adamw lora")])
def test_the_measured_steps_run(model: str, step: str) -> None:
    """What a child runs on the GPU, here on the CPU: peft's LoRA on a Hugging Face model,
    GradScaler's warm-up until AdamW has state. (The checkpointing step, Hugging Face's own
    gradient_checkpointing_enable, ran here too when this was written: 20 s, left out.)"""
    assert gpu_campaign.child_torch(model, step, device="cpu") == {}


@pytest.mark.ort
def test_one_analysis_predicts_both_arena_strategies_as_analyze_does() -> None:
    """predict_ort analyses once and runs the runtime model once per extend strategy: each
    prediction equals `analyze --runtime ort-cuda --ort-arena-extend ...` run on its own."""
    from graphmem import analyze_onnx
    from tests.helpers.samples import TINY_CNN

    gpu = find_gpu("t4")
    predictions, _ = gpu_campaign.predict_ort(TINY_CNN, {"batch": 8}, gpu)
    for extend in ("next-power-of-two", "same-as-requested"):
        alone = analyze_onnx(TINY_CNN, dims={"batch": 8}, gpu="t4", runtime="ort-cuda",
                             plan=False, ort_arena_extend=extend).runtime
        assert alone is not None
        assert predictions[extend]() == {"arena peak": alone.runtime_peak_bytes,
                                         "arena held": alone.arena_held_bytes or 0,
                                         "used": alone.device_total_bytes}
    # the two strategies differ on this model, so the test tells them apart
    assert predictions["next-power-of-two"]() != predictions["same-as-requested"]()
