"""The device total is the demand (issue 23, item 1): what the run holds on a GPU large enough.

Where the runtime model's allocator, bounded by the GPU, runs out (onnxruntime's arena cannot
back a region, PyTorch's caching allocator cannot get a segment), the device total is the
same run unbounded, "over by" is that demand less the capacity, and where the bounded run
first failed is a fact of its own (`OutOfMemoryAt`). Before, the total stopped where the GPU
ran out: ResNet-50 at batch 3000 on a T4 read "23.6 GiB ... 8.6 GiB over" beside 28.7 GiB of
live tensors.

What is a lower bound of the device total, per runtime (docs/runtime-models.md):
- every runtime: its own tensors at its peak + the weights and inputs it holds apart + its
  weights in the pool + the context and workspaces (the allocator overhead is >= 0);
- torch-cuda: graphmem's live-tensor peak (model order, weights, optimizer state and inputs
  included: the allocator replays graphmem's liveness) + the context and workspaces;
- ort-cuda: not graphmem's live-tensor peak: onnxruntime runs Relu and the like in place and
  reuses buffers, graphmem's liveness does not (tiny_cnn at batch 100,000 below).
"""

from __future__ import annotations

import html
import json
from dataclasses import replace
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes
from graphmem.devices.gpus import find_gpu
from graphmem.distributed.serving import (
    CacheShape,
    ServingConfig,
    ServingInputs,
    StepPeak,
    plan_serving,
    serving_fit,
)
from graphmem.passes.fit import OutOfMemoryAt, fit_on_gpu
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.device_total import runtime_estimate
from graphmem.report.out_of_memory import out_of_memory_text
from graphmem.runtime_models.base import RuntimeEstimate
from tests.helpers.cli import run_cli
from tests.helpers.samples import SAMPLES_DIR

GIB = 1 << 30
T4_BYTES = find_gpu("t4").capacity_bytes  # 15,360 MiB: what the T4's driver reports


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ----- (a) a model that does not fit: one demand in the terminal, the JSON and the HTML ---------

DOES_NOT_FIT = [
    pytest.param([str(SAMPLES_DIR / "resnet50.onnx"), "--batch", "3000"], "ort-cuda",
                 id="resnet50-batch-3000"),
    # an ONNX inference graph's training step (PyTorch's caching allocator): about twice the T4
    pytest.param([str(SAMPLES_DIR / "tiny_gpt.onnx"), "--train", "--dim", "seq=64", "--batch",
                  "25000"], "torch-cuda", id="tiny-gpt-onnx-training"),
    # the new-user case: a traced transformer's AdamW step, a large batch
    pytest.param(["tests/models.py:tiny_gpt", "--input", "24000x64:int64", "--train",
                  "--optimizer", "adamw"], "torch-cuda", id="tiny-gpt-torch-training",
                 marks=pytest.mark.torch),
]


@pytest.mark.slow
@pytest.mark.parametrize(("args", "runtime"), DOES_NOT_FIT)
def test_the_demand_and_its_over_by_in_every_output(args: list[str], runtime: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    json_path, html_path = tmp_path / "report.json", tmp_path / "report.html"
    code, out, _ = run_cli(["analyze", *args, "--gpu", "t4", "--json", str(json_path),
                            "--html", str(html_path)], capsys)
    assert code == 0
    report = json.loads(json_path.read_text())
    gpu, page, terminal = report["gpu"], html_path.read_text(), _one_line(out)
    required, capacity, live = gpu["required_bytes"], gpu["memory_bytes"], gpu["live_peak_bytes"]
    over = gpu["over_bytes"]
    # the numbers: the demand is at least the live tensors (and the context), over by is
    # the demand less the capacity, the step needs more than the GPU
    assert gpu["basis"] == f"{runtime} device total" and gpu["fits"] is False
    assert capacity == T4_BYTES and required == report["memory"]["device_total_bytes"]
    assert live == report["memory"]["peak_bytes"]
    assert required >= live + gpu["parts"]["context"]
    assert over == required - capacity > 0
    assert sum(gpu["parts"].values()) == required
    oom = gpu["out_of_memory"]
    assert oom is not None and oom["node"] and oom["step"] >= 1
    assert oom["held_bytes"] + oom["request_bytes"] > oom["free_bytes"]  # where it stops
    # the terminal: the verdict line, the live tensors and where the GPU runs out
    share = f"{required / capacity:.1%}"
    assert (f"does NOT fit on NVIDIA Tesla T4: {format_bytes(required)} of"
            f" {format_bytes(capacity)} ({share}, {format_bytes(over)} over)") in terminal
    assert f"live tensors at the peak {format_bytes(live)}" in terminal
    assert _one_line(oom["text"]) in terminal and oom["text"].startswith("first out of memory")
    # the HTML: the same demand, over by and live peak, to the byte in the titles
    for size in (required, over, live):
        assert f'title="{size:,} bytes">{format_bytes(size)}</span>' in page
    assert f"over by {format_bytes(over)} · {share} of the GPU" in html.unescape(page)
    assert html.escape(oom["text"]) in page


def test_resnet50_at_batch_3000_is_the_demand_not_where_the_t4_ran_out() -> None:
    analysis = analyze_onnx(SAMPLES_DIR / "resnet50.onnx", batch=3000, gpu="t4", plan=False,
                            runtime="auto")
    fit, estimate = analysis.fit, analysis.runtime
    assert fit is not None and estimate is not None and fit.out_of_memory is not None
    # before: the bounded run's 23.6 GiB (the regions held when the 9.0 GiB output of
    # /layer1/layer1.0/conv3 found no region: 8.6 GiB over); the run needs 50.5 GiB
    assert fit.out_of_memory.node == "/layer1/layer1.0/conv3/Conv"
    assert fit.out_of_memory.request_bytes == 3000 * 256 * 56 * 56 * 4  # [3000, 256, 56, 56] fp32
    assert int(fit.required_bytes) == estimate.device_total_bytes > 50 * GIB
    assert int(fit.required_bytes) > int(analysis.liveness.peak_bytes)  # 28.7 GiB
    assert fit.over_bytes == estimate.over_bytes == estimate.device_total_bytes - T4_BYTES


# ----- (b) the invariants, on samples and batches that fit and that do not ---------------------

CASES = [  # sample, dims, training, batch
    ("tiny_cnn.onnx", {}, False, 64),
    ("tiny_cnn.onnx", {}, False, 100_000),  # fits: onnxruntime in place below the live peak
    ("resnet50.onnx", {}, False, 1),
    ("resnet50.onnx", {}, False, 764),  # the largest batch that fits
    ("resnet50.onnx", {}, False, 765),
    ("resnet50.onnx", {}, False, 3000),
    ("mobilenet_v2.onnx", {}, False, 2000),
    ("gpt2.onnx", {"seq": 256}, False, 64),
    ("gpt2.onnx", {"seq": 256}, False, 400),
    ("tiny_llama.onnx", {"seq": 64}, False, 50_000),
    ("tiny_gpt.onnx", {"seq": 64}, True, 8),
    ("tiny_gpt.onnx", {"seq": 64}, True, 12_458),  # the largest batch that fits
    ("tiny_gpt.onnx", {"seq": 64}, True, 12_459),
    ("tiny_gpt.onnx", {"seq": 64}, True, 25_000),
    ("tiny_cnn.onnx", {}, True, 200_000),
]


def _at(sample: str, dims: dict[str, int], train: bool, batch: int) -> Analysis:
    return analyze_onnx(SAMPLES_DIR / sample, batch=batch, dims=dims, gpu="t4", plan=False,
                        runtime="auto", train=train)


def _own_floor(estimate: RuntimeEstimate) -> int:
    """The runtime's own tensors at its peak, the weights it holds apart or in its pool, the
    context and workspaces: the device total is at least these."""
    return (estimate.tensors_at_peak_bytes + estimate.resident_bytes
            + estimate.runtime_weights_bytes + estimate.context_bytes
            + estimate.workspace_bytes)


@pytest.mark.parametrize(("sample", "dims", "train", "batch"), CASES,
                         ids=[f"{c[0].removesuffix('.onnx')}-{'train' if c[2] else 'infer'}-{c[3]}"
                              for c in CASES])
def test_the_device_total_is_the_demand(sample: str, dims: dict[str, int], train: bool,
                                        batch: int) -> None:
    analysis = _at(sample, dims, train, batch)
    fit, estimate = analysis.fit, analysis.runtime
    assert fit is not None and estimate is not None and fit.runtime == estimate.runtime
    total = estimate.device_total_bytes
    # one number: the verdict, the over-by and the parts read the device total
    assert int(fit.required_bytes) == total
    assert fit.over_bytes == estimate.over_bytes == total - fit.capacity_bytes
    assert fit.fits is (total <= fit.capacity_bytes) is estimate.satisfied
    assert sum(int(part.size_bytes) for part in fit.parts) == total
    # the floors: the runtime's own tensors and weights, and (PyTorch) graphmem's live peak
    assert estimate.allocator_overhead_bytes >= 0 and total >= _own_floor(estimate)
    if estimate.runtime == "torch-cuda":
        assert total >= int(analysis.liveness.peak_bytes) + estimate.context_bytes
    # where the bounded run failed it says where, and the total is the unbounded run's
    unbounded = runtime_estimate(analysis, estimate.runtime, fit.gpu)
    if fit.fits:
        assert fit.out_of_memory is None and estimate.failure == ""
    else:
        assert fit.out_of_memory is not None and fit.out_of_memory == estimate.out_of_memory
        assert estimate.failure and out_of_memory_text(fit.out_of_memory)
        assert total == unbounded.device_total_bytes > fit.capacity_bytes
        assert estimate.tensors_at_peak_bytes == unbounded.tensors_at_peak_bytes


def test_onnxruntime_in_place_holds_less_than_graphmems_live_peak() -> None:
    # why the live-tensor floor is PyTorch's alone: tiny_cnn at batch 100,000 fits a T4 in
    # onnxruntime's plan (Relu written over its input, freed buffers reused), though graphmem's
    # live tensors (each op's input and output both held) are more than its device total
    analysis = _at("tiny_cnn.onnx", {}, False, 100_000)
    assert analysis.fit is not None and analysis.fit.fits is True
    assert analysis.runtime is not None
    assert analysis.runtime.device_total_bytes < int(analysis.liveness.peak_bytes)


def test_weights_that_do_not_fit_fail_before_the_run_and_the_demand_is_the_run() -> None:
    # gpt2's weights and inputs (622 MiB) on a GPU with 1 MiB less than they and the context
    # need: onnxruntime fails at session creation; the demand is the whole run all the same
    analysis = _at("gpt2.onnx", {"seq": 256}, False, 1)
    assert analysis.runtime is not None and analysis.fit is not None
    context, resident = analysis.runtime.context_bytes, analysis.runtime.resident_bytes
    capacity = context + resident - (1 << 20)
    bounded = runtime_estimate(analysis, "ort-cuda", analysis.fit.gpu, capacity_bytes=capacity)
    unbounded = runtime_estimate(analysis, "ort-cuda", analysis.fit.gpu)
    oom = bounded.out_of_memory
    assert oom is not None and oom.step is None and oom.node == ""
    assert oom.request_bytes == resident and oom.free_bytes == capacity - context
    assert bounded.satisfied is False and bounded.fits is False
    assert bounded.device_total_bytes == unbounded.device_total_bytes
    assert bounded.over_bytes == unbounded.device_total_bytes - capacity
    assert "before the first node, for the weights and inputs" in out_of_memory_text(oom)


# ----- the serving plan and the per-rank plans: sums of their parts, never capped ---------------


def test_the_serving_verdict_is_over_the_engines_budget_by_its_demand() -> None:
    # 256 B per token (2 layers x 2 KV heads x 16 x 2 B, K and V); vLLM's requested memory
    # 0.9 x 1,000,000 = 900,000 B, the 50,000 B context outside it (the limit 950,000 B);
    # one 1,024-token sequence: 550,000 weights + 100,000 step + 50,000 context + 64 blocks
    # x 4,096 B = 962,144 B: 12,144 B over, though 96.2% of the GPU
    cache = CacheShape(layers=2, kv_heads=2, head_dim=16, dtype="float16", dtype_bytes=2)
    plan = plan_serving(ServingInputs(
        config=ServingConfig(context=1024, enforce_eager=True), cache=cache, gpu_name="t4",
        capacity_bytes=1_000_000, cuda_context_bytes=50_000, weights_bytes=550_000,
        steps=(StepPeak("analyzed step", {}, 100_000),), position_limit=4096,
        position_limit_source="--max-context"))
    step = OutOfMemoryAt("x", "n", "Conv", 1, 1, 1, 0, 0)  # the single step's, not the plan's
    single = fit_on_gpu(find_gpu("t4"), SymInt.const(1))
    fit = serving_fit(replace(single, out_of_memory=step), plan)
    assert fit.fits is False and int(fit.required_bytes) == 962_144
    assert fit.limit_bytes == 950_000 and fit.over_bytes == 12_144
    assert fit.out_of_memory is None
    assert sum(int(part.size_bytes) for part in fit.parts) == 962_144


@pytest.mark.slow
@pytest.mark.torch
def test_a_distributed_jobs_per_gpu_total_is_its_demand(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # DDP on 2 GPUs: each rank holds the whole step of a batch too large for a T4
    out = tmp_path / "ddp.json"
    code, _, _ = run_cli(["analyze", "tests/models.py:tiny_gpt", "--input", "24000x64:int64",
                          "--train", "--gpus", "2", "--strategy", "ddp", "--gpu", "t4",
                          "--no-html", "--json", str(out)], capsys)
    assert code == 0
    gpu = json.loads(out.read_text())["gpu"]
    required = gpu["required_bytes"]
    assert gpu["basis"] == "ddp per-GPU device total" and gpu["fits"] is False
    assert sum(gpu["parts"].values()) == required >= gpu["live_peak_bytes"]
    assert gpu["over_bytes"] == required - gpu["memory_bytes"] > 0
    assert gpu["out_of_memory"] is None  # a plan's sum of parts: no allocator run to fail
