"""A precision the GPU does not accelerate is said (graphmem/report/precision.py): bf16 on a T4
(no bf16 tensor cores) passed every check without a word; the roofline times it at the FP32
rate, and the terminal, the HTML and the JSON now say how much of the work runs so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphmem.devices.gpus import find_gpu
from graphmem.passes.roofline import node_time, unaccelerated_flops
from tests.helpers.cli import Run

MODELS = Path(__file__).parent / "models.py"


def _times(gpu_name: str) -> list:
    gpu = find_gpu(gpu_name)
    return [node_time("mm_bf16", 6_000, 100, gpu.flops_per_s_for("bfloat16"), 1e12, "bfloat16"),
            node_time("mm_fp16", 3_000, 100, gpu.flops_per_s_for("float16"), 1e12, "float16"),
            node_time("add_fp32", 1_000, 100, gpu.fp32_flops_per_s, 1e12, "float32")]


@pytest.mark.parametrize(("gpu", "expected"), [
    ("t4", (("bfloat16", 6_000),)),  # 65 TFLOP/s fp16 tensor cores, bf16 at 8.1 (FP32)
    ("v100-16gb", (("bfloat16", 6_000),)),
    ("a100-40gb", ()),  # bf16 and fp16 tensor cores: 312 TFLOP/s each
])
def test_unaccelerated_flops_are_the_reduced_precision_run_at_fp32(gpu: str, expected: tuple
                                                                   ) -> None:
    assert unaccelerated_flops(find_gpu(gpu), _times(gpu)) == expected


@pytest.mark.slow
@pytest.mark.torch
def test_bf16_on_a_t4_is_said_in_every_output(tmp_path: Path, run: Run) -> None:
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    code, out, err = run("analyze", f"{MODELS}:tiny_gpt", "--input", "4x64:int64", "--train",
                         "--amp", "bf16", "--gpu", "t4", "--json", out_json, "--html", out_html)
    assert code == 0, err
    flops = json.loads(out_json.read_text())["gpu"]["roofline"]["unaccelerated_flops"]
    assert set(flops) == {"bfloat16"} and flops["bfloat16"] > 0
    said = "runs no faster than float32 (no bfloat16 tensor cores)"
    assert said in " ".join(out.split())
    assert said in out_html.read_text()
    code, out, err = run("analyze", f"{MODELS}:tiny_gpt", "--input", "4x64:int64", "--train",
                         "--amp", "fp16", "--gpu", "t4", "--no-html")
    assert code == 0 and "tensor cores" not in out, err  # fp16 is the T4's fast precision
