"""Which modules to checkpoint so the training peak fits a budget at the least recompute.

The search works on candidate modules (graphmem/passes/checkpoint_segments.py), one module
depth at a time (modules at one depth never nest, and a depth is what a user wraps: every
block, every attention layer). For a needed saving it solves a covering knapsack exactly by
dynamic programming:

    minimise  sum(forward_flops[m] for m in chosen)
    subject to sum(saved_bytes[m] for m in chosen) >= need_bytes

with saved bytes counted in units of need/`_UNITS` rounded down (so a solution's true first-
order saving is at least the need). Ties go to modules earlier in the forward pass: their
recomputation runs late in backward, when later modules' activations are already freed.

The first-order saving ignores the recomputation's own transient memory, so every plan is
re-analysed (`Reanalyze`: the whole analysis of the model with those modules checkpointed)
and, when the re-analysed peak is still over budget, the search asks for the shortfall more
and tries again. Only re-analysed numbers are reported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from graphmem.passes.checkpoint_segments import SegmentCandidate

_UNITS = 256  # resolution of the knapsack's byte axis
_MAX_ROUNDS = 6  # re-analyses per depth while closing a shortfall
CURVE_FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # of a depth's total first-order saving


@dataclass(frozen=True)
class PlanOutcome:
    """A checkpoint plan as the re-analysis saw it."""

    modules: tuple[str, ...]
    peak_bytes: int
    extra_flops: int  # total FLOPs of the step minus the unmodified step's
    extra_time_s: float | None  # roofline latency difference on the GPU, when one is given


Reanalyze = Callable[[tuple[str, ...]], PlanOutcome]


@dataclass(frozen=True)
class CheckpointPlan:
    budget_bytes: int | None
    base_peak_bytes: int
    chosen: PlanOutcome | None  # the cheapest re-analysed plan under budget; None: none found
    best_effort: PlanOutcome | None  # the lowest peak found, when nothing fits
    baseline: PlanOutcome | None  # every candidate at the chosen depth (per-block segments)
    curve: tuple[PlanOutcome, ...]  # memory vs recompute, by extra FLOPs
    depth: int | None


def cheapest_covering(candidates: Sequence[SegmentCandidate], need_bytes: int
                      ) -> tuple[SegmentCandidate, ...] | None:
    """The least-FLOPs set whose saved bytes add up to `need_bytes`; None if none can."""
    if need_bytes <= 0:
        return ()
    if sum(c.saved_bytes for c in candidates) < need_bytes:
        return None
    unit = -(-need_bytes // _UNITS)
    target = -(-need_bytes // unit)
    # best[j]: (flops, sum of first steps, chosen indexes) reaching at least j units
    best: list[tuple[int, int, tuple[int, ...]] | None] = [None] * (target + 1)
    best[0] = (0, 0, ())
    for index, candidate in enumerate(candidates):
        units = candidate.saved_bytes // unit
        for reached in range(target, -1, -1):  # descending: each candidate used once
            current = best[reached]
            if current is None:
                continue
            new = min(target, reached + units)
            option = (current[0] + candidate.forward_flops,
                      current[1] + candidate.first_step, (*current[2], index))
            if best[new] is None or option[:2] < best[new][:2]:  # type: ignore[index]
                best[new] = option
    found = best[target]
    if found is None:
        return None
    return tuple(candidates[i] for i in sorted(found[2]))


def plan_checkpoints(candidates: Sequence[SegmentCandidate], base_peak_bytes: int,
                     budget_bytes: int | None, reanalyze: Reanalyze) -> CheckpointPlan:
    """Search every depth for the cheapest re-analysed plan under budget; and the curve."""
    by_depth: dict[int, list[SegmentCandidate]] = {}
    for candidate in candidates:
        by_depth.setdefault(candidate.depth, []).append(candidate)
    memo: dict[tuple[str, ...], PlanOutcome] = {}

    def measured(modules: tuple[str, ...]) -> PlanOutcome:
        if modules not in memo:
            memo[modules] = reanalyze(modules)
        return memo[modules]

    chosen: PlanOutcome | None = None
    chosen_depth: int | None = None
    if budget_bytes is not None and base_peak_bytes > budget_bytes:
        for depth, group in sorted(by_depth.items()):
            plan = _fit_budget(group, base_peak_bytes, budget_bytes, measured)
            if plan is not None and (chosen is None or plan.extra_flops < chosen.extra_flops):
                chosen, chosen_depth = plan, depth
    depth = chosen_depth if chosen_depth is not None else _most_saving_depth(by_depth)
    group = by_depth.get(depth, []) if depth is not None else []
    baseline = measured(tuple(c.path for c in group)) if group else None
    curve = _curve(group, measured, chosen if chosen_depth == depth else None)
    best_effort = None
    if chosen is None and budget_bytes is not None and base_peak_bytes > budget_bytes and memo:
        best_effort = min(memo.values(), key=lambda p: (p.peak_bytes, p.extra_flops))
    return CheckpointPlan(budget_bytes, base_peak_bytes, chosen, best_effort, baseline, curve,
                          depth)


def _fit_budget(group: list[SegmentCandidate], base_peak_bytes: int, budget_bytes: int,
                measured: Reanalyze) -> PlanOutcome | None:
    need = base_peak_bytes - budget_bytes
    for _ in range(_MAX_ROUNDS):
        chosen = cheapest_covering(group, need)
        if chosen is None:
            break
        outcome = measured(tuple(c.path for c in chosen))
        if outcome.peak_bytes <= budget_bytes:
            return outcome
        need += outcome.peak_bytes - budget_bytes  # the recomputation's own bump
    everything = measured(tuple(c.path for c in group))
    return everything if everything.peak_bytes <= budget_bytes else None


def _most_saving_depth(by_depth: dict[int, list[SegmentCandidate]]) -> int | None:
    if not by_depth:
        return None
    return max(by_depth, key=lambda d: (sum(c.saved_bytes for c in by_depth[d]), -d))


def _curve(group: list[SegmentCandidate], measured: Reanalyze, chosen: PlanOutcome | None
           ) -> tuple[PlanOutcome, ...]:
    """Re-analysed plans for a range of needed savings at one depth, cheapest first."""
    total = sum(c.saved_bytes for c in group)
    points = {(): measured(())}
    if chosen is not None:
        points[chosen.modules] = chosen
    for fraction in CURVE_FRACTIONS:
        chosen = cheapest_covering(group, int(total * fraction))
        if chosen is not None:
            modules = tuple(c.path for c in chosen)
            points[modules] = measured(modules)
    return tuple(sorted(points.values(), key=lambda p: (p.extra_flops, p.peak_bytes)))
