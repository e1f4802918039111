"""The runtime models' dim-independent work is done once per graph (graphmem/runtime_models/
graph_cache.py): onnxruntime's order and allocation plan are made once for a max-batch search's
probes, and every probe's estimate is what a fresh plan gives; the output writers run with
the cyclic collector paused."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from graphmem import analyze_onnx
from graphmem.cli.common import Output, emit
from graphmem.cli.inputs import OutputFile
from graphmem.core.ir import Graph
from graphmem.devices.gpus import find_gpu
from graphmem.passes.dims import DimBinding
from graphmem.pipeline.device_total import runtime_estimate
from graphmem.runtime_models import graph_cache, ort_cpu

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture
def counted_plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the plans made (cache hits make none)."""
    made: list[int] = []
    make = ort_cpu._make_layout

    def counting(*args: object) -> object:
        made.append(1)
        return make(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(ort_cpu, "_make_layout", counting)
    return made


def _at(batch: int, seq: int) -> DimBinding:
    return DimBinding(bound={"batch": batch, "seq": seq}, free=(), batch_dim="batch")


@pytest.mark.ort
@pytest.mark.parametrize(("runtime", "level"), [("ort-cuda", None), ("ort-cpu", "disabled"),
                                                ("ort-cpu", "all")])
def test_probes_share_one_plan_and_match_fresh_plans(runtime: str, level: str | None,
                                                     counted_plans: list[int]) -> None:
    analysis = analyze_onnx(SAMPLES / "tiny_gpt.onnx", plan=False)
    gpu = find_gpu("a100-80gb") if runtime == "ort-cuda" else None
    capacity = gpu.capacity_bytes if gpu else None

    def estimate(dims: DimBinding) -> object:
        return runtime_estimate(analysis, runtime, gpu, ort_optimization=level, dims=dims,
                                capacity_bytes=capacity)

    probes = [_at(batch, 64) for batch in (1, 7, 4096)] + [_at(2, 128)]
    cached = [estimate(dims) for dims in probes]
    # onnxruntime's optimized graph is made at each probe's dims: a new graph, a new plan
    plans = len(probes) if level == "all" else 1
    assert len(counted_plans) == plans
    for dims, answer in zip(probes, cached, strict=True):
        graph_cache._CACHE.clear()
        assert estimate(dims) == answer
    assert len(counted_plans) == plans + len(probes)
    totals = {e.device_total_bytes for e in cached}  # type: ignore[attr-defined]
    assert len(totals) == len(probes)  # the sizes did change


def _graph() -> Graph:
    return Graph(name="g", nodes=[], values={}, inputs=[], outputs=[])


def _counter() -> Callable[[], int]:
    """Each call's result is its own count: which call made a cached answer."""
    made: list[int] = []

    def make() -> int:
        made.append(1)
        return len(made)

    return make


def test_one_result_per_graph_and_inputs() -> None:
    graph, shapes, other = _graph(), {"x": (1,)}, {"x": (1,)}
    make = _counter()
    assert graph_cache.cached_per_graph(graph, (shapes, None), make) == 1
    assert graph_cache.cached_per_graph(graph, (shapes, None), make) == 1
    # equal but not the same object: compared by identity, so made again
    assert graph_cache.cached_per_graph(graph, (other, None), make) == 2
    assert graph_cache.cached_per_graph(_graph(), (shapes, None), make) == 3


def test_a_graph_changed_since_is_planned_again() -> None:
    graph = _graph()
    make = _counter()
    graph_cache.cached_per_graph(graph, (None,), make)
    graph.values["x"] = None  # type: ignore[assignment]  # only its size is read
    assert graph_cache.cached_per_graph(graph, (None,), make) == 2


@pytest.mark.ort
def test_entries_go_with_their_graph() -> None:
    # a plan holds the graph's nodes and values: none of them may keep the graph alive
    gc.collect()
    before = len(graph_cache._CACHE)
    analysis = analyze_onnx(SAMPLES / "tiny_gpt.onnx", plan=False)
    runtime_estimate(analysis, "ort-cpu", None, ort_optimization="disabled", dims=_at(1, 8))
    assert len(graph_cache._CACHE) == before + 1
    del analysis
    gc.collect()
    assert len(graph_cache._CACHE) <= before


def test_a_caller_copying_its_inputs_keeps_only_the_newest_few() -> None:
    graph = _graph()
    for _ in range(3 * graph_cache._KEPT_PER_GRAPH):
        graph_cache.cached_per_graph(graph, ({},), lambda: 0)
    assert len(graph_cache._CACHE[graph]) <= graph_cache._KEPT_PER_GRAPH


def test_the_writers_run_with_the_collector_paused(collector_on: None, tmp_path: Path) -> None:
    seen: list[bool] = []
    target = OutputFile("--json", tmp_path / "out.json")
    output = Output(target, "JSON", lambda path: seen.append(gc.isenabled()))
    emit(Console(file=open(tmp_path / "console.txt", "w")),  # noqa: SIM115 - closed by gc
         lambda console: seen.append(gc.isenabled()), [output])
    assert seen == [False, False]
    assert gc.isenabled()
