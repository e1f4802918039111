"""The arena plan by its definition, the slow way: the reference graphmem/passes/arena.py must
equal buffer for buffer (tests/test_arena_reference.py).

Greedy by size (largest first, ties by first step, then buffer index), each buffer at the
start of the smallest gap that fits it among ALL placed buffers whose lifetimes intersect its
own, listed one by one and sorted by offset (ties: the lowest gap); with none that fits,
above the highest of them. Quadratic in the buffers live together, which is why graphmem does
not plan this way; nothing here is shared with the planner.
"""

from __future__ import annotations

from collections.abc import Sequence


def reference_offsets(sizes: Sequence[int], spans: Sequence[tuple[int, int]],
                      alignment: int = 1) -> list[int]:
    """The offset of every buffer (0 for an empty one)."""
    offsets = [0] * len(sizes)
    placed: list[int] = []
    ranked = sorted((b for b in range(len(sizes)) if sizes[b] > 0),
                    key=lambda b: (-sizes[b], spans[b][0], b))
    for buffer in ranked:
        first, last = spans[buffer]
        met = sorted((offsets[o], offsets[o] + sizes[o]) for o in placed
                     if spans[o][0] <= last and first <= spans[o][1])
        offsets[buffer] = _smallest_gap(met, sizes[buffer], alignment)
        placed.append(buffer)
    return offsets


def _smallest_gap(met: list[tuple[int, int]], size: int, alignment: int) -> int:
    """Gaps are the free stretches below the highest end: [top of everything lower, next
    start); a gap fits when its start rounded up to `alignment` leaves `size` bytes."""
    fits: list[tuple[int, int]] = []  # (gap length, rounded start)
    top = 0
    for start, end in met:
        rounded = -(-top // alignment) * alignment
        if start > top and rounded + size <= start:
            fits.append((start - top, rounded))
        top = max(top, end)
    if fits:
        return min(fits)[1]  # the smallest gap; equal lengths: the lowest (rounded starts rise)
    return -(-top // alignment) * alignment
