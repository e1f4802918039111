"""The batch search of --suggest re-analyses (re-traces, on PyTorch) the model at each batch
it tries: the line guiding it is redrawn near the answer (suggest/driver.py `_secant_points`),
so it tries few batches, and the answer stays find_max_batch's exact one."""

from __future__ import annotations

from graphmem.passes.max_batch import find_max_batch
from graphmem.suggest.driver import MAX_SUGGESTED_BATCH, _secant_points

BUDGET = 1_000_000


def _bent_peak(batch: int) -> int:
    """Steeper below batch 8 (the optimizer step's temporaries), affine after: 10,000 +
    3,000 * min(b, 8) + 100 * b. The largest batch within BUDGET: 34,000 + 100 * b <= 10**6,
    b = 9,660."""
    return 10_000 + 3_000 * min(batch, 8) + 100 * batch


def _search(low: int, high: int, refine: bool) -> tuple[int | None, int]:
    calls: dict[int, int] = {}

    def exact(batch: int) -> int:
        calls[batch] = _bent_peak(batch)
        return calls[batch]

    if refine:
        low, high = _secant_points(exact, low, high, BUDGET)
    slope = (exact(high) - exact(low)) / (high - low)
    result = find_max_batch("batch", BUDGET, lambda b: int(exact(low) + slope * (b - low)),
                            exact, MAX_SUGGESTED_BATCH)
    return result.max_batch, len(calls)


def test_the_redrawn_line_finds_the_same_batch_with_fewer_analyses() -> None:
    plain, plain_calls = _search(4, 8, refine=False)
    refined, refined_calls = _search(4, 8, refine=True)
    assert plain == refined == 9_660
    # the line through 4 and 8 (slope 3,100) crosses the budget at 317: the gallop up from
    # there to 9,660 costs about 2 * log2(9,660 - 317) analyses; the redrawn line lands on it
    assert refined_calls <= 6 < plain_calls


def test_a_flat_or_falling_line_is_left_as_it_is() -> None:
    def flat(batch: int) -> int:
        return 500

    assert _secant_points(flat, 4, 8, BUDGET) == (4, 8)


def test_the_guess_stays_within_the_searched_range() -> None:
    seen: list[int] = []

    def tiny(batch: int) -> int:  # fits at any batch: the crossing is far past the limit
        seen.append(batch)
        return batch

    _, high = _secant_points(tiny, 4, 8, BUDGET * 10**6)
    assert max(seen) <= MAX_SUGGESTED_BATCH and high <= MAX_SUGGESTED_BATCH
