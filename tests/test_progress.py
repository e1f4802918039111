"""Progress on long work: the outermost stage is shown, a count inside it joins its line,
nested re-analyses stay quiet, and nothing is drawn without a reporter (pipes, CI, the API)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from graphmem.core.progress import reporting, stage, steps
from graphmem.report.terminal.progress import RichReporter, stderr_reporter
from tests.helpers.samples import SAMPLES_DIR

TINY_CNN = SAMPLES_DIR / "tiny_cnn.onnx"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def begin(self, label: str, total: int | None) -> None:
        self.events.append(("begin", label, total))

    def relabel(self, label: str, total: int | None) -> None:
        self.events.append(("relabel", label, total))

    def advance(self, done: int) -> None:
        self.events.append(("advance", done))

    def end(self) -> None:
        self.events.append(("end",))


def test_only_the_outermost_stage_and_one_count_are_shown() -> None:
    recorder = Recorder()
    with reporting(recorder), stage("suggestions"), steps("checkpoint plans", 2) as done:
        for index in range(2):
            with stage("reading the model"):  # a re-analysis: quiet
                pass
            done(index + 1)
    assert recorder.events == [
        ("begin", "suggestions", None),
        ("relabel", "suggestions: checkpoint plans", 2),
        ("advance", 1), ("advance", 2),
        ("relabel", "suggestions", None),
        ("end",),
    ]


def test_nothing_is_reported_without_a_reporter() -> None:
    with stage("x"), steps("y", 3) as done:
        done(1)  # no reporter: a no-op


def test_the_rich_reporter_draws_on_a_terminal_and_stderr_reporter_knows_pipes() -> None:
    buffer = io.StringIO()
    reporter = RichReporter(Console(file=buffer, force_terminal=True, width=80))
    with reporting(reporter), steps("tracing the model", 4) as done:
        done(2)
    assert "tracing the model" in buffer.getvalue()
    assert stderr_reporter() is None  # pytest captures stderr: not a terminal


def test_a_count_without_a_total_is_drawn_as_a_number() -> None:
    buffer = io.StringIO()
    reporter = RichReporter(Console(file=buffer, force_terminal=True, width=100))
    with reporting(reporter), stage("suggestions"), steps("re-analysed changes", None) as done:
        done(3)
        reporter.progress.refresh()
    text = buffer.getvalue()
    assert "suggestions: re-analysed changes" in text and " 3 " in text
    assert "None" not in text  # a stage or an open count never shows "0/None"


def counts(events: list[tuple], label: str) -> tuple[int | None, list[int]]:
    """The total announced for `label` (begun or joined to a stage) and the counts after it."""
    start = next(i for i, event in enumerate(events)
                 if event[0] in ("begin", "relabel") and event[1].endswith(label))
    done = []
    for event in events[start + 1:]:
        if event[0] != "advance":
            break
        done.append(event[1])
    return events[start][2], done


@pytest.mark.slow
@pytest.mark.torch
def test_suggestions_count_their_re_analyses() -> None:
    import graphmem

    recorder = Recorder()
    with reporting(recorder):
        result = graphmem.analyze_torch("tests/torch_models/small.py:build_convnet",
                                        ["16x3x32x32"], train=True, suggest=True,
                                        memory_budget_bytes=1 << 20)
    assert result.suggestions is not None
    total, done = counts(recorder.events, "suggestions: re-analysed changes")
    assert total is None and done == list(range(1, len(done) + 1)) and len(done) >= 2


@pytest.mark.slow
def test_a_sweep_counts_its_values() -> None:
    import graphmem

    recorder = Recorder()
    with reporting(recorder):
        graphmem.analyze_onnx(TINY_CNN, sweep="batch=1,2,4", gpu="t4")
    assert counts(recorder.events, "sweep of batch") == (3, [1, 2, 3])


@pytest.mark.slow
def test_gpus_fits_counts_the_gpus() -> None:
    from graphmem.devices.gpus import find_gpu
    from graphmem.pipeline.request import Request
    from graphmem.pipeline.run import fits_on_gpus

    gpus = [find_gpu(name) for name in ("t4", "l4", "a100-80gb")]
    recorder = Recorder()
    with reporting(recorder):
        _, rows = fits_on_gpus(Request(TINY_CNN, batch=8, plan=False), gpus, None)
    assert len(rows) == 3
    assert counts(recorder.events, "fitting each GPU") == (3, [1, 2, 3])


@pytest.mark.slow
@pytest.mark.ort
def test_verify_counts_its_runs() -> None:
    from graphmem.verify.onnx_run import verify_onnx

    recorder = Recorder()
    with reporting(recorder):
        verify_onnx(TINY_CNN, batch=2)
    assert counts(recorder.events, "onnxruntime runs") == (2, [1, 2])


@pytest.mark.slow
@pytest.mark.torch
def test_verify_torch_marks_its_real_step() -> None:
    from graphmem.verify.torch_run import verify_torch

    recorder = Recorder()
    with reporting(recorder):
        verify_torch("tests/torch_models/small.py:build_convnet", ["2x3x32x32"])
    assert counts(recorder.events, "one real step on cpu") == (1, [1])


@pytest.mark.slow
def test_the_cli_draws_nothing_when_stderr_is_not_a_terminal(
        capsys: pytest.CaptureFixture[str]) -> None:
    from graphmem.cli.main import main

    assert main(["gpus", "--fits", str(TINY_CNN), "--batch", "8"]) == 0
    assert "fitting each GPU" not in capsys.readouterr().err
