"""One order's sweep as prefix sums (graphmem/passes/step_arrays.py) against the sweeps it
replaces: the integer peak equals `order_peak` on the model rebound at the dims
(`memory_model.rebind`), and the candidates equal `symint_max` of the polynomial sweep
(`sweep_events.symbolic_profile`), list for list, on random models with polynomial,
fractional, unknown and huge sizes, in random orders; and DimProbe's peaks (the largest
batch's search) equal the old evaluation on random graphs and the samples."""

from __future__ import annotations

import random
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING

import pytest

from graphmem.core.symbolic import SymInt, symint_max
from graphmem.passes.memory_model import (
    MemoryModel,
    order_peak,
    plan_dims,
    rebind,
    step_events,
    symbolic_order_peak,
)
from graphmem.passes.step_arrays import OrderArrays
from graphmem.passes.sweep_events import size_terms, symbolic_profile

if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis
    from graphmem.pipeline.dim_probe import DimProbe

B, C = SymInt.symbol("b"), SymInt.symbol("c")


def _random_size(rng: random.Random, kind: str) -> SymInt | None:
    if rng.random() < 0.08:
        return None  # unknown: 0 bytes in both sweeps
    constant = rng.choice([0, rng.randint(1, 4096), rng.randint(1, 10**9)])
    size = SymInt.const(constant)
    if rng.random() < 0.7:
        size = size + B * rng.randint(0, 10**6)
    if kind != "affine" and rng.random() < 0.3:
        size = size + B * B * rng.randint(1, 50) + B * C * rng.randint(1, 9)
    if kind == "fractional" and rng.random() < 0.3:
        size = size + B * Fraction(rng.randint(1, 7), 2)  # a 4-bit tensor's half bytes
    if kind == "huge" and rng.random() < 0.2:
        size = size + B * (1 << 61)  # past int64's sums: the Python sweep decides
    return size


def _random_model(seed: int) -> tuple[MemoryModel, dict[str, SymInt | None], list[int], str]:
    """Nodes that make 0 to 2 buffers and keep up to four earlier ones alive; some buffers
    pinned; residents with polynomial sizes; a random order of the nodes."""
    rng = random.Random(seed)
    kind = ["affine", "polynomial", "fractional", "huge"][seed % 4]
    nodes = rng.randint(0 if seed % 17 == 0 else 1, 40)
    allocates: list[tuple[int, ...]] = []
    producer: list[int] = []
    for node in range(nodes):
        made = tuple(range(len(producer), len(producer) + rng.choice([0, 1, 1, 1, 2])))
        producer.extend([node] * len(made))
        allocates.append(made)
    uses = []
    for node in range(nodes):
        earlier = [b for b in range(len(producer)) if producer[b] < node]
        kept = set(allocates[node]) | set(rng.sample(earlier, min(len(earlier), 4)))
        uses.append(tuple(sorted(kept)))
    users: list[list[int]] = [[] for _ in producer]
    for node, kept_alive in enumerate(uses):
        for buffer in kept_alive:
            users[buffer].append(node)
    buffer_names = tuple(f"t{b}" for b in range(len(producer)))
    resident_names = tuple(f"w{r}" for r in range(rng.randint(0, 4)))
    sizes = {name: _random_size(rng, kind) for name in buffer_names + resident_names}
    model = MemoryModel(
        node_names=tuple(f"n{i}" for i in range(nodes)), resident_bytes=0,
        buffer_names=buffer_names, buffer_bytes=(0,) * len(producer),
        producer=tuple(producer), users=tuple(tuple(u) for u in users),
        pinned=tuple(rng.random() < 0.2 for _ in producer), allocates=tuple(allocates),
        uses=tuple(uses), predecessors=((),) * nodes, dims={},
        resident_names=resident_names)
    order = list(range(nodes))
    rng.shuffle(order)
    return model, sizes, order, kind


def _arrays(model: MemoryModel, sizes: Mapping[str, SymInt | None], order: list[int]
            ) -> OrderArrays:
    return OrderArrays(model.allocates, step_events(model, order),
                       [sizes.get(n) for n in model.buffer_names],
                       [sizes.get(n) for n in model.resident_names])


def _start(model: MemoryModel, sizes: Mapping[str, SymInt | None]) -> SymInt:
    return sum((sizes.get(n) or SymInt() for n in model.resident_names), SymInt())


def test_the_integer_peak_equals_order_peak_rebound() -> None:
    fell_back = 0
    for seed in range(400):
        model, sizes, order, kind = _random_model(seed)
        arrays = _arrays(model, sizes, order)
        rng = random.Random(seed)
        for _ in range(4):
            dims = {"b": rng.choice([1, 2, rng.randint(1, 5000), rng.randint(1, 1 << 20)]),
                    "c": rng.randint(1, 300)}
            expected = order_peak(rebind(model, sizes, dims), order)
            found = arrays.peak(dims)
            if found is None:  # only past int64's exact sums
                fell_back += 1
                assert kind in ("huge", "polynomial")
                continue
            assert found == expected, (seed, dims)
    assert fell_back  # the huge sizes did reach the fallback


def test_the_candidates_equal_symint_max_of_the_polynomial_sweep() -> None:
    found_none = {"fractional": 0, "huge": 0}
    several = 0
    for seed in range(400):
        model, sizes, order, kind = _random_model(seed)
        start = _start(model, sizes)
        terms = [size_terms(sizes.get(n)) for n in model.buffer_names]
        profile = symbolic_profile(model.allocates, terms, step_events(model, order), (start,))
        expected = symint_max(step[0] for step in profile)
        candidates = _arrays(model, sizes, order).candidates(start)
        if candidates is None:
            assert kind in found_none, seed
            found_none[kind] += 1
            continue
        assert candidates == expected, seed  # the same polynomials, in the same order
        several += len(candidates) > 1
    assert all(found_none.values()) and several > 20


def test_symbolic_order_peak_is_the_polynomial_sweeps() -> None:
    # the peak picked at the probe and the candidates, whichever sweep made them
    for seed in range(200):
        model, sizes, order, _ = _random_model(seed)
        if not order:
            continue
        start = _start(model, sizes)
        probe = {"b": 64, "c": 64}
        terms = [size_terms(sizes.get(n)) for n in model.buffer_names]
        profile = symbolic_profile(model.allocates, terms, step_events(model, order), (start,))
        candidates = symint_max(step[0] for step in profile)
        peak = max(candidates, key=lambda c: c.evaluate(probe))
        assert symbolic_order_peak(model, order, sizes, start, probe) == (peak,
                                                                          tuple(candidates))


def test_by_hand() -> None:
    # node 0 makes t0 (10 + 4b), node 1 reads t0 and makes t1 (100), node 2 makes t2 (8b):
    # during step 0: w + t0; step 1: w + t0 + t1 (t0 freed after it); step 2: w + t1 + t2
    model, _, _, _ = _random_model(1)
    model = MemoryModel(("a", "b", "c"), 0, ("t0", "t1", "t2"), (0, 0, 0), (0, 1, 2),
                        ((0, 1), (1, 2), (2,)), (False, False, True), ((0,), (1,), (2,)),
                        ((0,), (0, 1), (1, 2)), ((), (), ()), {}, resident_names=("w",))
    sizes = {"t0": 4 * B + 10, "t1": SymInt.const(100), "t2": 8 * B, "w": SymInt.const(5)}
    arrays = _arrays(model, sizes, [0, 1, 2])
    # at b = 10: 55, 155, 185 -> the peak 185 at step 2; at b = 1: 19, 119, 113 -> step 1
    assert arrays.peak({"b": 10}) == (185, 2)
    assert arrays.peak({"b": 1}) == (119, 1)
    # 115 + 4b (step 1) and 105 + 8b (step 2): neither dominates; step 0 (15 + 4b) does not
    assert arrays.candidates(SymInt.const(5)) == [4 * B + 115, 8 * B + 105]


@pytest.mark.parametrize("seed", range(6))
def test_dim_probe_peaks_equal_the_rebound_model_on_random_graphs(seed: int) -> None:
    # the batch bound (the decoders' command) and free: the probe's candidates and exact
    # peaks equal the polynomial sweep's and the rebound integer model's
    from graphmem.passes.dims import bind_dims
    from graphmem.pipeline.analysis import ModelInfo
    from graphmem.pipeline.dim_probe import DimProbe
    from graphmem.pipeline.run import run_passes
    from tests.helpers.graphs import symbolic_random_dag

    graph = symbolic_random_dag(seed, node_count=40)
    info = ModelInfo("", graph.name, "ir", 0, len(graph.nodes), "none", ())
    for batch in (None, 3):
        analysis = run_passes(graph, info, bind_dims(graph, batch, {"seq": 9}), None, None)
        _check_probe(analysis, DimProbe(analysis, "batch", None), batch is not None)


def _check_probe(analysis: Analysis, probe: DimProbe, bound: bool) -> None:
    model = probe.model
    assert model is not None and probe.arrays is not None
    order = range(model.node_count)
    if bound:
        start = sum((probe.sizes.get(n) or SymInt() for n in model.resident_names), SymInt())
        terms = [size_terms(probe.sizes.get(n)) for n in model.buffer_names]
        profile = symbolic_profile(model.allocates, terms, step_events(model, order), (start,))
        expected = symint_max(step[0] for step in profile)
        dims = plan_dims(analysis.graph, probe.others)
        assert symbolic_order_peak(model, order, probe.sizes, start, dims)[1] == tuple(expected)
    for value in (1, 2, 5, 64, 1000, 1 << 16):
        dims = {probe.dim: value}
        assert probe.arrays.peak(dims) == order_peak(rebind(model, probe.sizes, dims), order)
        assert probe.exact_peak(value) == probe.estimate_peak(value)


@pytest.mark.parametrize("name", ["tiny_gpt", "tiny_llama.dynamo", "tiny_cnn", "gpt2"])
def test_dim_probe_peaks_equal_the_rebound_model_on_the_samples(name: str) -> None:
    from graphmem.frontends.onnx.importer import import_onnx
    from graphmem.passes.dims import bind_dims, value_bytes
    from graphmem.passes.memory_model import build_memory_model
    from graphmem.pipeline.analysis import ModelInfo
    from graphmem.pipeline.dim_probe import DimProbe, _swept_in_model_order
    from graphmem.pipeline.run import run_passes
    from tests.helpers.samples import SAMPLES_DIR, sample_dims

    path = SAMPLES_DIR / f"{name}.onnx"
    dims = sample_dims(path, 2, 16)
    graph = import_onnx(path).graph
    batch_dim = next(iter(dims))
    info = ModelInfo("", graph.name, "onnx", 0, len(graph.nodes), "none", ())
    others = {k: v for k, v in dims.items() if k != batch_dim}
    for bound in (others, dims):
        binding = bind_dims(graph, None, bound)
        analysis = run_passes(graph, info, binding, None, None)
        probe = DimProbe(analysis, batch_dim, None)
        _check_probe(analysis, probe, batch_dim in bound)
        # with the plans' model (the liveness's buffers, as with_plans passes it) the probe
        # reads the liveness's events and storages: the same sweep
        sizes, swept = value_bytes(graph, binding), analysis.liveness.sweep
        assert swept is not None
        model = build_memory_model(graph, sizes, plan_dims(graph, binding.bound), swept)
        assert _swept_in_model_order(swept, model) is swept
        shared = DimProbe(analysis, batch_dim, None, sizes, model)
        assert shared.arrays is not None and probe.arrays is not None
        assert shared.arrays.prefixes.allocated is not probe.arrays.prefixes.allocated
        for value in (1, 3, 77):
            assert shared.arrays.peak({batch_dim: value}) == probe.arrays.peak({batch_dim: value})
        assert shared.candidates and len(shared.candidates) == len(probe.candidates)
        assert [c({batch_dim: 9}) for c in shared.candidates] == [
            c({batch_dim: 9}) for c in probe.candidates]
