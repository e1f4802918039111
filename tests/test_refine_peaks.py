"""The window search's running peak (passes/exact_schedule.py `_Peaks`): after any changes
to windows of a list of step totals, the same peak and first peak step as reading the whole
list (`max`, `list.index`), on random lists and windows, short lists and ties."""

from __future__ import annotations

import random

import pytest

from graphmem.passes.exact_schedule import _Peaks


@pytest.mark.parametrize("seed", range(60))
def test_peaks_follow_window_changes(seed: int) -> None:
    rng = random.Random(seed)
    steps = rng.choice([1, 2, 17, _Peaks.BLOCK - 1, _Peaks.BLOCK, _Peaks.BLOCK + 1, 1000])
    high = rng.choice([3, 1000])  # few values: many ties for the first peak step
    during = [rng.randint(0, high) for _ in range(steps)]
    peaks = _Peaks(during)
    for _ in range(50):
        assert peaks.peak() == max(during)
        assert peaks.first_peak_step() == during.index(max(during))
        width = rng.randint(1, min(16, steps))
        start = rng.randint(0, steps - width)
        during[start:start + width] = [rng.randint(0, high) for _ in range(width)]
        peaks.changed(start, start + width)
