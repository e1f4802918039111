"""The fast paths of the passes after import give what the plain computations give: value sizes
bound once per distinct polynomial (value_bytes, SizeTable), onnxruntime's order, the runtime
model's arena events and best fit, the device total probes (resident bytes, sizes, no notes),
the max-batch probe's rebinding, the HTML node rows."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.core.evaluate import evaluate
from graphmem.core.ir import RESIDENT_ROLES
from graphmem.core.symbolic import SymInt
from graphmem.core.units import MAX_BYTES
from graphmem.devices.gpus import find_gpu
from graphmem.errors import GraphmemError
from graphmem.passes.dims import DimBinding, SizeTable, check_sizes_fit, value_bytes
from graphmem.passes.memory_model import build_memory_model, plan_dims, rebind
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.device_total import (
    DeviceModel,
    DeviceTotalProbe,
    device_estimate,
    gpu_runtime,
    resident_formula,
)
from graphmem.report.html import nodes
from graphmem.report.html.view import role_steps_and_phases
from graphmem.runtime_models.bfc_arena import (
    ArenaEvent,
    BfcArena,
    _Chunk,
    replay_through_arena,
)
from graphmem.runtime_models.ort_cpu import (
    OrtPlan,
    arena_events,
    ort_execution_order,
    plan_ort_buffers,
)
from graphmem.runtime_models.ort_kernels import KernelScratch, kernel_scratch
from tests.helpers.ort_reference import plain_order

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture(scope="module")
def decoder_free() -> Analysis:
    """tiny_gpt with its dims free (batch, seq): sizes stay formulas."""
    return analyze_onnx(SAMPLES / "tiny_gpt.onnx", plan=False)


@pytest.fixture(scope="module")
def decoder_bound() -> Analysis:
    return analyze_onnx(SAMPLES / "tiny_llama.onnx", batch=3, dims={"seq": 17}, plan=False)


@pytest.fixture(scope="module")
def cnn() -> Analysis:
    """With a GPU: a roofline gives each node row its time."""
    return analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=8, gpu="t4")


# the training step (tests/models.py's TinyCNN traced with torch.fx) takes seconds to trace
ANALYSES = ("decoder_free", "decoder_bound", "cnn",
            pytest.param("training", marks=pytest.mark.slow))


def _plain_sizes(analysis: Analysis, dims: dict[str, int]) -> dict[str, SymInt | None]:
    return {name: None if v.nbytes is None else v.nbytes.bind(dims)
            for name, v in analysis.graph.values.items()}


def _bindings(analysis: Analysis) -> list[dict[str, int]]:
    """No dims, the analysis's own, and its free dims bound at a few values."""
    free = sorted(analysis.graph.free_dims())
    return [{}, dict(analysis.dims.bound), *({name: value for name in free[:count]}
                                             for count in (1, len(free)) for value in (1, 5))]


@pytest.mark.parametrize("name", ANALYSES)
def test_value_bytes_binds_each_size_as_the_plain_binding_does(
        name: str, request: pytest.FixtureRequest) -> None:
    analysis: Analysis = request.getfixturevalue(name)
    table = SizeTable(analysis.graph)
    assert len(table.sizes) < len(table.names)  # sizes repeat
    for dims in _bindings(analysis):
        binding = DimBinding(bound=dims, free=(), batch_dim=None)
        plain = _plain_sizes(analysis, dims)
        assert value_bytes(analysis.graph, binding) == plain
        assert table.bound(dims) == plain  # the device total probes' sizes


def test_value_bytes_names_the_first_tensor_too_large(decoder_free: Analysis) -> None:
    dims = {"batch": 10**9, "seq": 10**9}
    plain = _plain_sizes(decoder_free, dims)
    with pytest.raises(GraphmemError) as expected:
        check_sizes_fit(plain, dims)
    with pytest.raises(GraphmemError) as raised:
        value_bytes(decoder_free.graph, DimBinding(bound=dims, free=(), batch_dim="batch"))
    assert str(raised.value) == str(expected.value)
    with pytest.raises(GraphmemError) as raised:
        SizeTable(decoder_free.graph).bound(dims)
    assert str(raised.value) == str(expected.value)


def _plain_arena_events(plan: OrtPlan, scratch: list[KernelScratch]) -> list[list[ArenaEvent]]:
    """The events as the runtime model first built them, step by step."""
    steps = []
    for step in range(len(plan.order)):
        outputs = [ArenaEvent(b.owner.name, b.size_bytes) for b in plan.buffers
                   if b.first_step == step]
        temps = [ArenaEvent(f"scratch {step} {i}", size)
                 for i, size in enumerate(scratch[step].sizes_bytes)]
        kernel = temps + outputs if scratch[step].before_outputs else outputs + temps
        frees = [ArenaEvent(e.key, None) for e in temps]
        frees += [ArenaEvent(b.owner.name, None) for b in plan.buffers if b.last_step == step]
        steps.append(kernel + frees)
    return steps


@pytest.mark.parametrize("name", ANALYSES[:3])
def test_arena_events_are_the_step_by_step_events(name: str,
                                                  request: pytest.FixtureRequest) -> None:
    analysis: Analysis = request.getfixturevalue(name)
    for dims in _bindings(analysis)[1:]:
        bound = {**dict.fromkeys(analysis.graph.free_dims(), 3), **dims}
        sizes = value_bytes(analysis.graph, DimBinding(bound=bound, free=(), batch_dim=None))
        plan = plan_ort_buffers(analysis.graph, sizes)
        scratch = [kernel_scratch(node, 4, bound) for node in plan.order]
        assert name != "cnn" or any(s.sizes_bytes for s in scratch)  # Conv's im2col buffer
        assert arena_events(plan, scratch) == _plain_arena_events(plan, scratch)


class _PlainBestFit(BfcArena):
    """The arena with its first best-fit search: the smallest chunk, the lowest address."""

    def _best_fit(self, request: int) -> _Chunk | None:
        fits = [c for c in self.chunks if c.free and c.size >= request]
        return min(fits, key=lambda c: (c.size, c.address)) if fits else None


def _random_events(seed: int) -> list[list[ArenaEvent]]:
    rng = random.Random(seed)
    held: list[str] = []
    steps = []
    for step in range(300):
        events = []
        for index in range(rng.randint(0, 3)):
            key = f"{step}.{index}"
            events.append(ArenaEvent(key, rng.choice((256, 1000, 4096, 1 << 20, 3 << 20))
                                     * rng.randint(1, 4)))
            held.append(key)
        for _ in range(rng.randint(0, 3)):
            if held:
                events.append(ArenaEvent(held.pop(rng.randrange(len(held))), None))
        steps.append(events)
    return steps


@pytest.mark.parametrize("seed", range(6))
def test_arena_best_fit_is_the_smallest_lowest_chunk(seed: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    events = _random_events(seed)
    for device_free in (None, 40 << 20):
        fast = replay_through_arena(events, device_free)
        with monkeypatch.context() as patched:
            patched.setattr(BfcArena, "_best_fit", _PlainBestFit._best_fit)
            assert replay_through_arena(events, device_free) == fast


@pytest.mark.parametrize("name", ANALYSES)
def test_rebind_and_resident_formula_equal_each_size_evaluated(
        name: str, request: pytest.FixtureRequest) -> None:
    analysis: Analysis = request.getfixturevalue(name)
    graph = analysis.graph
    free = graph.free_dims()
    sizes = _plain_sizes(analysis, {})
    model = build_memory_model(graph, sizes, plan_dims(graph, {}, free))
    residents = resident_formula(graph)
    for value in (1, 2, 7):
        dims = dict.fromkeys(free, value)
        rebound = rebind(model, sizes, dims)
        assert rebound.buffer_bytes == tuple(
            0 if sizes[n] is None else evaluate(sizes[n], dims) for n in model.buffer_names)
        assert residents.bind(dims) == sum(
            (v.nbytes.bind(dims) for v in graph.values.values()
             if v.role in RESIDENT_ROLES and v.alias_of is None and v.nbytes is not None),
            SymInt())


def test_device_probe_totals_equal_fresh_estimates() -> None:
    analysis = analyze_onnx(SAMPLES / "tiny_gpt.onnx", batch=1, dims={"seq": 64}, plan=False)
    model = DeviceModel(gpu_runtime(analysis), find_gpu("t4"))
    probe = DeviceTotalProbe(analysis, "batch", model)
    assert probe.table is not None  # sizes from the table, not value_bytes
    for batch in (1, 3, 64, 4096, 10**6, 10**14):
        binding = DimBinding(bound={"seq": 64, "batch": batch}, free=(), batch_dim="batch")
        try:
            fresh = device_estimate(analysis, model, binding)
        except GraphmemError:  # a tensor over 4 EiB: more than any GPU
            assert probe.total(batch) == MAX_BYTES + 1
            continue
        assert probe.total(batch) == fresh.device_total_bytes
        # the probe's estimate has the same numbers; of the notes, only a failure's line
        kept = fresh.notes[:1] if fresh.failure else ()
        assert probe.estimate(batch) == replace(fresh, notes=kept)
    assert probe.estimate(10**14) is None
    assert probe.estimate(10**6).failure  # out of memory on the T4: the failure's line kept


@pytest.mark.parametrize("name", ANALYSES)
def test_node_table_data_is_every_rows_data(name: str, request: pytest.FixtureRequest,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    analysis: Analysis = request.getfixturevalue(name)
    _, phase_spans = role_steps_and_phases(analysis)
    phases = [""] * len(analysis.costs.nodes)
    for phase, first, last in phase_spans:
        phases[first: last + 1] = [phase] * (last + 1 - first)
    monkeypatch.setattr(nodes, "MAX_NODE_ROWS", 3)  # most rows take the data-only path
    table = nodes.node_table(analysis.costs, analysis.roofline, phases)
    times = analysis.roofline.nodes if analysis.roofline else [None] * len(phases)
    rows = [nodes.node_row(step, cost, time, phase).data() for step, (cost, time, phase)
            in enumerate(zip(analysis.costs.nodes, times, phases, strict=True))]
    assert len(table.rows) == 3 < table.total == len(rows)
    # byte for byte: the rows' text made from pieces per kind is the encoder's text of the rows
    assert str(table.data) == str(nodes.script_json(rows))
    # each op's text made once per op: the same names as made per node
    op_of = nodes.op_names(analysis.costs)
    assert {cost.name: op_of(cost.name) for cost in analysis.costs.nodes} == {
        cost.name: row.op for cost, row in zip(
            analysis.costs.nodes, (nodes.node_row(0, c, None) for c in analysis.costs.nodes),
            strict=True)}


@pytest.mark.parametrize("name", ANALYSES)
def test_ort_order_is_the_reverse_dfs_with_sorted_producers(
        name: str, request: pytest.FixtureRequest) -> None:
    analysis: Analysis = request.getfixturevalue(name)
    order = ort_execution_order(analysis.graph)
    assert order == plain_order(analysis.graph)
    assert len(order) == len(analysis.graph.nodes)
