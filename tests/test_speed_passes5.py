"""The analysing and writing stages' shortcuts of 2026-11-29 (passes5) against what they
replace: the nodes' kinds read off the costs' signature numbers (report/node_kinds.py), the
runtime models' size table taken from the passes' (runtime_models/value_sizes.py
`ProbeSizes`, pipeline/device_total.py `probe_table`), and the analysis's stages frozen out
of the cyclic collector's reach in a one-command process (pipeline/run.py), with no cyclic
garbage left by the passes (pipeline/dim_probe.py's memos)."""

from __future__ import annotations

import dataclasses
import gc
import math
import random
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.core import collector
from graphmem.passes.dims import SizeTable
from graphmem.pipeline import run
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.device_total import probe_table
from graphmem.pipeline.request import Request
from graphmem.report.node_kinds import node_kinds
from graphmem.runtime_models.value_sizes import ProbeSizes

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
MODELS = ("tiny_gpt.onnx", "tiny_llama.dynamo.onnx", "tiny_cnn.onnx")


@pytest.fixture(scope="module")
def analyses() -> list[Analysis]:
    return [analyze_onnx(SAMPLES / name, batch=2, dims={"seq": 16}, gpu="a100-80gb")
            if "cnn" not in name else analyze_onnx(SAMPLES / name, batch=4, gpu="t4")
            for name in MODELS]


def test_kinds_by_signature_number_are_the_kinds_by_key(analyses: list[Analysis]) -> None:
    for analysis in analyses:
        costs, roofline = analysis.costs, analysis.roofline
        assert roofline is not None and len(costs.groups) == len(costs.nodes)
        assert max(costs.groups) >= 0 and len(set(costs.groups)) < len(costs.nodes)
        for times in (roofline.nodes, None):
            assert node_kinds(costs.nodes, times, costs.groups) == node_kinds(costs.nodes, times)


@pytest.mark.parametrize("seed", range(6))
def test_a_number_s_node_with_other_times_is_keyed(analyses: list[Analysis], seed: int) -> None:
    # nodes of one signature number whose times are not the first node's objects (a roofline
    # made otherwise, equal floats as other objects, NaN, zeros written apart) are found by
    # their keys: the same kinds as without the numbers
    rng = random.Random(seed)
    analysis = analyses[seed % len(analyses)]
    costs, times = analysis.costs, list(analysis.roofline.nodes)  # type: ignore[union-attr]
    shared_nan = math.nan
    for index in rng.sample(range(len(times)), k=len(times) // 3):
        seconds = rng.choice((times[index].est_time_s + 0.0, 0.0, -0.0, shared_nan, 1e-9,
                              float(f"{times[index].est_time_s!r}")))
        times[index] = dataclasses.replace(times[index], est_time_s=seconds)
    assert node_kinds(costs.nodes, times, costs.groups) == node_kinds(costs.nodes, times)
    wrong_length = costs.groups[:-1]  # not the nodes' numbers: unused
    assert node_kinds(costs.nodes, times, wrong_length) == node_kinds(costs.nodes, times)


def test_the_probes_table_is_the_passes_table(analyses: list[Analysis]) -> None:
    for analysis in analyses:
        table = analysis.size_table
        assert table is not None and table.graph is analysis.graph
        taken, made = ProbeSizes(analysis.graph, table), ProbeSizes(analysis.graph)
        assert (taken.names, taken.index, taken.sizes) == (made.names, made.index, made.sizes)
        assert taken.index is table.index  # taken, not found again
        assert probe_table(analysis).index is table.index
        assert taken.at(analysis.dims.bound) == made.at(analysis.dims.bound)
    other = analyses[1].graph
    mixed = ProbeSizes(other, analyses[0].size_table)  # another graph's table: not taken
    assert (mixed.names, mixed.index, mixed.sizes) == (
        SizeTable(other).names, SizeTable(other).index, SizeTable(other).sizes)


def test_the_analysis_stages_freeze_only_in_a_one_command_process(
        collector_on: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # an ONNX file's graph, the passes' and the runtime model's results live to the
    # command's end: frozen after their stages in the console script's process; a caller's
    # heap is its own
    frozen: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    request = Request(SAMPLES / "tiny_gpt.onnx", batch=1, dims={"seq": 8}, gpu="t4")
    monkeypatch.setattr(collector, "_ONE_COMMAND", [])
    run.analyze(request)
    assert frozen == [] and gc.isenabled()
    monkeypatch.setattr(collector, "_ONE_COMMAND", [True])
    run.analyze(request)
    assert len(frozen) >= 3 and gc.isenabled()  # reading, analysing, the runtime model


def test_the_passes_leave_no_cyclic_garbage(collector_on: None,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # frozen objects are never collected: the analysing stage must make no cycles (a
    # functools.cache of a bound method on the largest-batch probe made one, holding its
    # memory model)
    found: list[int] = []

    def counted(stage):  # type: ignore[no-untyped-def]
        def run_stage(*args: object, **kwargs: object) -> object:
            gc.collect()
            gc.disable()
            try:
                return stage(*args, **kwargs)
            finally:
                found.append(gc.collect())
                gc.enable()

        return run_stage

    # the ONNX file read (frozen after too) and the passes; after a first analysis: the
    # modules the reading imports at its first use are one-time garbage (enum classes,
    # protobuf descriptors: 186 objects)
    request = Request(SAMPLES / "resnet50.onnx", gpu="t4", plan=True)
    run.analyze(request)
    monkeypatch.setattr(run, "_imported", counted(run._imported))
    monkeypatch.setattr(run, "run_passes", counted(run.run_passes))
    # and the runtime model (frozen after too): the device-total probe's estimates and the
    # BFC arena's two-way linked chunks made cycles (225 objects on tiny_gpt, 96 here)
    monkeypatch.setattr(run, "_with_runtime", counted(run._with_runtime))
    run.analyze(request)  # the batch free: a largest-batch search on the memory model
    assert found == [0, 0, 0]


@pytest.mark.parametrize("seed", range(12))
def test_step_numbers_are_the_steps_sizes_as_numbers(seed: int) -> None:
    # the writers' timelines read them for `int` (JSON) and `probe` (HTML) of each step
    from fractions import Fraction

    from graphmem.core.symbolic import SymInt
    from graphmem.passes.liveness import analyze_liveness
    from tests.builders import sizes_of
    from tests.helpers.graphs import random_dag, symbolic_random_dag

    graph = random_dag(seed) if seed % 3 else symbolic_random_dag(seed)
    sizes = sizes_of(graph)
    if seed % 4 == 1:  # a sub-byte size: totals with fractions, rounded up per step
        name = next(iter(sizes))
        sizes[name] = (sizes[name] or SymInt()) + SymInt.const(Fraction(1, 2))
    result = analyze_liveness(graph, sizes)
    steps = result.live_bytes_per_step
    numbers = result.step_numbers
    if all(step.is_constant and isinstance(step.constant_term, int) for step in steps):
        assert numbers == [int(step) for step in steps] and len(numbers) == len(steps)
    else:
        assert numbers is None


@pytest.mark.parametrize("seed", range(10))
def test_the_timeline_s_columns_pick_the_steps_a_key_would(seed: int) -> None:
    # report/html/charts.py finds each column's and bucket's first lowest and highest step by
    # a slice's min and max and `index`: the steps `min`/`max` with a key per step gave
    from graphmem.report.html import charts

    rng = random.Random(seed)
    count = rng.choice((5, 700, 1500, 5000))
    values = [rng.choice((0, 1, 7, 7, 1 << 40)) for _ in range(count)]  # ties everywhere
    described: list[int] = []
    charts._hover_targets(values, float, lambda step: described.append(step) or "")
    per_target = math.ceil(count / charts.MAX_HOVER_TARGETS)
    expected = [max(range(start, min(start + per_target, count)), key=values.__getitem__)
                for start in range(0, count, per_target)]
    assert described == (expected if per_target > 1 else list(range(count)))
    columns = 540
    points = charts._line_points(values, float, float, columns)
    if count > columns:
        steps = []
        for column in range(columns):
            chunk = range(column * count // columns, (column + 1) * count // columns)
            low = min(chunk, key=values.__getitem__)
            high = max(chunk, key=values.__getitem__)
            steps += [values[step] for step in sorted({low, high})]
        assert [y for _, y in points] == steps
    rows = [(v, rng.choice((0, 3, 3))) for v in values]
    layers = charts.stacked_layers(("a", "b"), rows, float, float, columns)
    if count > columns:
        totals = [sum(row) for row in rows]
        picked = [rows[max(range(column * count // columns, (column + 1) * count // columns),
                           key=totals.__getitem__)] for column in range(columns)]
        tops = " ".join(f"{x:.1f},{float(sum(row)):.1f}" for x, row in zip(
            [float((column * count // columns + (column + 1) * count // columns) / 2)
             for column in range(columns)], picked, strict=True))
        assert tops in layers[0].path


def test_costs_bound_asks_each_size_object_as_each_node(analyses: list[Analysis]) -> None:
    from graphmem.core.symbolic import SymInt
    from graphmem.pipeline.dim_probe import costs_bound

    def per_node(costs) -> bool:  # type: ignore[no-untyped-def]
        return all(n.flops.is_constant and n.bytes_read.is_constant
                   and n.bytes_written.is_constant for n in costs.nodes)

    free = analyze_onnx(SAMPLES / "tiny_gpt.onnx", dims={"seq": 16})  # the batch free
    for costs in (*(a.costs for a in analyses), free.costs):
        assert costs_bound(costs) == per_node(costs)
        for field in ("flops", "bytes_read", "bytes_written"):  # one node's count free
            nodes = list(costs.nodes)
            nodes[-1] = dataclasses.replace(nodes[-1], **{field: SymInt.symbol("batch")})
            changed = dataclasses.replace(costs, nodes=tuple(nodes))
            assert costs_bound(changed) is False and per_node(changed) is False
    assert costs_bound(analyses[0].costs) and not costs_bound(free.costs)


@pytest.mark.parametrize("seed", range(8))
def test_slices_new_dims_found_once_per_shapes(seed: int) -> None:
    # passes/extent_bounds.py `_MakesNew`: a Slice's answer kept per its tensors' shape
    # objects; Slices sharing shape tuples, some with a new dim, some keeping the input's
    from graphmem.core.ir import DType, Graph, Node, Role, Value
    from graphmem.core.symbolic import SymInt
    from graphmem.passes.extent_bounds import _MakesNew, _node_dims

    rng = random.Random(seed)
    shapes = [(SymInt.const(4), SymInt.symbol("seq")), (SymInt.const(4), SymInt.symbol("s1")),
              (SymInt.symbol("seq"), SymInt.const(8)), (SymInt.symbol("s2"), SymInt.const(8))]
    starts = (SymInt.const(2),)
    graph = Graph("g", [], {}, [], [])
    x = Value("x", DType.FLOAT32, shapes[0], Role.INPUT)
    graph.inputs.append(x)
    for index in range(60):
        source = rng.choice(shapes[:3:2])  # the input's own dims
        out = Value(f"y{index}", DType.FLOAT32, rng.choice(shapes), Role.ACTIVATION)
        bound = Value(f"b{index}", DType.INT64, starts if rng.random() < 0.8 else None,
                      Role.CONSTANT)
        reads = Value(f"x{index}", DType.FLOAT32, source, Role.ACTIVATION)
        node = Node(f"n{index}", rng.choice(("Slice", "Slice", "Split")),
                    [reads, bound, None if rng.random() < 0.3 else bound], [])
        node.add_output(out)
        graph.add_node(node)
    seen = {"seq"}
    once = _MakesNew(seen)
    for node in graph.nodes:
        assert once(node) == (next(_node_dims(node, seen), None) is not None)
    assert once.slices and len(once.slices) < 30  # found once per shapes, not per node
    assert set(once.slices.values()) == {True, False}
