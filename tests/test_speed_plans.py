"""The plans' shared and remembered work gives what the plain computations give: the memory
model built on the liveness's buffers (no second walk of the graph), the arena's best fit at
alignment 1, an order's peak without the whole profile, sums of constant sizes, shape texts
remembered per (shape, dims), the successors found once per model."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.core import ir
from graphmem.core.ir import DType, Role, Value
from graphmem.core.symbolic import SymInt, sum_sizes
from graphmem.passes import arena, memory_model
from graphmem.passes.dims import value_bytes
from graphmem.passes.memory_model import (
    build_memory_model,
    find_buffers,
    live_profile,
    order_peak,
    plan_dims,
)
from graphmem.passes.schedule import GREEDY_KEYS, greedy_order
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.planning import with_plans

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture(scope="module")
def decoder() -> Analysis:
    return analyze_onnx(SAMPLES / "tiny_llama.onnx", batch=3, dims={"seq": 17}, plan=False)


def test_the_model_built_on_the_liveness_buffers_is_the_plain_one(decoder: Analysis) -> None:
    graph, sweep = decoder.graph, decoder.liveness.sweep
    assert sweep is not None and sweep.buffers is not None and sweep.buffers.of_graph(graph)
    sizes = value_bytes(graph, decoder.dims)
    dims = plan_dims(graph, decoder.dims.bound)
    shared = build_memory_model(graph, sizes, dims, sweep)
    assert shared == build_memory_model(graph, sizes, dims)
    assert shared.swept_events is sweep.events and shared.swept_totals is sweep.totals


def test_the_plans_do_not_walk_the_graph_for_buffers_again(
        decoder: Analysis, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []

    def counted(*args: object, **kwargs: object) -> memory_model.Buffers:
        calls.append(args)
        return find_buffers(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(memory_model, "find_buffers", counted)
    planned = with_plans(decoder, None)
    assert calls == []
    monkeypatch.undo()
    assert planned.arena == with_plans(decoder, None).arena


def test_what_if_or_other_graph_buffers_are_not_reused(decoder: Analysis) -> None:
    graph = decoder.graph
    made = next(v for n in graph.nodes for v in n.outputs if v.role is Role.ACTIVATION)
    base = next(v for v in graph.nodes[-1].outputs)
    assert not find_buffers(graph, {made: base}).of_graph(graph)
    other = analyze_onnx(SAMPLES / "tiny_gpt.onnx", plan=False).graph
    assert not find_buffers(graph).of_graph(other)


def test_best_fit_at_alignment_1_is_the_aligned_search() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        placed = []
        for _ in range(rng.randrange(0, 12)):
            offset = rng.randrange(0, 200)
            placed.append((offset, offset + rng.randrange(1, 60)))
        placed.sort()
        size = rng.randrange(1, 80)
        assert arena._best_fit(placed, size, 1) == arena._best_fit_aligned(placed, size, 1)


def test_order_peak_is_the_first_maximum_of_the_profile(decoder: Analysis) -> None:
    graph = decoder.graph
    model = build_memory_model(graph, value_bytes(graph, decoder.dims),
                               plan_dims(graph, decoder.dims.bound))
    orders = [range(model.node_count), *(greedy_order(model, key) for key in GREEDY_KEYS)]
    for order in orders:
        during, _ = live_profile(model, order)
        peak = max(during)
        assert order_peak(model, order) == (peak, during.index(peak))
    assert order_peak(model, []) == (-1, 0)


def test_successors_are_found_once_and_handed_out_as_fresh_lists(decoder: Analysis) -> None:
    graph = decoder.graph
    model = build_memory_model(graph, value_bytes(graph, decoder.dims),
                               plan_dims(graph, decoder.dims.bound))
    first = model.successors()
    expected = [[n for n, preds in enumerate(model.predecessors) if p in preds]
                for p in range(model.node_count)]
    assert first == expected
    first[0].append(-1)
    assert model.successors() == expected


def test_a_sum_of_constant_sizes_is_the_plain_sum() -> None:
    from fractions import Fraction

    seq = SymInt.symbol("seq")
    cases = [[], [SymInt.const(0)], [SymInt.const(3), SymInt.const(4)],
             [SymInt.const(Fraction(1, 2)), SymInt.const(Fraction(1, 2))],
             [seq * 2, SymInt.const(5), seq * -2], [seq, SymInt.const(1)]]
    for values in cases:
        expected = sum(values, SymInt())
        total = sum_sizes(values)
        assert total == expected and total.is_constant == expected.is_constant
        assert str(total) == str(expected)


def test_shape_texts_are_remembered_per_shape_and_dims(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ir, "_SHAPE_TEXTS", {})
    batch, seq = SymInt.symbol("batch"), SymInt.symbol("seq")
    one = Value("a", DType.FLOAT32, (batch, seq * 2, SymInt.const(64)), Role.ACTIVATION)
    other = Value("b", DType.FLOAT16, (batch, seq * 2, SymInt.const(64)), Role.ACTIVATION)
    unknown = Value("c", DType.FLOAT32, (batch, None), Role.ACTIVATION)
    assert one.shape_text() == other.shape_text() == "[batch, 2*seq, 64]"
    assert one.shape_text({"seq": 8}) == "[batch, 16, 64]"
    assert other.shape_text({"seq": 8, "batch": 2}) == "[2, 16, 64]"
    assert unknown.shape_text({"batch": 4}) == "[4, ?]"
    assert Value("d", DType.FLOAT32, None, Role.ACTIVATION).shape_text() == "?"
    assert len(ir._SHAPE_TEXTS) == 4


def test_a_bound_graph_is_swept_as_numbers_with_the_polynomial_sweeps_answer(
        decoder: Analysis) -> None:
    sweep = decoder.liveness.sweep
    assert sweep is not None and all(size.is_constant for size in sweep.buffer_sizes)
    start = (sum_sizes(sweep.resident_sizes),)
    one_group = [0] * len(sweep.buffer_sizes)  # groups given: the polynomial sweep
    assert sweep.profile(start) == sweep.profile(start, one_group)
    seq = SymInt.symbol("seq")
    assert sweep.profile((start[0] + seq,)) == sweep.profile((start[0] + seq,), one_group)


def _covered(ranges: list[tuple[int, int]]) -> set[int]:
    return {byte for offset, end in ranges for byte in range(offset, end)}


def test_the_occupancy_index_holds_exactly_the_intersecting_buffers_offsets() -> None:
    # the union of what meeting() returns is the union of the [offset, end) of exactly the
    # buffers whose lifetimes intersect the query: bytes compared one by one
    # at every level the tree may stop at (`top_level`: a decoder's stops low, the level's
    # nodes then stand side by side)
    rng = random.Random(11)
    for steps, top in ((1, None), (5, None), (5, 0), (64, None), (64, 2), (300, None),
                       (300, 0), (300, 1), (300, 4), (300, 8)):
        index = arena._OccupancyIndex(steps, top)
        placed: list[tuple[int, int, int, int]] = []  # first, last, offset, end
        for _ in range(150):
            first = rng.randrange(steps)
            long = rng.random() < 0.2  # lifetimes over many tree levels too
            last = min(steps - 1, first + rng.randrange(steps if long else 4))
            bounds, several = index.meeting(first, last)
            if not several:  # one union: boundaries strictly rising (runs apart, touching
                # ones joined)
                assert all(bounds[i] < bounds[i + 1] for i in range(len(bounds) - 1))
            found = _covered(list(zip(bounds[::2], bounds[1::2], strict=True)))
            expected = _covered([(o, e) for a, b, o, e in placed if a <= last and b >= first])
            assert found == expected
            offset = rng.randrange(400)
            end = offset + rng.randint(1, 40)
            index.add(first, last, offset, end)
            placed.append((first, last, offset, end))
