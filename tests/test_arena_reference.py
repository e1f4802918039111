"""The arena plan equals the plan by its definition (tests/helpers/arena_reference.py), buffer
for buffer: on random graphs, on graphs whose placed buffers leave many separate runs, and on
the wide hostile models of issue 26 (graph outputs, graph inputs, Sum/Concat inputs, Split
outputs, If arms, local functions) analysed whole, with their live peak worked by hand.

The planner keeps unions of offset ranges instead of lists of buffers (passes/arena.py); these
tests are what says the faster search gives the same plan. Times are benchmarks/
hostile_scaling.py's business, not these tests'.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import graphmem
from graphmem.core.ir import Role
from graphmem.passes.arena import _VECTORIZE_FROM, ArenaPlan, plan_arena
from graphmem.passes.memory_model import build_memory_model
from graphmem.passes.schedule import greedy_order
from tests import hostile_models as hostile
from tests.builders import GraphBuilder, sizes_of
from tests.helpers.arena_reference import reference_offsets
from tests.helpers.graphs import random_dag

WIDTH = 2_000
# each wide model's tensors are float32 [batch=2, 8] (hostile_models.info): 2 * 8 * 4 bytes
TENSOR_BYTES = 2 * 8 * 4


def assert_reference(plan: ArenaPlan) -> None:
    sizes = [p.nbytes for p in plan.placements]
    spans = [(p.first_step, p.last_step) for p in plan.placements]
    expected = reference_offsets(sizes, spans, plan.alignment)
    assert [p.offset for p in plan.placements] == expected
    assert plan.arena_bytes == max((o + s for o, s in zip(expected, sizes, strict=True)), default=0)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("alignment", [1, 8, 64])
def test_random_graphs_match_the_reference(seed: int, alignment: int) -> None:
    graph = random_dag(seed, node_count=150)
    model = build_memory_model(graph, sizes_of(graph), {})
    for order in (None, list(greedy_order(model))):
        assert_reference(plan_arena(model, order, alignment))


def many_runs(seed: int, count: int) -> GraphBuilder:
    """Tensors of mixed sizes read again much later, so a placement meets many placed
    buffers whose offsets leave holes: many separate runs, in many of the index's unions."""
    rng = random.Random(seed)
    b = GraphBuilder(f"runs{seed}")
    b.tensor("x", 1, Role.INPUT)
    names = ["x"]
    for index in range(count):
        reads = [names[-1], rng.choice(names)]
        name = f"t{index}"
        b.node(f"n{index}", list(dict.fromkeys(reads)), {name: rng.randint(1, 300)})
        names.append(name)
    b.node("last", names[1::2], {"y": 1})
    return b


def most_runs_met(plan: ArenaPlan) -> int:
    """The most separate runs of offsets among the buffers one buffer's lifetime meets."""
    placed = [p for p in plan.placements if p.nbytes]
    most = 0
    for this in placed:
        runs, top = 0, -1
        for offset, end in sorted((p.offset, p.offset + p.nbytes) for p in placed
                                  if p.first_step <= this.last_step
                                  and this.first_step <= p.last_step and p is not this):
            runs += offset > top
            top = max(top, end)
        most = max(most, runs)
    return most


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alignment", [1, 64])
def test_fragmented_placements_match_the_reference(seed: int, alignment: int) -> None:
    graph = many_runs(seed, 400).build(["y"])
    model = build_memory_model(graph, sizes_of(graph), {})
    plan = plan_arena(model, alignment=alignment)
    assert_reference(plan)
    # buffers meet 48 or more separate runs in the plan: the numpy search was exercised
    assert most_runs_met(plan) >= _VECTORIZE_FROM


# model -> (its live activation peak in tensors of TENSOR_BYTES, worked by hand)
WIDE = {
    # every Relu output is a graph output: all live at the end
    "outputs": WIDTH,
    # inputs are residents; the running sum is two tensors at each Add (read one, make one)
    "inputs": 2,
    # one node: residents in, one tensor out ([2, 8] summed elementwise)
    "sum-inputs": 1,
    # one node: residents in, one [2, 8 * WIDTH] tensor out
    "concat-inputs": WIDTH,
    # one node: WIDTH outputs of [2, 1] each (x is [batch, WIDTH]): 8 bytes each
    "split-outputs": WIDTH // 8,
    # each If reads the last one's result and makes the next: two live at a step
    "if-arms": 2,
    # a chain of calls (each one Relu): two live at a step
    "functions": 2,
}


@pytest.mark.parametrize("name", sorted(WIDE))
def test_wide_models_plan_as_the_reference(name: str, tmp_path: Path) -> None:
    count = min(WIDTH, 4_000) if name != "functions" else 1_000  # 4,096 functions at most
    path = tmp_path / "model.onnx"
    path.write_bytes(hostile.BUILDERS[name](count).SerializeToString())
    plan = graphmem.analyze_onnx(path, batch=2, runtime=None).arena
    assert plan is not None
    expected_peak = WIDE[name] * TENSOR_BYTES
    if name == "functions":
        expected_peak = 2 * TENSOR_BYTES
    assert plan.live_activation_peak_bytes == expected_peak
    assert_reference(plan)
