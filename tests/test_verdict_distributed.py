"""One verdict for a distributed job (issue 14): with --gpus/--strategy every verdict reads
the distributed plan's per-GPU device total (the rank's sharded tensors and buckets, the
allocator overhead, the CUDA context), not the single-GPU step's.

For DDP, ZeRO-1/2/3 and FSDP on a small model: terminal line 2, JSON gpu.fits /
utilization / required_bytes, the distributed section's per-GPU device total and the gate's
`--max-memory 100%` agree; at exactly the GPU's memory (--cuda-reserve pushes the total
there) it fits, one byte more does not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from graphmem.cli.analyze import request_from_args
from graphmem.cli.main import build_parser, main
from graphmem.core.units import format_bytes
from graphmem.gate.budgets import Budgets, evaluate, numbers_of, parse_memory_limit
from graphmem.pipeline.run import analyze
from graphmem.report.html.page import render_html

STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp")
MODEL = ["tests/models.py:tiny_gpt", "--input", "2x16:int64", "--train", "--gpus", "4",
         "--gpu", "t4", "--no-html"]


def _argv(strategy: str, *extra: str) -> list[str]:
    return ["analyze", *MODEL, "--strategy", strategy, *extra]


def _run(strategy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
         *extra: str) -> tuple[list[str], dict[str, Any]]:
    out = tmp_path / f"{strategy}.json"
    assert main(_argv(strategy, *extra, "--json", str(out))) == 0
    lines = capsys.readouterr().out.splitlines()
    return lines, json.loads(out.read_text())


def _budget_passes(strategy: str, *extra: str) -> tuple[bool, int | None]:
    """The gate's `--max-memory 100%` on the same request (`graphmem check` takes ONNX
    inference models only: the gate's budget is evaluated on the analysis directly), and the
    HTML badge: it agrees with the budget."""
    args = build_parser().parse_args(_argv(strategy, *extra))
    analysis = analyze(request_from_args(args))
    numbers = numbers_of(analysis)
    (result,) = evaluate(numbers, Budgets(max_memory=parse_memory_limit("100%")))
    page = render_html(analysis)
    chip = re.search(r'class="chip-verdict ([\w-]+)"', page)
    assert chip is not None and chip.group(1) == ("fits" if result.passed else "no-fit")
    fit = analysis.fit
    assert fit is not None and f"{fit.utilization:.1%} of the GPU" in page
    assert "device total per GPU" in page
    return result.passed, numbers.device_total_bytes


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_verdict_reads_the_per_gpu_total(strategy: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    lines, result = _run(strategy, tmp_path, capsys)
    gpu, rank = result["gpu"], result["memory"]["per_rank"]
    total = rank["device_total_bytes"]
    assert gpu["required_bytes"] == total
    assert total == (rank["total_bytes"] + rank["allocator_bytes"] + rank["context_bytes"]
                     + rank["nccl_bytes"])
    assert gpu["basis"] == f"{strategy} per-GPU device total"
    assert gpu["fits"] is True
    assert gpu["utilization"] == pytest.approx(total / gpu["memory_bytes"])
    # the parts are labelled and add up to the verdict's number
    assert sum(gpu["parts"].values()) == total
    assert {"parameters", "gradients", "optimizer_state", "buckets", "activations",
            "allocator", "context", "nccl"} <= set(gpu["parts"])
    # NCCL's data-parallel ring over the N ranks: 4 MiB x 2 channels x 2 peers = 16 MiB
    # (tests/test_comm_buffers.py works the estimate out)
    assert gpu["parts"]["nccl"] == rank["nccl_bytes"] == 16 << 20
    assert gpu["parts"]["buckets"] == rank["buckets_bytes"]
    # terminal line 2: the same number
    assert lines[1].startswith("fits on NVIDIA Tesla T4: ")
    assert f"{format_bytes(total)} of" in lines[1]
    assert "device total per GPU" in "\n".join(lines)
    passed, budget_value = _budget_passes(strategy)
    assert passed and budget_value == total


@pytest.mark.slow
def test_zero2_reads_the_buckets_not_the_single_gpu_step(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's case: DeepSpeed's 2 GB of reduce buckets are in the verdict."""
    _, result = _run("zero2", tmp_path, capsys)
    gpu = result["gpu"]
    # reduce_bucket_size elements of fp32 gradients, one copy (overlap_comm off in stage 2)
    assert gpu["parts"]["buckets"] == 500_000_000 * 4
    assert gpu["required_bytes"] > 2 * 10**9


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_exactly_at_capacity_fits_one_byte_more_does_not(
        strategy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reserve = 700 * 2**20
    _, first = _run(strategy, tmp_path, capsys, "--cuda-reserve", f"{reserve}B")
    gap = first["gpu"]["memory_bytes"] - first["gpu"]["required_bytes"]
    exact = reserve + gap
    lines, at = _run(strategy, tmp_path, capsys, "--cuda-reserve", f"{exact}B")
    gpu = at["gpu"]
    assert gpu["required_bytes"] == gpu["memory_bytes"] == at["memory"]["per_rank"][
        "device_total_bytes"]
    assert gpu["fits"] is True and gpu["utilization"] == 1.0
    assert lines[1].startswith("fits on")
    assert _budget_passes(strategy, "--cuda-reserve", f"{exact}B")[0]
    lines, over = _run(strategy, tmp_path, capsys, "--cuda-reserve", f"{exact + 1}B")
    gpu = over["gpu"]
    assert gpu["required_bytes"] == gpu["memory_bytes"] + 1
    assert gpu["fits"] is False
    assert not lines[1].startswith("fits on")
    assert not _budget_passes(strategy, "--cuda-reserve", f"{exact + 1}B")[0]


CNN = "samples/tiny_cnn.nofold.onnx"


def _cnn(strategy: str, batch: int, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / f"cnn_{strategy}_{batch}.json"
    assert main(["analyze", CNN, "--batch", str(batch), "--train", "--gpus", "4", "--strategy",
                 strategy, "--gpu", "t4", "--no-html", "--json", str(out)]) == 0
    return json.loads(out.read_text())["gpu"]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["zero2", "fsdp"])
def test_max_batch_is_solved_on_the_per_gpu_total(strategy: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The largest per-GPU micro-batch: its per-GPU device total fits, one more does not,
    as the verdict at --batch N reads them."""
    gpu = _cnn(strategy, 8, tmp_path)
    best, detail = gpu["max_batch"], gpu["max_batch_detail"]
    assert detail["basis"] == f"{strategy} per-GPU device total"
    assert best and best > 8
    at, after = _cnn(strategy, best, tmp_path), _cnn(strategy, best + 1, tmp_path)
    capsys.readouterr()
    assert at["fits"] is True and at["required_bytes"] == detail["at_max_bytes"]
    assert after["fits"] is False and after["required_bytes"] == detail["at_next_bytes"]


@pytest.mark.slow
def test_a_traced_model_says_why_max_batch_is_not_solved(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, result = _run("zero3", tmp_path, capsys)
    gpu = result["gpu"]
    assert gpu["max_batch"] is None and "traced at its --input shapes" in gpu["max_batch_reason"]
    assert gpu["max_batch_detail"]["basis"] == "zero3 per-GPU device total"
