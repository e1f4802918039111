"""Runtime options under --suggest (graphmem/pipeline/runtime_levers.py): onnxruntime's arena
extended by request, re-analysed on the device total; the same numbers as an analysis run with
the option, in the terminal, the JSON and the HTML."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.cli.main import main
from graphmem.pipeline.request import Request
from graphmem.pipeline.runtime_levers import ARENA_BY_REQUEST, runtime_levers
from graphmem.suggest.cards import RuntimeLever
from tests.helpers.samples import SAMPLES_DIR

RESNET = SAMPLES_DIR / "resnet50.onnx"


def test_the_lever_is_the_analysis_with_the_option() -> None:
    # ResNet-50 at batch 3000 on a T4 does not fit; by request the arena holds less and the
    # largest batch grows. The lever's numbers are those of `--ort-arena-extend
    # same-as-requested` analysed on its own: one answer, two ways of asking.
    suggested = analyze_onnx(RESNET, gpu="t4", batch=3000, suggest=True)
    direct = analyze_onnx(RESNET, gpu="t4", batch=3000, ort_arena_extend="same-as-requested")
    assert suggested.suggestions is not None and direct.fit is not None
    assert direct.max_batch is not None and suggested.max_batch is not None
    (lever,) = suggested.suggestions.runtime_levers
    assert lever.option == ARENA_BY_REQUEST
    assert lever.device_total_bytes == direct.device_total_bytes
    assert lever.base_device_total_bytes == suggested.device_total_bytes
    assert lever.max_batch == direct.max_batch.max_batch
    assert lever.base_max_batch == suggested.max_batch.max_batch == 764
    assert lever.max_batch > lever.base_max_batch
    assert lever.saves_bytes is not None and lever.saves_bytes > 0
    assert lever.fits is False  # 3000 is still far above either largest batch


def test_terminal_json_and_html_show_the_same_lever(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    code = main(["analyze", str(RESNET), "--gpu", "t4", "--batch", "3000", "--suggest",
                 "--verbose", "--json", str(out), "--html", str(page)])
    assert code == 0
    terminal = " ".join(capsys.readouterr().out.split())
    (lever,) = json.loads(out.read_text())["runtime_options"]
    html = page.read_text()
    largest = f"{lever['max_batch']:,}"
    assert f"or {largest} with --ort-arena-extend same-as-requested" in terminal
    assert f"largest batch {largest} (now {lever['base_max_batch']:,})" in terminal
    assert re.search(rf"largest batch</dt><dd>{largest} \(now {lever['base_max_batch']:,}\)",
                     html)
    assert "kSameAsRequested" in html and "kSameAsRequested" in terminal


def test_no_lever_where_the_option_is_given_or_the_runtime_has_none() -> None:
    given = analyze_onnx(RESNET, gpu="t4", batch=8, suggest=True,
                         ort_arena_extend="same-as-requested")
    assert given.suggestions is not None and given.suggestions.runtime_levers == ()
    no_gpu = analyze_onnx(RESNET, batch=8, suggest=True)
    assert no_gpu.suggestions is not None and no_gpu.suggestions.runtime_levers == ()


def test_a_lever_that_does_not_help_is_a_note() -> None:
    # The option re-analysed to the same numbers (a stand-in pipeline that answers with the
    # analysis itself): it saves nothing and raises no batch, so it is not listed, and the
    # note says what it would hold.
    base = analyze_onnx(SAMPLES_DIR / "tiny_cnn.onnx", gpu="t4", batch=8, suggest=True)
    levers, notes = runtime_levers(base, Request(model=str(SAMPLES_DIR / "tiny_cnn.onnx"),
                                                 gpu="t4", batch=8), lambda request: base)
    assert levers == ()
    (note,) = notes
    assert "would not hold less here" in note and ARENA_BY_REQUEST in note


@pytest.mark.parametrize(("total", "base", "batch", "base_batch", "helps"), [
    (90, 100, None, None, True),     # lower device total
    (110, 100, 12, 10, True),       # higher at these dims, but a larger batch fits
    (110, 100, 10, 10, False),
    (None, None, 10, 10, False),    # free dims, same largest batch
])
def test_helps(total: int | None, base: int | None, batch: int | None,
               base_batch: int | None, helps: bool) -> None:
    lever = RuntimeLever("--x", "", total, base, batch, base_batch, None)
    assert lever.helps is helps
