"""One verdict per GPU from one device total (graphmem/pipeline/verdict.py): fits, utilization,
max batch, `check --max-memory`, the sweep and every report read the runtime model's device
total, bounded by the GPU as onnxruntime's arena and PyTorch's caching allocator are."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.core.units import format_bytes
from graphmem.pipeline.analysis import Analysis
from graphmem.report.html.page import render_html
from graphmem.report.json.report import to_dict
from graphmem.runtime_models.bfc_arena import (
    BACKPEDAL_FACTOR,
    ArenaEvent,
    BfcArena,
    rounded_bytes,
)
from graphmem.runtime_models.bfc_replay import replay
from graphmem.runtime_models.cuda_allocator import simulate_caching_allocator
from tests.helpers.cli import assert_one_error_line, run_cli
from tests.helpers.samples import SAMPLES_DIR

MIB, GIB = 1 << 20, 1 << 30
T4_BYTES = 15_360 * MIB  # the total a T4's driver reports (cudaMemGetInfo)


# ----- onnxruntime's BFC arena bounded by the device ------------------------------------------


def test_arena_backs_off_by_90_percent_near_the_limit() -> None:
    # 10 MiB for regions. 3 MiB: the 1 MiB region doubles to 4 MiB (fits). 5 MiB: the 4 MiB
    # region's free 1 MiB is too small; 4 MiB doubles to 8 MiB > the 6 MiB left, so Extend
    # retries at 0.9f steps, each rounded up to 256 B: 7,549,747.x -> 7,549,952;
    # 6,794,957 -> 6,795,008; 6,115,507 -> 6,115,584 <= 6 MiB = 6,291,456: taken.
    assert pytest.approx(0.9, abs=1e-7) == BACKPEDAL_FACTOR and BACKPEDAL_FACTOR != 0.9
    result = replay([[ArenaEvent("a", 3 * MIB)], [ArenaEvent("b", 5 * MIB)]],
                    device_free_bytes=10 * MIB)
    assert result.satisfied and result.held_bytes == 4 * MIB + 6_115_584
    assert rounded_bytes(int(8 * MIB * BACKPEDAL_FACTOR)) == 7_549_952


def test_arena_fails_when_no_backed_off_region_fits() -> None:
    # 2 MiB left after the first 4 MiB region; 3 MiB more cannot be had: 90% steps of the
    # 8 MiB region stop below the 3 MiB request before reaching 2 MiB
    result = replay([[ArenaEvent("a", 3 * MIB)], [ArenaEvent("b", 3 * MIB)]],
                    device_free_bytes=6 * MIB)
    failure = result.failure
    assert failure is not None and failure.key == "b" and failure.step == 1
    assert failure.request_bytes == 3 * MIB and failure.device_free_bytes == 2 * MIB
    assert 3 * MIB <= failure.region_bytes < 3 * MIB / 0.9 + 256  # the last size tried
    assert failure.held_bytes + failure.region_bytes > 6 * MIB  # more than the device had


def test_arena_growth_falls_back_to_1_gib_after_a_doubled_region() -> None:
    # Unbounded: 3.5 GiB doubles the region to 4 GiB; the next 3.5 GiB takes another 4 GiB
    # region without doubling, after which the next size is 2 * 4 GiB capped at
    # max_power_of_two_extend_bytes: 1 GiB. A 900 MiB request then gets a 1 GiB region
    # (onnxruntime), not a third 4 GiB one.
    arena = BfcArena()
    for key, size in (("a", 3584 * MIB), ("b", 3584 * MIB), ("c", 900 * MIB)):
        arena.allocate(key, size)
    assert arena.held_bytes == (4 + 4 + 1) * GIB


# ----- PyTorch's caching allocator bounded by the device ---------------------------------------


def test_caching_allocator_frees_cached_segments_before_an_oom() -> None:
    # 30 MiB for segments: a 12 MiB request gets its own 12 MiB segment, freed to the cache;
    # 20 MiB then needs a new 20 MiB segment: 12 + 20 > 30, so release_cached_blocks frees
    # the whole free 12 MiB segment and cudaMalloc is tried again: it succeeds
    events = [("alloc", "a", 12 * MIB), ("free", "a", 12 * MIB), ("alloc", "b", 20 * MIB)]
    result = simulate_caching_allocator(events, capacity_bytes=30 * MIB)
    assert result.satisfied and result.released_segment_count == 1
    assert result.reserved_peak_bytes == 20 * MIB
    # with b live another 20 MiB cannot be had: nothing cached to free, out of memory
    result = simulate_caching_allocator([*events, ("alloc", "c", 20 * MIB)], 30 * MIB)
    failure = result.failure
    assert failure is not None and failure.buffer_id == "c"
    assert failure.reserved_bytes == 20 * MIB and failure.segment_bytes == 20 * MIB
    # unbounded, the cached 12 MiB segment is kept: 12 + 20 + 20 reserved
    assert simulate_caching_allocator([*events, ("alloc", "c", 20 * MIB)]).satisfied


# ----- one number: fits, max batch, check, every report ----------------------------------------


def at_batch(path: Path, batch: int, **options: object) -> Analysis:
    """What `--batch N --gpu t4` says (unplanned: no max batch search)."""
    return analyze_onnx(path, batch=batch, gpu="t4", plan=False, runtime="auto", **options)  # type: ignore[arg-type]


def assert_one_verdict(analysis: Analysis) -> None:
    """fits <=> the reported device total is within the GPU; the parts add up to it."""
    fit, runtime = analysis.fit, analysis.runtime
    assert fit is not None and runtime is not None
    assert fit.basis == f"{runtime.runtime} device total"
    assert int(fit.required_bytes) == runtime.device_total_bytes
    assert fit.fits == (runtime.device_total_bytes <= fit.capacity_bytes) == runtime.satisfied
    assert fit.utilization == runtime.device_total_bytes / fit.capacity_bytes
    assert sum(int(part.size_bytes) for part in fit.parts) == runtime.device_total_bytes


@pytest.fixture(scope="module", params=["resnet50.onnx", "gpt2.onnx"])
def near_capacity(request: pytest.FixtureRequest) -> tuple[Path, dict[str, int], Analysis]:
    """A CNN and a transformer with the batch free on a T4: the max batch on the device
    total (gpt2 at seq 256)."""
    path = SAMPLES_DIR / request.param
    dims = {"seq": 256} if "gpt2" in request.param else {}
    return path, dims, analyze_onnx(path, gpu="t4", dims=dims)


@pytest.mark.slow
def test_max_batch_fits_and_one_more_does_not_by_the_same_number(
        near_capacity: tuple[Path, dict[str, int], Analysis]) -> None:
    path, dims, analysis = near_capacity
    result = analysis.max_batch
    assert result is not None and result.max_batch is not None and result.max_batch > 1
    assert result.basis == "ort-cuda device total" and result.limit_bytes == T4_BYTES
    fits, over = (at_batch(path, n, dims=dims) for n in (result.max_batch, result.max_batch + 1))
    for one in (fits, over):
        assert_one_verdict(one)
    assert fits.fit is not None and over.fit is not None
    assert fits.fit.fits is True and over.fit.fits is False
    assert result.peak_at_max_bytes == int(fits.fit.required_bytes) <= T4_BYTES
    assert result.peak_at_next_bytes == int(over.fit.required_bytes) > T4_BYTES
    assert over.fit.failure and over.runtime is not None and over.runtime.failure
    # the live-tensor peak is only the search's starting guess: on it the answer differs
    assert int(fits.liveness.peak_bytes) != int(fits.fit.required_bytes)


@pytest.mark.slow
def test_check_max_memory_100_percent_agrees_with_fits(
        near_capacity: tuple[Path, dict[str, int], Analysis],
        capsys: pytest.CaptureFixture[str]) -> None:
    path, dims, analysis = near_capacity
    assert analysis.max_batch is not None and analysis.max_batch.max_batch is not None
    binds = [arg for name, value in dims.items() for arg in ("--dim", f"{name}={value}")]
    for batch, code in ((analysis.max_batch.max_batch, 0), (analysis.max_batch.max_batch + 1, 1)):
        result = run_cli(["check", str(path), "--gpu", "t4", "--batch", str(batch), *binds,
                          "--max-memory", "100%"], capsys)
        assert result[0] == code, (batch, result[1])
        assert "ort-cuda device total" in result[1]


def test_the_issue_cases_now_say_one_thing(capsys: pytest.CaptureFixture[str]) -> None:
    # issue 14: resnet50 at batch 1492 on a T4 said "peak uses 100.0%: fits" next to a
    # device total of 25.6 GiB (170.7%) that does NOT fit
    analysis = at_batch(SAMPLES_DIR / "resnet50.onnx", 1492)
    assert_one_verdict(analysis)
    assert analysis.fit is not None and analysis.fit.fits is False
    code, out, _ = run_cli(["check", str(SAMPLES_DIR / "resnet50.onnx"), "--gpu", "t4",
                            "--batch", "1492"], capsys)
    assert code == 1 and "FAIL" in out


def _texts(analysis: Analysis, capsys: pytest.CaptureFixture[str], path: Path, batch: int,
           dims: dict[str, int]) -> tuple[str, dict, str]:
    binds = [arg for name, value in dims.items() for arg in ("--dim", f"{name}={value}")]
    code, out, _ = run_cli(["analyze", str(path), "--gpu", "t4", "--batch", str(batch), *binds,
                            "--no-html"], capsys)
    assert code == 0
    return " ".join(out.split()), json.loads(json.dumps(to_dict(analysis))), render_html(analysis)


@pytest.mark.slow
def test_terminal_json_and_html_say_the_same(
        near_capacity: tuple[Path, dict[str, int], Analysis],
        capsys: pytest.CaptureFixture[str]) -> None:
    path, dims, analysis = near_capacity
    assert analysis.max_batch is not None and analysis.max_batch.max_batch is not None
    for batch in (analysis.max_batch.max_batch, analysis.max_batch.max_batch + 1):
        bound = analyze_onnx(path, gpu="t4", batch=batch, dims=dims, plan=False, runtime="auto")
        fit = bound.fit
        assert fit is not None and fit.utilization is not None
        terminal, report, page = _texts(bound, capsys, path, batch, dims)
        gpu = report["gpu"]
        assert gpu["fits"] is fit.fits and gpu["required_bytes"] == int(fit.required_bytes)
        assert gpu["required_bytes"] == report["memory"]["device_total_bytes"]
        assert gpu["basis"] == "ort-cuda device total"
        # the first screen's verdict line (report/terminal/answer.py), from the same total
        verdict = "fits" if fit.fits else "does NOT fit"
        needs = f"{format_bytes(int(fit.required_bytes))} of {format_bytes(fit.capacity_bytes)}"
        assert f"{verdict} on {fit.gpu.full_name}: {needs} ({fit.utilization:.1%}" in terminal
        chip = re.search(r'class="chip-verdict ([\w-]+)"', page)
        assert chip is not None and chip.group(1) == ("fits" if fit.fits else "no-fit")
        assert f"{fit.utilization:.1%} of the GPU" in page


# ----- training steps: PyTorch's caching allocator ---------------------------------------------


@pytest.mark.slow
def test_training_max_batch_on_the_caching_allocator() -> None:
    path = SAMPLES_DIR / "tiny_gpt.onnx"
    analysis = analyze_onnx(path, train=True, dims={"seq": 64}, gpu="t4")
    result = analysis.max_batch
    assert result is not None and result.max_batch is not None
    assert result.basis == "torch-cuda device total"
    fits, over = (analyze_onnx(path, train=True, dims={"seq": 64, "batch": n}, gpu="t4",
                               plan=False, runtime="auto")
                  for n in (result.max_batch, result.max_batch + 1))
    for one in (fits, over):
        assert_one_verdict(one)
    assert fits.fit is not None and fits.fit.fits is True
    assert over.fit is not None and over.fit.fits is False
    assert over.runtime is not None and "out of memory" in over.runtime.failure


# ----- the runtime the verdict uses ------------------------------------------------------------


def test_a_cpu_runtime_with_a_gpu_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["analyze", str(SAMPLES_DIR / "tiny_cnn.onnx"), "--gpu", "t4",
                            "--batch", "8", "--runtime", "ort-cpu", "--no-html"], capsys)
    assert_one_error_line(code, err, "--runtime ort-cpu", "onnxruntime's CUDA model")


def test_free_dims_give_a_live_peak_verdict_that_says_so() -> None:
    analysis = analyze_onnx(SAMPLES_DIR / "tiny_cnn.onnx", gpu="t4")
    fit = analysis.fit
    assert fit is not None and fit.fits is None and fit.basis == "live-tensor peak + CUDA context"
    assert "not the device total" in analysis.runtime_note
    # the max batch is solved on the device total all the same, and its estimate there kept
    batch, at_max = analysis.max_batch, analysis.runtime_at_max_batch
    assert batch is not None and batch.basis == "ort-cuda device total"
    assert at_max is not None and at_max.device_total_bytes == batch.peak_at_max_bytes


def test_sweep_points_carry_the_gpus_verdict() -> None:
    path = SAMPLES_DIR / "tiny_cnn.onnx"
    analysis = analyze_onnx(path, gpu="t4", sweep="batch=1,2,4,...,64")
    assert analysis.sweep is not None
    for point in analysis.sweep.points[::3]:
        bound = at_batch(path, point.value)
        assert bound.fit is not None
        assert point.device_total_bytes == int(bound.fit.required_bytes)
        assert point.fits is bound.fit.fits


def test_gpus_fits_rows_are_each_gpus_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    from graphmem.devices.gpus import load_gpu_table
    from graphmem.pipeline.request import Request, SuggestOptions
    from graphmem.pipeline.run import fits_on_gpus

    path = SAMPLES_DIR / "resnet50.onnx"
    gpus = [gpu for gpu in load_gpu_table() if gpu.name in ("t4", "a100-40gb")]
    _, rows = fits_on_gpus(Request(path, batch=600, plan=False,
                                   suggest=SuggestOptions(enabled=False)), gpus, None)
    for row in rows:
        alone = analyze_onnx(path, batch=600, gpu=row.fit.gpu.name, plan=False, runtime="auto")
        assert alone.fit is not None
        assert (row.fit.fits, row.fit.required_bytes) == (alone.fit.fits,
                                                          alone.fit.required_bytes)
        assert row.fit.basis == "ort-cuda device total"
    code, out, _ = run_cli(["gpus", "--fits", str(path), "--batch", "600"], capsys)
    assert code == 0 and "device total" in out


@pytest.mark.torch
@pytest.mark.slow
def test_pytorch_training_step_fits_exactly_up_to_the_gpus_memory() -> None:
    import torch

    from graphmem import analyze_torch
    from tests.models import tiny_gpt

    model, ids = tiny_gpt(), torch.randint(0, 100, (2, 64))
    first = analyze_torch(model, [ids], train=True, gpu="t4")
    assert first.fit is not None and first.runtime is not None
    assert_one_verdict(first)
    # a PyTorch model is traced at its input's shapes (no max batch): bring it to the GPU's
    # edge through the assumed non-tensor memory instead: with the reserve making the device
    # total exactly the capacity it fits; one byte more and the caching allocator's OOM says no
    other = first.runtime.device_total_bytes - first.fit.reserve.bytes
    edge = first.fit.capacity_bytes - other
    for extra, fits in ((0, True), (1, False)):
        step = analyze_torch(model, [ids], train=True, gpu="t4", cuda_reserve_bytes=edge + extra)
        assert step.fit is not None and step.runtime is not None
        assert_one_verdict(step)
        assert step.fit.basis == "torch-cuda device total"
        assert step.runtime.device_total_bytes == first.fit.capacity_bytes + extra
        assert step.fit.fits is fits and (step.fit.failure == "") is fits
