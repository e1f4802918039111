"""The checkpoint search: the covering knapsack against hand-solved cases and brute force, the
re-analysis loop, and the candidate modules of a real traced step."""

from __future__ import annotations

import itertools
import random

import pytest

from graphmem import analyze_torch
from graphmem.passes.dims import value_bytes
from graphmem.suggest.candidates import SegmentCandidate, find_candidates
from graphmem.suggest.search import (
    PlanOutcome,
    Reanalyze,
    cheapest_covering,
    plan_checkpoints,
)
from tests.helpers.torch_nets import MLP


def seg(path: str, saved_bytes: int, flops: int, step: int) -> SegmentCandidate:
    return SegmentCandidate(path, 2, step, step, saved_bytes, flops, True)


A = seg("a", 100, 10, 0)
B = seg("b", 60, 3, 1)
C = seg("c", 50, 4, 2)


def paths(chosen: tuple[SegmentCandidate, ...] | None) -> tuple[str, ...] | None:
    return None if chosen is None else tuple(c.path for c in chosen)


def test_knapsack_hand_solved_cases() -> None:
    # need 100: {a} saves 100 for 10 FLOPs, {b, c} saves 110 for 3 + 4 = 7: {b, c} wins
    assert paths(cheapest_covering([A, B, C], 100)) == ("b", "c")
    # need 111: {b, c} saves only 110; {a, b} 160 for 13, {a, c} 150 for 14: {a, b}
    assert paths(cheapest_covering([A, B, C], 111)) == ("a", "b")
    # need 60: {b} exactly (3 FLOPs) beats {c} (50 < 60) and {a} (10 FLOPs)
    assert paths(cheapest_covering([A, B, C], 60)) == ("b",)
    # nothing needed: nothing chosen; more than all of them save (210): impossible
    assert paths(cheapest_covering([A, B, C], 0)) == ()
    assert cheapest_covering([A, B, C], 211) is None


def test_knapsack_ties_go_to_the_earlier_module() -> None:
    # two identical blocks, one needed: the earlier one's recomputation runs later in backward
    first, second = seg("blocks.0", 80, 5, 0), seg("blocks.1", 80, 5, 7)
    assert paths(cheapest_covering([second, first], 50)) == ("blocks.0",)


def brute_force_flops(candidates: list[SegmentCandidate], need: int) -> int | None:
    best = None
    for size in range(len(candidates) + 1):
        for subset in itertools.combinations(candidates, size):
            if sum(c.saved_bytes for c in subset) >= need:
                flops = sum(c.forward_flops for c in subset)
                best = flops if best is None else min(best, flops)
    return best


def test_knapsack_matches_brute_force_on_random_instances() -> None:
    # needs up to 256 bytes: one knapsack unit is one byte, so the DP is exact
    rng = random.Random(6)
    for _ in range(200):
        candidates = [seg(f"m{i}", rng.randint(1, 120), rng.randint(1, 50), i)
                      for i in range(rng.randint(1, 7))]
        need = rng.randint(1, 256)
        chosen = cheapest_covering(candidates, need)
        expected = brute_force_flops(candidates, need)
        if expected is None:
            assert chosen is None
            continue
        assert chosen is not None
        assert sum(c.saved_bytes for c in chosen) >= need
        assert sum(c.forward_flops for c in chosen) == expected


def test_knapsack_with_coarse_units_still_covers_the_need() -> None:
    # 3 GiB needed from 1 GiB-ish blocks: units are need/256 bytes, rounded down per module,
    # so whatever it picks saves at least the need
    gib = 1 << 30
    blocks = [seg(f"b{i}", gib + 12345 * i, 100 + i, i) for i in range(6)]
    chosen = cheapest_covering(blocks, 3 * gib)
    assert chosen is not None and len(chosen) == 3
    assert sum(c.saved_bytes for c in chosen) >= 3 * gib


def fake_reanalysis(base_peak: int, bump: int, candidates: list[SegmentCandidate]
                    ) -> Reanalyze:
    """Peak = base - first-order saving + `bump` (the recomputation's transient) when any
    module is checkpointed; FLOPs = their forward FLOPs."""
    by_path = {c.path: c for c in candidates}

    def reanalyze(modules: tuple[str, ...]) -> PlanOutcome:
        chosen = [by_path[m] for m in modules]
        saved = sum(c.saved_bytes for c in chosen)
        peak = base_peak - saved + (bump if chosen else 0)
        return PlanOutcome(modules, peak, sum(c.forward_flops for c in chosen), None)

    return reanalyze


def test_plan_asks_for_more_when_the_reanalysed_peak_is_over_budget() -> None:
    # base 1000, budget 900: need 100 -> {b, c} (7 FLOPs) to a first order, but the
    # re-analysis adds a 20-byte recompute bump: 1000 - 110 + 20 = 910 > 900. The shortfall
    # (10) is asked for on top: need 110 -> {b, c} again (saves 110)... still 910; need 120
    # -> {a, b} (13 FLOPs): 1000 - 160 + 20 = 860 <= 900
    reanalyze = fake_reanalysis(1000, 20, [A, B, C])
    plan = plan_checkpoints([A, B, C], 1000, 900, reanalyze)
    assert plan.chosen is not None
    assert plan.chosen.modules == ("a", "b")
    assert plan.chosen.peak_bytes == 860 and plan.chosen.extra_flops == 13
    # every module: 1000 - 210 + 20 = 810, the per-block baseline
    assert plan.baseline is not None and plan.baseline.peak_bytes == 810
    # the curve starts at the unchanged step; FLOPs rise and peaks fall along it (a Pareto
    # front). Its plans: a quarter of the 210 bytes (52): {b} 3 FLOPs, 1000 - 60 + 20 = 960;
    # half (105): {b, c} 7 FLOPs, 910; three quarters (157): {a, b} 13 FLOPs, 860 (the
    # chosen one); all: {a, b, c} 17 FLOPs, 810
    assert plan.curve == (PlanOutcome((), 1000, 0, None),
                          PlanOutcome(("b",), 960, 3, None),
                          PlanOutcome(("b", "c"), 910, 7, None),
                          PlanOutcome(("a", "b"), 860, 13, None),
                          PlanOutcome(("a", "b", "c"), 810, 17, None))


def test_plan_reports_the_lowest_peak_when_nothing_fits() -> None:
    # budget 700 < 1000 - 210 + 20 = 810, the best any set can do
    reanalyze = fake_reanalysis(1000, 20, [A, B, C])
    plan = plan_checkpoints([A, B, C], 1000, 700, reanalyze)
    assert plan.chosen is None
    assert plan.best_effort is not None and plan.best_effort.peak_bytes == 810


@pytest.mark.torch
def test_candidates_of_a_traced_mlp() -> None:
    analysis = analyze_torch(MLP(), [(64, 32)], train=True, optimizer="sgd", suggest=False,
                             plan=False)
    sizes = value_bytes(analysis.graph, analysis.dims)
    found = {c.path: c for c in find_candidates(analysis.graph, analysis.costs, sizes)}
    # each block makes two saved activations that stay inside it: GELU's input and the second
    # Linear's input, [64, 128] fp32 each: 2 * 64 * 128 * 4 = 65,536 bytes. Its own input
    # (saved by its first Linear) comes from outside, its output is saved by the next block
    for i in range(4):
        block = found[f"blocks.{i}"]
        assert block.depth == 2
        assert block.saved_bytes == 65_536
        # recomputing it costs at least its two matmuls: 2 * (64 * 32 * 128) * 2 = 1,048,576
        assert block.forward_flops >= 1_048_576
    assert [found[f"blocks.{i}"].first_step for i in range(4)] == sorted(
        found[f"blocks.{i}"].first_step for i in range(4))
    # the blocks run one after another: each block's input is a single-tensor cut
    assert all(found[f"blocks.{i}"].single_tensor_input for i in range(1, 4))


@pytest.mark.torch
def test_candidates_that_update_batchnorm_statistics_are_marked() -> None:
    # BatchNorm in training adds 1 to num_batches_tracked in place (aten add_ on a buffer):
    # recomputing such a module in backward updates its statistics a second time
    from tests.models import TinyCNN

    analysis = analyze_torch(TinyCNN(), [(2, 3, 16, 16)], train=True, optimizer="sgd",
                             suggest=False, plan=False)
    sizes = value_bytes(analysis.graph, analysis.dims)
    found = {c.path: c for c in find_candidates(analysis.graph, analysis.costs, sizes)}
    assert found["stem"].updates_buffers and found["block.0"].updates_buffers
    mlp = analyze_torch(MLP(), [(8, 32)], train=True, suggest=False, plan=False)
    mlp_sizes = value_bytes(mlp.graph, mlp.dims)
    assert not any(c.updates_buffers for c in find_candidates(mlp.graph, mlp.costs, mlp_sizes))
