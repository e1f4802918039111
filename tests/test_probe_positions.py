"""A probe's sizes by position (graphmem/runtime_models/value_sizes.py) against the same sizes
by name: `ProbeSizes.at(dims)` is the mapping `value_bytes` gives, the plan's buffers sized
from the distinct sizes by their owners' places are the buffers sized by name, the fill finds
nothing to fill exactly where the by-name fill does, and onnxruntime's CUDA and CPU models
give the same estimate from either. On random graphs (tests/helpers/random_plans.py, their values
given random sizes in two dims, some unknown, some free at the probe) and on the samples at
several batches."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.core.ir import Graph
from graphmem.core.symbolic import SymInt
from graphmem.devices.gpus import find_gpu
from graphmem.errors import GraphmemError
from graphmem.passes.dims import DimBinding, SizeTable, value_bytes
from graphmem.pipeline.device_total import runtime_estimate
from graphmem.runtime_models.ort_cpu import ort_cpu_estimate, plan_events, plan_ort_buffers
from graphmem.runtime_models.ort_cuda import ort_cuda_estimate
from graphmem.runtime_models.ort_sizes import fill_unknown_sizes
from graphmem.runtime_models.value_sizes import ProbeSizes, ValueSizes
from tests.helpers.random_plans import random_graph

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
_DIMS = ("b", "s")


def _random_sizes(rng: random.Random, graph: Graph) -> None:
    """Each value a random shape over b, s and numbers, a few unknown (their sizes None)."""
    for value in graph.values.values():
        if rng.random() < 0.1:
            value.shape = None
            continue
        value.shape = tuple(
            SymInt.symbol(rng.choice(_DIMS)) if rng.random() < 0.4
            else SymInt.const(rng.choice((1, 3, 64, 1000))) for _ in range(rng.randint(0, 3)))


def _binding(dims: dict[str, int]) -> DimBinding:
    return DimBinding(bound=dims, free=tuple(d for d in _DIMS if d not in dims), batch_dim=None)


@pytest.mark.parametrize("seed", range(60))
def test_positions_equal_names_on_random_plans(seed: int) -> None:
    rng = random.Random(seed)
    graph, shapes = random_graph(rng, rng.randint(1, 60))
    _random_sizes(rng, graph)
    table = ProbeSizes(graph)
    assert set(table.output_sizes()) == _outputs_by_name(table)
    for dims in ({"b": 1, "s": 7}, {"b": rng.randint(1, 999), "s": rng.randint(1, 999)},
                 {"b": 2}):  # s free: those sizes stay formulas, not numbers
        by_position = table.at(dims)
        by_name = value_bytes(graph, _binding(dims))
        assert dict(by_position) == by_name and list(by_position) == list(by_name)
        positional, named = (plan_ort_buffers(graph, sizes, shapes)
                             for sizes in (by_position, by_name))
        assert list(positional.sizes) == list(named.sizes)
        assert positional.buffers == named.buffers
        assert plan_events(positional, []) == plan_events(named, [])
        fill, plain = fill_unknown_sizes(graph, by_position), fill_unknown_sizes(graph, by_name)
        assert dict(fill.sizes) == dict(plain.sizes) and fill.note() == plain.note()
        assert (fill.from_written, fill.estimated, fill.unknown) == (
            plain.from_written, plain.estimated, plain.unknown)
        assert (fill.sizes is by_position) == (plain.sizes is by_name)  # nothing filled
        for capacity in (None, 1 << 40, 1 << 14):
            estimates = [ort_cuda_estimate(graph, sizes, shapes, 100, 1000, "measured",
                                           capacity, bound=dims)
                         for sizes in (by_position, by_name)]
            assert estimates[0] == estimates[1]
        assert ort_cpu_estimate(graph, by_position, 4, dims, shapes) == \
            ort_cpu_estimate(graph, by_name, 4, dims, shapes)


def test_random_plans_have_unknown_and_free_sizes() -> None:
    """The cases above reach the fill's by-name path and the buffers of 0 bytes."""
    missing = 0
    for seed in range(60):
        rng = random.Random(seed)
        graph, _ = random_graph(rng, rng.randint(1, 60))
        _random_sizes(rng, graph)
        missing += not ProbeSizes(graph).at({"b": 2}).outputs_are_numbers()
    assert 10 < missing < 60


def test_a_size_too_large_is_the_same_error() -> None:
    analysis = analyze_onnx(SAMPLES / "tiny_gpt.onnx", plan=False)
    dims = {"batch": 10**9, "seq": 10**9}
    with pytest.raises(GraphmemError) as expected:
        SizeTable(analysis.graph).bound(dims)
    with pytest.raises(GraphmemError) as raised:
        ProbeSizes(analysis.graph).at(dims)
    assert str(raised.value) == str(expected.value)


@pytest.mark.ort
@pytest.mark.parametrize(("sample", "dims"), [("tiny_gpt.onnx", {"seq": 64}),
                                             ("tiny_llama.onnx", {"seq": 17}),
                                             ("tiny_cnn.onnx", {})])
def test_positions_equal_names_on_the_samples(sample: str, dims: dict[str, int]) -> None:
    analysis = analyze_onnx(SAMPLES / sample, batch=1, dims=dims, plan=False)
    gpu = find_gpu("t4")
    table = ProbeSizes(analysis.graph)
    for batch in (1, 3, 64, 5000):
        binding = DimBinding(bound={**dims, "batch": batch}, free=(), batch_dim="batch")
        by_position = table.at(binding.bound)
        assert isinstance(by_position, ValueSizes) and by_position.outputs_are_numbers()
        by_name = value_bytes(analysis.graph, binding)
        for runtime, level in (("ort-cuda", None), ("ort-cpu", "disabled")):
            estimates = [runtime_estimate(analysis, runtime, gpu if runtime == "ort-cuda"
                                          else None, ort_optimization=level, dims=binding,
                                          capacity_bytes=gpu.capacity_bytes, sizes=sizes)
                         for sizes in (by_position, by_name)]
            assert estimates[0] == estimates[1], (runtime, batch)


def _outputs_by_name(table: ProbeSizes) -> set[int]:
    """The distinct size indices of the node outputs, each output looked up by its name (what
    `output_sizes` did before reading the values with a producer in place)."""
    position = {name: i for i, name in enumerate(table.names)}
    return {table.index[position[value.name]] for node in table.graph.nodes
            for value in node.outputs}


@pytest.mark.parametrize("sample", ["tiny_gpt.onnx", "tiny_llama.dynamo.onnx", "tiny_cnn.onnx"])
def test_output_sizes_on_the_samples(sample: str) -> None:
    analysis = analyze_onnx(SAMPLES / sample, batch=2, plan=False)
    table = ProbeSizes(analysis.graph)
    assert set(table.output_sizes()) == _outputs_by_name(table)
