"""The batch search of --suggest analyses the model at each batch it tries (a traced step
on one graph scaled to the batch, tests/test_batch_scaling.py; else re-traced or re-bound):
the line guiding it is redrawn near the answer (suggest/driver.py `_secant_points`), so it
tries few batches, and the answer stays find_max_batch's exact one."""

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


def test_each_change_is_analysed_once() -> None:
    """The AMP card and the AMP batch search's probe at the analysed batch are one re-trace."""
    from graphmem.suggest.driver import Change, SuggestInputs, _memoized

    seen: list[Change] = []

    def reanalyze(change: Change) -> None:
        seen.append(change)

    traced = SuggestInputs(traced=True, training=True, amp=None, batch=8, budget_bytes=None)
    memoized = _memoized(reanalyze, traced)
    for change in (Change("bf16"), Change("bf16", batch=8), Change("bf16", batch=4),
                   Change("bf16", batch=4), Change(None, batch=8)):
        memoized(change)
    # only the step at its own batch is kept (each analysis holds a graph); the batch search
    # keeps its own peaks
    assert seen == [Change("bf16"), Change("bf16", batch=4), Change("bf16", batch=4),
                    Change(None)]
    onnx = _memoized(reanalyze, SuggestInputs(traced=False, training=True, amp=None, batch=8,
                                              budget_bytes=None))
    seen.clear()
    onnx(Change("bf16"))
    onnx(Change("bf16", batch=8))  # an ONNX graph's batch is bound another way: kept
    assert seen == [Change("bf16"), Change("bf16", batch=8)]


def test_the_first_line_reaches_to_the_largest_batch_searched() -> None:
    """Where the optimizer step makes the peak at small batches the curve is flat there
    (BERT-base: 4 KiB between batch 4 and 8): a line through half the batch and the batch
    only points far up, and costs one analysis more than starting at the far end."""

    def flat_then_affine(batch: int) -> int:
        return 300_000 + batch + 100 * max(batch - 8, 0)

    def search(low: int, high: int) -> tuple[int | None, list[int]]:
        calls: dict[int, int] = {}

        def exact(batch: int) -> int:
            calls[batch] = flat_then_affine(batch)
            return calls[batch]

        low, high = _secant_points(exact, low, high, BUDGET)
        slope = (exact(high) - exact(low)) / (high - low)
        result = find_max_batch("batch", BUDGET, lambda b: int(exact(low) + slope * (b - low)),
                                exact, MAX_SUGGESTED_BATCH)
        return result.max_batch, sorted(calls)

    assert search(4, 8) == (6_938, [4, 8, 6_938, 6_939, MAX_SUGGESTED_BATCH])
    assert search(8, MAX_SUGGESTED_BATCH) == (6_938, [8, 6_938, 6_939, MAX_SUGGESTED_BATCH])
    # the bent curve (steeper below 8) costs no more from the far end either
    assert _search(8, MAX_SUGGESTED_BATCH, refine=True) == (9_660, 4)
