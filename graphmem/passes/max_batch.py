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

from collections.abc import Callable, Mapping
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
                   basis: str = "live-tensor peak",
                   known: Mapping[int, int] | None = None) -> MaxBatchResult:
    """Largest batch b <= limit with exact(b) <= limit_bytes, using `estimate` as a guide
    (or starting at `start`, an earlier answer). `known`: exact(b) at batches the caller
    already computed (counted as probes): the search stays between the largest that fits
    and the smallest that does not.

    Without either the search gallops up from batch 1 on `exact` alone.
    """
    memo: dict[int, int] = dict(known or {})

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
    fitting = [b for b, peak_bytes in memo.items() if peak_bytes <= limit_bytes]
    failing = [b for b, peak_bytes in memo.items() if peak_bytes > limit_bytes]
    best = _largest_fitting(fits, guess, limit, max(fitting, default=None),
                            min(failing, default=None))
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


def _largest_fitting(fits: Callable[[int], bool], start: int, limit: int,
                     fitting: int | None = None, failing: int | None = None) -> int:
    """The largest b in [0, limit] with fits(b), for fits true up to some b and false after;
    `fitting` and `failing`: batches already known to fit and not to (or None).

    Gallops from `start` (up if it fits, else down) and bisects, so it costs
    O(log |answer - start|) calls: two when `start` is the answer. Where a known batch
    already bounds the answer on the side the gallop heads to, the gallop takes two steps
    (the start off by one or two) and then bisects between what is known: the doubling is
    there to find such a bound, and a start far off (a device total that grows in steps, not
    on the line that guessed the start) would otherwise spend a probe per doubling.
    """
    low_bound = 0 if fitting is None else fitting
    high_bound = limit + 1 if failing is None else failing
    start = min(max(start, low_bound), high_bound - 1)
    if fits(start):
        low, step, free = start, 1, failing is None
        while low + step < high_bound and (free or step <= _BOUNDED_STEPS) and fits(low + step):
            low, step = low + step, step * 2
        high = min(low + step, high_bound) if free or step <= _BOUNDED_STEPS else high_bound
    else:
        high, step, free = start, 1, fitting is None
        while (high - step > low_bound and (free or step <= _BOUNDED_STEPS)
               and not fits(high - step)):
            high, step = high - step, step * 2
        low = max(high - step, low_bound) if free or step <= _BOUNDED_STEPS else low_bound
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


_BOUNDED_STEPS = 2  # gallop steps (1, then 2) taken where a known batch bounds the answer
