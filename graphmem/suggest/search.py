"""Which modules to checkpoint so the training peak fits a budget at the least recompute.

The search works on candidate modules (graphmem/suggest/candidates.py), one module
depth at a time (modules at one depth never nest, and a depth is what a user wraps: every
block, every attention layer). For a needed saving it solves a covering knapsack exactly by
dynamic programming:

    minimise  sum(forward_flops[m] for m in chosen)
    subject to sum(saved_bytes[m] for m in chosen) >= need_bytes

with saved bytes counted in units of need/`_UNITS` (a solution's true first-order saving is
checked to be at least the need). Ties go to modules earlier in the forward pass: their
recomputation runs late in backward, when later modules' activations are already freed.

The first-order saving ignores the recomputation's own transient memory, so every plan is
re-analysed (`Reanalyze`: the whole analysis of the model with those modules checkpointed)
and, when the re-analysed peak is still over budget, the search asks for the shortfall more
and tries again. Only re-analysed numbers are reported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from graphmem.suggest.candidates import SegmentCandidate

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
    """The least-FLOPs set whose saved bytes add up to `need_bytes`; None if none can.

    Bytes are counted in units of need/_UNITS, rounded down per module; each module loses less
    than a unit to rounding, so sets within len(candidates) units of the target are checked
    in true bytes too (three 1 GiB blocks cover 3 GiB though their units fall one short).
    """
    if need_bytes <= 0:
        return ()
    if sum(c.saved_bytes for c in candidates) < need_bytes:
        return None
    unit = -(-need_bytes // _UNITS)
    target = -(-need_bytes // unit)
    # best[j]: (flops, sum of first steps, chosen indexes, true bytes) reaching j units
    best: list[tuple[int, int, tuple[int, ...], int] | None] = [None] * (target + 1)
    best[0] = (0, 0, (), 0)
    for index, candidate in enumerate(candidates):
        units = candidate.saved_bytes // unit
        for reached in range(target, -1, -1):  # descending: each candidate used once
            current = best[reached]
            if current is None:
                continue
            new = min(target, reached + units)
            option = (current[0] + candidate.forward_flops, current[1] + candidate.first_step,
                      (*current[2], index), current[3] + candidate.saved_bytes)
            known = best[new]
            if known is None or option[:2] < known[:2]:
                best[new] = option
    covering = [state for state in best[max(target - len(candidates), 0):]
                if state is not None and state[3] >= need_bytes]
    if not covering:
        return None
    found = min(covering, key=lambda state: state[:2])
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
        for at_depth, at_group in sorted(by_depth.items()):
            plan = _fit_budget(at_group, base_peak_bytes, budget_bytes, measured)
            if plan is not None and (chosen is None or plan.extra_flops < chosen.extra_flops):
                chosen, chosen_depth = plan, at_depth
    depth = chosen_depth if chosen_depth is not None else _lowest_peak_depth(by_depth, measured)
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


def _lowest_peak_depth(by_depth: dict[int, list[SegmentCandidate]], measured: Reanalyze
                       ) -> int | None:
    """The depth whose every-module plan re-analyses to the lowest peak (then fewest FLOPs).

    Re-analysed, not first-order: checkpointing one module that spans the whole model
    (`blocks`) saves all its activations to a first order and nothing in fact, since backward
    recomputes them all at once.
    """
    if not by_depth:
        return None

    def key(depth: int) -> tuple[int, int, int]:
        outcome = measured(tuple(c.path for c in by_depth[depth]))
        return outcome.peak_bytes, outcome.extra_flops, depth

    return min(by_depth, key=key)


def _curve(group: list[SegmentCandidate], measured: Reanalyze, chosen: PlanOutcome | None
           ) -> tuple[PlanOutcome, ...]:
    """Re-analysed plans for a range of needed savings at one depth, cheapest first; a plan
    that costs more FLOPs than another without a lower peak is left out."""
    total = sum(c.saved_bytes for c in group)
    points: dict[tuple[str, ...], PlanOutcome] = {(): measured(())}
    if chosen is not None:
        points[chosen.modules] = chosen
    for fraction in CURVE_FRACTIONS:
        covering = cheapest_covering(group, int(total * fraction))
        if covering is not None:
            modules = tuple(c.path for c in covering)
            points[modules] = measured(modules)
    front: list[PlanOutcome] = []  # the Pareto front: each point lowers the peak further
    for point in sorted(points.values(), key=lambda p: (p.extra_flops, p.peak_bytes)):
        if not front or point.peak_bytes < front[-1].peak_bytes:
            front.append(point)
    return tuple(front)
