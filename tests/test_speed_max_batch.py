"""The largest-batch search stays between the batches it already knows (passes/max_batch.py):
the same answer as the plain gallop, in fewer runs where the start is far off."""

from __future__ import annotations

import random
from collections.abc import Callable

from graphmem.passes.max_batch import MaxBatchResult, _largest_fitting, find_max_batch
from graphmem.pipeline.planning import _device_line


def test_known_bounds_keep_the_answer() -> None:
    # every answer in [0, 60], every start, with and without known batches on either side
    for answer in range(61):
        def fits(batch: int, answer: int = answer) -> bool:
            return batch <= answer

        for start in range(0, 65, 3):
            assert _largest_fitting(fits, start, 64) == answer
            for fitting in (None, *range(0, answer + 1, 7)):
                for failing in (None, *range(answer + 1, 66, 9)):
                    assert _largest_fitting(fits, start, 64, fitting, failing) == answer


def test_a_known_failure_bounds_the_gallop() -> None:
    # a device total that grows in steps (an arena doubling its regions), as ort-cuda's does
    # on a 134-layer decoder: 36 GB up to batch 32, 72 GB up to 64, 142 GB after; the GPU
    # holds 80 GB, so 64 fits and 65 does not
    def total(batch: int) -> int:
        return 36 if batch <= 32 else 72 if batch <= 64 else 142

    runs: list[int] = []

    def counted(batch: int) -> int:
        runs.append(batch)
        return total(batch)

    # a line through the total at 78 with the live peak's slope starts the search at 26:
    # galloping up from there, 26 27 29 33 41 57 89 73 65 61 63 64 (12 runs) ...
    plain = find_max_batch("batch", 80, None, total, start=26)
    assert plain.max_batch == 64 and plain.probes == 12
    # ... knowing 78 fails: 26 27 29, then bisect (29, 78): 53 65 59 62 63 64 (9 runs + 78)
    bounded = find_max_batch("batch", 80, None, counted, start=26, known={78: 142})
    assert bounded.max_batch == 64 and bounded.peak_at_next_bytes == 142
    assert runs == [26, 27, 29, 53, 65, 59, 62, 63, 64] and bounded.probes == 10


def test_a_start_near_the_answer_still_takes_two_runs() -> None:
    runs: list[int] = []

    def peak(batch: int) -> int:
        runs.append(batch)
        return 1000 * batch

    # 100 fits 100,000 and 101 does not: the start's neighbour decides, the bound unused
    result = find_max_batch("batch", 100_000, None, peak, start=100, known={400: 400_000})
    assert result.max_batch == 100 and runs == [100, 101]


def test_random_monotone_totals_agree_with_the_plain_search() -> None:
    rng = random.Random(27)
    for _ in range(300):
        steps = sorted(rng.sample(range(1, 500), 6))
        levels = sorted(rng.sample(range(1, 10_000), 7))

        def total(batch: int, steps: list[int] = steps, levels: list[int] = levels) -> int:
            return levels[sum(batch > s for s in steps)] + batch

        limit_bytes = rng.randrange(1, 11_000)
        start = rng.randrange(0, 600)
        seed = rng.randrange(1, 600)
        plain = find_max_batch("batch", limit_bytes, None, total, limit=600, start=start)
        bounded = find_max_batch("batch", limit_bytes, None, total, limit=600, start=start,
                                 known={seed: total(seed)})
        assert bounded.max_batch == plain.max_batch
        assert bounded.peak_at_next_bytes == plain.peak_at_next_bytes


class _Totals:
    """A DeviceTotalProbe's `total` on a given function: each batch run once, as there."""

    def __init__(self, total: Callable[[int], int]) -> None:
        self.function, self.runs = total, list[int]()

    def total(self, batch: int) -> int:
        if batch not in self.runs:
            self.runs.append(batch)
        return self.function(batch)


def test_the_line_through_two_runs_starts_near_a_staircase_answer() -> None:
    # the onnx.helper decoder's device totals (in MB, rounded): 35,000 at batch 1, 69,500 up
    # to 16, 104,000 from 17, 105,000 from 22; the GPU holds 85,900, so 16 fits, 17 does not
    def total(batch: int) -> int:
        return 35_000 if batch == 1 else 69_500 if batch <= 16 else 104_000 if batch < 22 \
            else 105_000

    guess = MaxBatchResult("batch", 24, None, 85_900, 84_355, 86_536, 2)  # the live peak's
    # the live peak's slope (2,181 per batch) from 105,000 at 24 crosses 85,900 at 15.2:
    # 24, then 15 16 18 17 (5 runs)
    line = _device_line(guess, _Totals(total))  # type: ignore[arg-type]
    assert line is not None and line(15) <= 85_900 < line(16)
    # through (1, 35,000) too: slope (105,000 - 35,000) / 23 = 3,043 a batch, crossing
    # 85,900 at 1 + 50,900 / 3,043 = 17.7: 24, then 17 16 (3 runs)
    probe = _Totals(total)
    line = _device_line(guess, probe, (1, 35_000))  # type: ignore[arg-type]
    assert line is not None and line(17) <= 85_900 < line(18)
    result = find_max_batch("batch", 85_900, line, probe.total, start=24,
                            known={24: probe.total(24)})
    assert result.max_batch == 16 and probe.runs == [24, 17, 16]
