"""The JSON's numbers pinned to the typed results they render, field by field (a design review
swapped `flops.bytes_read` and `flops.bytes_written` in the writer and every quick test
passed). Each field is read two ways: from the typed result the writer renders, and, where the
JSON holds the same number twice (a total and its per-node rows, a device total and its
parts), from the JSON's own other copy. A swapped or misplaced field fails one or the other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import graphmem
from graphmem.pipeline.analysis import Analysis
from tests.helpers.samples import SAMPLES_DIR

# JSON path -> the typed result's number (every dim bound)
PINNED: dict[str, Callable[[Analysis], Any]] = {
    "params.count": lambda a: a.params.count,
    "params.bytes": lambda a: a.params.bytes,
    "flops.total": lambda a: int(a.costs.total_flops),
    "flops.macs": lambda a: int(a.costs.total_macs),
    "flops.bytes_read": lambda a: int(a.costs.total_bytes_read),
    "flops.bytes_written": lambda a: int(a.costs.total_bytes_written),
    "memory.peak_bytes": lambda a: int(a.liveness.peak_bytes),
    "gpu.required_bytes": lambda a: int(a.fit.required_bytes),
    "gpu.memory_bytes": lambda a: a.fit.capacity_bytes,
    "gpu.fits": lambda a: a.fit.fits,
}


def _at(data: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        data = data[key]
    return data


@pytest.fixture(scope="module", params=["tiny_gpt.onnx", "resnet50.onnx"])
def analysed(request: pytest.FixtureRequest) -> tuple[Analysis, dict[str, Any]]:
    dims = {"seq": 64} if "gpt" in request.param else {}
    result = graphmem.analyze_onnx(SAMPLES_DIR / request.param, batch=2, dims=dims, gpu="t4")
    return result, result.to_dict()


@pytest.mark.ort
@pytest.mark.parametrize("path", PINNED)
def test_each_field_is_its_typed_result(analysed: tuple[Analysis, dict[str, Any]],
                                        path: str) -> None:
    analysis, data = analysed
    assert _at(data, path) == PINNED[path](analysis), path


@pytest.mark.ort
def test_the_totals_are_the_sums_of_their_rows(analysed: tuple[Analysis, dict[str, Any]]
                                               ) -> None:
    _, data = analysed
    nodes, flops = data["nodes"], data["flops"]
    assert flops["bytes_read"] == sum(node["bytes_read"] for node in nodes)
    assert flops["bytes_written"] == sum(node["output_bytes"] for node in nodes)
    assert flops["bytes_read"] != flops["bytes_written"]  # else a swap could not show
    assert flops["total"] == sum(node["flops"] for node in nodes)
    gpu = data["gpu"]
    assert sum(gpu["parts"].values()) == gpu["required_bytes"]
