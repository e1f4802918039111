"""The largest batch whose peak fits a limit, exactly: on a GPU, the largest whose device
total fits its capacity (graphmem/pipeline/verdict.py: the runtime model re-run at each batch
probed, the live-peak answer only the starting guess); elsewhere a live-tensor budget.

With the batch dim free (every other dim bound), the peak is the max of a few polynomials in
batch (`LivenessResult.peak_candidates`): the step that peaks can change with batch, so the
max over all candidates is the peak at any batch. Their coefficients are sizes, nonnegative,
so the peak grows with batch and a binary search on exact integer evaluation finds the
largest batch that fits. That answer is then checked by the bound analysis (`exact`: what
`graphmem analyze --batch N` computes, see `planning.DimProbe`): it must fit at max_batch and
not at max_batch + 1. If a check disagrees (a size the symbolic graph could not follow, say),
the search continues on the bound analysis alone, galloping from the estimate, until both
checks hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from graphmem.core.conventions import MAX_DIM_VALUE

PeakAt = Callable[[int], int]  # batch value -> peak bytes


@dataclass(frozen=True)
class MaxBatchResult:
    batch_dim: str | None
    max_batch: int | None  # None: not computed (see reason); 0: batch 1 does not fit
    reason: str | None  # why max_batch is None or 0, or why it is only a floor
    limit_bytes: int  # what the solved number must not exceed (a GPU's capacity)
    peak_at_max_bytes: int | None  # the solved number (see basis) at max_batch
    peak_at_next_bytes: int | None  # ... and at max_batch + 1
    probes: int  # bound analyses (or runtime models) run to check the answer
    basis: str = "live-tensor peak"  # what peak_at_* are: "ort-cuda device total", ...


def not_solved(batch_dim: str | None, limit_bytes: int, reason: str,
               basis: str = "live-tensor peak") -> MaxBatchResult:
    return MaxBatchResult(batch_dim, None, reason, limit_bytes, None, None, 0, basis)


def find_max_batch(batch_dim: str, limit_bytes: int, estimate: PeakAt | None, exact: PeakAt,
                   limit: int = MAX_DIM_VALUE, start: int | None = None,
                   basis: str = "live-tensor peak") -> MaxBatchResult:
    """Largest batch b <= limit with exact(b) <= limit_bytes, using `estimate` as a guide
    (or starting at `start`, an earlier answer).

    Without either the search gallops up from batch 1 on `exact` alone.
    """
    memo: dict[int, int] = {}

    def peak(batch: int) -> int:
        if batch not in memo:
            memo[batch] = exact(batch)
        return memo[batch]

    def fits(batch: int) -> bool:
        return batch == 0 or peak(batch) <= limit_bytes

    guess = 1 if start is None else min(max(start, 0), limit)
    if estimate is not None:
        guess = _largest_fitting(lambda b: b == 0 or estimate(b) <= limit_bytes, 0, limit)
        if guess == limit and estimate(1) == estimate(limit):
            guess = 1  # the estimate does not depend on batch: start the bound search at 1
    best = _largest_fitting(fits, guess, limit)
    reason = None
    if best == 0:
        reason = f"even {batch_dim}=1 does not fit"
    elif best == limit:
        reason = f"fits even at {batch_dim}={limit}, the largest value graphmem considers"
    return MaxBatchResult(
        batch_dim=batch_dim,
        max_batch=best,
        reason=reason,
        limit_bytes=limit_bytes,
        peak_at_max_bytes=peak(best) if best else None,
        peak_at_next_bytes=peak(best + 1) if best < limit else None,
        probes=len(memo),
        basis=basis,
    )


def _largest_fitting(fits: Callable[[int], bool], start: int, limit: int) -> int:
    """The largest b in [0, limit] with fits(b), for fits true up to some b and false after.

    Gallops from `start` (up if it fits, else down) and bisects, so it costs
    O(log |answer - start|) calls: two when `start` is the answer.
    """
    if fits(start):
        low, step = start, 1
        while low + step <= limit and fits(low + step):
            low, step = low + step, step * 2
        high = min(low + step, limit + 1)  # fails (or is past the limit)
    else:
        high, step = start, 1
        while high - step >= 1 and not fits(high - step):
            high, step = high - step, step * 2
        low = max(high - step, 0)  # fits (0 always does)
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low
