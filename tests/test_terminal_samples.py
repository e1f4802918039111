"""The terminal summary on the samples a newcomer tries first (issue 16): at most ~20 lines of
80 columns, the verdict on line 2, no word broken, no formula printed as a whole max(...)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.cli import Run

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 80
DEFAULT_MAX_LINES = 20
_BOX = re.compile(r"[\u2500-\u257f]")

pytestmark = pytest.mark.slow

CASES = {
    "resnet50 batch 32": ("samples/resnet50.onnx", "--gpu", "t4", "--batch", "32"),
    "resnet50 batch free": ("samples/resnet50.onnx", "--gpu", "t4"),
    "resnet50 batch 2000": ("samples/resnet50.onnx", "--gpu", "t4", "--batch", "2000"),
    "gpt2 free": ("samples/gpt2.onnx", "--gpu", "t4"),
    "gpt2 seq bound": ("samples/gpt2.onnx", "--gpu", "t4", "--dim", "seq=128"),
}
VERDICTS = {
    "resnet50 batch 32": "fits on NVIDIA Tesla T4: ",
    "resnet50 batch free": "fits on NVIDIA Tesla T4 up to batch=",
    "resnet50 batch 2000": "does NOT fit on NVIDIA Tesla T4: ",
    "gpt2 free": "fit on NVIDIA Tesla T4 (15.0 GiB) depends on batch, seq",
    "gpt2 seq bound": "fits on NVIDIA Tesla T4 up to batch=",
}


def _words(text: str) -> set[str]:
    return set(_BOX.sub(" ", text).split())


def _analyze(run: Run, monkeypatch: pytest.MonkeyPatch, width: int, *args: str) -> str:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, err = run("analyze", *args, "--no-html")
    assert code == 0, err
    return out


@pytest.mark.parametrize("case", CASES)
def test_sample_summary_reads_in_thirty_seconds(case: str, run: Run,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    args = CASES[case]
    out = _analyze(run, monkeypatch, WIDTH, *args, "--verbose")
    short = _analyze(run, monkeypatch, WIDTH, *args)
    lines = short.splitlines()
    assert len(lines) <= DEFAULT_MAX_LINES, short
    assert lines[0].startswith(Path(args[0]).name + " · ONNX · inference")
    assert lines[1].startswith(VERDICTS[case]), lines[1]
    wide = _words(_analyze(run, monkeypatch, 400, *args, "--verbose")) | _words(
        _analyze(run, monkeypatch, 400, *args))
    for text in (short, out):
        assert max(map(len, text.splitlines())) <= WIDTH
        assert "max(" not in text
        broken = [w for w in _words(text) if w not in wide and "\u2026" not in w]
        assert not broken, broken


@pytest.mark.torch
def test_training_step_header_shows_the_input_shapes(run: Run,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    out = _analyze(run, monkeypatch, WIDTH, "tests/torch_models/hf.py:gpt2", "--input",
                   "2x64:int64", "--train", "--gpu", "t4")
    lines = out.splitlines()
    assert lines[0].startswith("hf.py:gpt2 (GPT2LMHeadModel) · PyTorch · training, adam · ")
    assert lines[0].endswith(" 2x64:int64") and "dims: none bound" not in out
    assert lines[1].startswith("fits on NVIDIA Tesla T4: ")
    assert len(lines) <= DEFAULT_MAX_LINES and max(map(len, lines)) <= WIDTH
    for role in ("saved activations", "optimizer state", "parameters"):
        assert f"  {role} " in out
