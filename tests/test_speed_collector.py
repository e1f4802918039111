"""The cyclic garbage collector is held off during the bulk stages (graphmem/core/collector.py)
and left exactly as it was found afterwards."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from graphmem.core import collector
from graphmem.core.collector import collector_paused
from graphmem.frontends.onnx import importer
from graphmem.passes import costs
from graphmem.pipeline import run
from graphmem.pipeline.request import Request

RESNET50 = Path(__file__).resolve().parent.parent / "samples" / "resnet50.onnx"


def test_paused_inside_and_restored_after(collector_on: None) -> None:
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: the outer block restores
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restored_after_an_error(collector_on: None) -> None:
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("a failing stage")
    assert gc.isenabled()


def test_a_collector_the_caller_disabled_stays_disabled(collector_on: None) -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_import_and_passes_run_with_the_collector_paused(
        collector_on: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, bool] = {}
    build, compute = importer.build_graph, run.compute_costs

    def recording_build(*args: object) -> object:
        seen["import"] = gc.isenabled()
        return build(*args)  # type: ignore[arg-type]

    def recording_costs(*args: object, **kwargs: object) -> object:
        seen["passes"] = gc.isenabled()
        return compute(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(importer, "build_graph", recording_build)
    monkeypatch.setattr(run, "compute_costs", recording_costs)
    run.analyze(Request(RESNET50, batch=1))
    assert seen == {"import": False, "passes": False}
    assert gc.isenabled()
    assert costs.compute_costs is compute


def test_only_the_console_script_freezes_the_start_up_heap(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # gc.freeze moves every live object out of the collector's reach for good: right for the
    # one-command process the console script is, wrong for main() called in a caller's process
    from graphmem.cli import main as cli_main

    frozen: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    monkeypatch.setattr(collector, "_ONE_COMMAND", [])  # this test process: restored after
    assert cli_main.main(["gpus"]) == 0
    assert frozen == []
    monkeypatch.setattr("sys.argv", ["graphmem", "gpus"])
    assert cli_main.run_command() == 0
    assert frozen == [1, 1]  # the start-up heap, then the command's before the process ends
    assert "a100-80gb" in capsys.readouterr().out


def test_the_last_stage_freezes_only_in_a_one_command_process(
        collector_on: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # the writers' stage ends the console script's command: what it made is frozen before
    # the collector is back (no collection of it all at the next allocation); in a caller's
    # process (main() from a test, the API) the collector takes it back as after any stage
    frozen: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    monkeypatch.setattr(collector, "_ONE_COMMAND", [])
    with collector_paused(last=True):
        pass
    assert frozen == [] and gc.isenabled()
    collector.freeze_start_up_objects()  # the console script's start
    assert frozen == [1] and collector._ONE_COMMAND == [True]
    with collector_paused():  # an analysis stage: collected after, as before
        pass
    assert frozen == [1]
    with collector_paused(last=True):
        assert not gc.isenabled()
    assert frozen == [1, 1] and gc.isenabled()
