"""With the batch free, the verdict reads "fits up to batch=N (X of Y there)": X is the runtime
model's device total at N, and what the terminal, the JSON and the HTML show beside it is that
device total with its parts (not the live-tensor formula evaluated at N, which leaves out the
arena: ResNet-50 on a T4, 792.2 MiB + 9.8 MiB x 764 = 8.1 GiB against 13.2 GiB)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.cli.main import main
from graphmem.core.units import format_bytes
from graphmem.pipeline.device_total import runtime_parts
from tests.helpers.samples import SAMPLES_DIR

RESNET = SAMPLES_DIR / "resnet50.onnx"


@pytest.fixture(scope="module")
def free_batch():  # type: ignore[no-untyped-def]
    return analyze_onnx(RESNET, gpu="t4")


def test_the_estimate_at_the_largest_batch_is_the_verdicts_number(free_batch) -> None:  # type: ignore[no-untyped-def]
    batch, at_max = free_batch.max_batch, free_batch.runtime_at_max_batch
    assert batch is not None and at_max is not None
    assert batch.max_batch == 764
    # one number: the search's own probe at 764, the verdict's "13.2 GiB there"
    assert at_max.device_total_bytes == batch.peak_at_max_bytes <= batch.limit_bytes
    # its parts add up to it
    assert sum(int(part.size_bytes) for part in runtime_parts(at_max)) == \
        at_max.device_total_bytes
    # and `--batch 764` analysed on its own says the same
    bound = analyze_onnx(RESNET, gpu="t4", batch=764, plan=False)
    assert bound.device_total_bytes == at_max.device_total_bytes
    assert bound.runtime_at_max_batch is None  # every dim bound: `runtime` is at the dims


def test_terminal_json_and_html_show_the_same_total(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    assert main(["analyze", str(RESNET), "--gpu", "t4", "--json", str(out),
                 "--html", str(page)]) == 0
    terminal = capsys.readouterr().out
    detail = json.loads(out.read_text())["gpu"]["max_batch_detail"]
    runtime = detail["at_max_runtime"]
    total = runtime["device_total_bytes"]
    assert total == detail["at_max_bytes"]
    parts = {k: v for k, v in runtime.items() if k.endswith("_bytes") and k != "device_total_bytes"}
    assert sum(parts.values()) == total
    text = format_bytes(total)  # 13.2 GiB
    verdict, memory = terminal.splitlines()[1:3]
    assert f"up to batch=764 ({text} of" in verdict
    assert re.match(rf"on the GPU at batch=764 \(onnxruntime\)\s+{re.escape(text)}$", memory)
    html = page.read_text()
    assert "Fits up to batch=764." in html
    assert re.search(rf'data-n="gpu:at-max">.*?{re.escape(text)}', html, re.S)
