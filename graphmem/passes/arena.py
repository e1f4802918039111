"""Static arena plan: give every activation an offset in one block of memory.

A runtime that plans memory ahead of time (TFLite's ArenaPlanner, XLA's
GlobalDecreasingSizeBestFitHeap) places each tensor at a fixed offset in one arena; tensors
whose lifetimes do not intersect may share addresses. graphmem plans the same way:

1. buffers (activation storages, see `passes/memory_model.py`) are sorted by size, largest first,
   ties by the step that allocates them (as TFLite's `CreateTensorAllocationVector` does);
2. each is placed at the best-fitting gap among the already placed buffers whose lifetimes
   intersect its own: the smallest gap it fits in, else above the highest of them (as TFLite's
   `SimpleMemoryArena::Allocate` does).

The arena size is the highest end offset. It is never below the live activation peak (at the
peak step all live buffers need distinct addresses); the difference is fragmentation,
reported as (arena - live activation peak) / arena. The no-reuse sum (every activation its own
memory) is the other extreme. Lifetimes are inclusive step ranges in the given order, the
liveness conventions (a graph output lives to the end).

The best fit depends on the buffers a lifetime meets only through the union of their offset
ranges, so the search keeps those unions, not lists of buffers (`_OccupancyIndex`): a segment
tree over the steps whose nodes hold the union of the buffers covering them and of the buffers
starting under them. A placement reads O(log steps) unions, each as long as the number of
separate runs it holds (few: long stretches of steps fill up, short ones hold few buffers),
where listing every buffer it meets was quadratic in a wide graph (10^5 graph outputs live
together: each met all the others). Memory split into many runs across one lifetime (tiny
buffers at a large alignment) is still read run by run. The plan is the same buffer for
buffer: tests/test_arena_reference.py checks it against the definition above, computed the
slow way.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import compress

import numpy as np

from graphmem.passes.memory_model import (
    MemoryModel,
    lifetimes,
    live_profile,
    step_events,
)

# Below this many intersecting buffers a plain loop is faster than numpy's call overhead.
_VECTORIZE_FROM = 48
# Steps per block of the interval index's start lists (see `_IntervalIndex`).
_BLOCK = 32


@dataclass(frozen=True)
class Placement:
    name: str
    offset: int
    nbytes: int
    first_step: int  # inclusive lifetime in the planned order
    last_step: int


@dataclass(frozen=True)
class ArenaPlan:
    arena_bytes: int
    live_activation_peak_bytes: int  # the most activation bytes live at one step
    no_reuse_bytes: int  # every activation in its own memory
    alignment: int
    placements: tuple[Placement, ...]  # one per buffer, in the model's buffer order

    @property
    def fragmentation(self) -> float:
        """(arena - live activation peak) / arena; 0 for an empty arena."""
        if self.arena_bytes == 0:
            return 0.0
        return (self.arena_bytes - self.live_activation_peak_bytes) / self.arena_bytes


def plan_arena(model: MemoryModel, order: Sequence[int] | None = None,
               alignment: int = 1) -> ArenaPlan:
    """Greedy-by-size best-fit offsets for every buffer of `model` run in `order`."""
    if alignment < 1:
        raise ValueError(f"alignment must be 1 or more, got {alignment}")
    if order is None:  # the model order: its sweep is the model's, found once
        events, during = model.model_order_sweep
    else:
        events = step_events(model, order)  # one walk for the lifetimes and the peak
        during, _ = live_profile(model, order, events)
    spans = lifetimes(model, events.order, events)
    sizes = model.buffer_bytes
    steps = max(len(events.order), 1)
    offsets = [0] * len(sizes)
    ends = [0] * len(sizes)  # offset + size of each placed buffer
    index = _OccupancyIndex(steps, top_level(spans, steps))
    meeting, add = index.meeting, index.add
    # largest first, ties by first step, then by buffer: two stable sorts on one key each
    # (the buffers come in order), with no key tuple made per buffer
    firsts = [first for first, _ in spans]
    ranked = sorted(compress(range(len(sizes)), sizes), key=firsts.__getitem__)  # sizes > 0
    ranked.sort(key=sizes.__getitem__, reverse=True)
    for buffer in ranked:
        first, last = spans[buffer]
        size = sizes[buffer]
        bounds, several = meeting(first, last)
        offset = offsets[buffer] = _gap_fit(bounds, several, size, alignment)
        ends[buffer] = end = offset + size
        add(first, last, offset, end)
    return ArenaPlan(
        arena_bytes=max(ends, default=0),
        # the most activation bytes live at one step (the memory-event sweep's peak)
        live_activation_peak_bytes=max(during, default=model.resident_bytes)
        - model.resident_bytes,
        no_reuse_bytes=sum(sizes),
        alignment=alignment,
        placements=_placements(model.buffer_names, offsets, sizes, spans),
    )


def _placements(names: Sequence[str], offsets: list[int], sizes: Sequence[int],
                spans: list[tuple[int, int]]) -> tuple[Placement, ...]:
    """One Placement per buffer, its fields stored in its dict in field order (the frozen
    dataclass's own __init__ sets its five fields one `object.__setattr__` at a time: a
    tenth of the plan; storing items is faster than `update` with keywords, which builds a
    dict of them first)."""
    new = object.__new__
    placements = []
    for name, offset, size, (first, last) in zip(names, offsets, sizes, spans, strict=True):
        placement = new(Placement)
        fields = placement.__dict__
        fields["name"] = name
        fields["offset"] = offset
        fields["nbytes"] = size
        fields["first_step"] = first
        fields["last_step"] = last
        placements.append(placement)
    return tuple(placements)


def _gap_fit(bounds: list[int], several: bool, size: int, alignment: int) -> int:
    """The best fit against the joint union of the runs in `bounds` (`_OccupancyIndex.
    meeting`'s: one or more unions' boundary lists one after another; `several` when more
    than one).

    Several unions' runs overlap; their joint union's gaps are read off the starts and the
    ends sorted apart, with no (start, end) pairs to build and sort: with the n starts
    s(1) <= ... <= s(n) and the ends e(1) <= ... <= e(n), a byte x is free when as many runs
    end at or below it as start at or below it, and those bytes are exactly the gaps
    [e(j), s(j+1)) with e(j) < s(j+1), and [0, s(1)): every gap `_best_fit` finds, in
    offset order, with the same lengths; the top is e(n). So the fit depends on the bytes
    the runs cover, not on how they are grouped into unions. tests/test_arena_gaps.py checks
    it against `_best_fit` on random runs."""
    if not bounds:
        return 0  # nothing placed meets it: the bottom
    if len(bounds) >= 2 * _VECTORIZE_FROM:
        runs = np.array(bounds, dtype=np.int64)
        return _best_fit_vectorized(runs[::2], runs[1::2], size, alignment)
    starts, ends = bounds[::2], bounds[1::2]
    if several:
        starts.sort()
        ends.sort()
    best_offset, best_gap = -1, -1
    current = 0
    if alignment == 1:
        for start, end in zip(starts, ends, strict=True):
            gap = start - current
            if gap >= size and (best_gap < 0 or gap < best_gap):
                best_offset, best_gap = current, gap
                if gap == size:
                    break  # a perfect fit: nothing beats it
            current = end
        return best_offset if best_offset >= 0 else ends[-1]
    for start, end in zip(starts, ends, strict=True):
        aligned = -(-current // alignment) * alignment
        gap = start - current
        if aligned + size <= start and (best_gap < 0 or gap < best_gap):
            best_offset, best_gap = aligned, gap
            if gap == size:
                break
        current = end
    return best_offset if best_offset >= 0 else _align(ends[-1], alignment)


def _best_fit(placed: Iterable[tuple[int, int]], size: int, alignment: int) -> int:
    """The start of the smallest gap between `placed` (sorted by offset) that fits `size`."""
    if alignment == 1:
        return _best_fit_unaligned(placed, size)
    return _best_fit_aligned(placed, size, alignment)


def _best_fit_aligned(placed: Iterable[tuple[int, int]], size: int, alignment: int) -> int:
    best_offset, best_gap = -1, -1
    current = 0  # end of the placed memory seen so far
    for offset, end in placed:
        aligned = _align(current, alignment)
        gap = offset - current
        if aligned + size <= offset and (best_gap < 0 or gap < best_gap):
            best_offset, best_gap = aligned, gap
            if gap == size:
                break  # a perfect fit: nothing beats it
        current = max(current, end)
    return best_offset if best_offset >= 0 else _align(current, alignment)


def _best_fit_unaligned(placed: Iterable[tuple[int, int]], size: int) -> int:
    """`_best_fit` at alignment 1 (the default), without aligning every gap's start."""
    best_offset, best_gap = -1, -1
    current = 0
    for offset, end in placed:
        gap = offset - current
        if gap >= size and (best_gap < 0 or gap < best_gap):
            best_offset, best_gap = current, gap
            if gap == size:
                break
        if end > current:
            current = end
    return best_offset if best_offset >= 0 else current


def _best_fit_vectorized(offsets: np.ndarray, ends: np.ndarray, size: int,
                         alignment: int) -> int:
    """`_best_fit` over many placed buffers at once (same answer, numpy speed)."""
    by_offset = np.argsort(offsets, kind="stable")
    offsets, ends = offsets[by_offset], ends[by_offset]
    # current[i]: end of the placed memory below the i-th buffer (0 before the first)
    current = np.concatenate(([0], np.maximum.accumulate(ends)[:-1]))
    aligned = -(-current // alignment) * alignment
    gaps = offsets - current
    fits = np.flatnonzero(aligned + size <= offsets)
    if fits.size:
        return int(aligned[fits[np.argmin(gaps[fits])]])  # argmin: the first smallest gap
    return _align(int(ends.max()), alignment)


def _align(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment


def top_level(spans: Sequence[tuple[int, int]], steps: int) -> int:
    """The `_OccupancyIndex` level to stop its tree at for lifetimes `spans`: the one where
    the placements' walks cost least in all, counted per buffer as the level's height twice
    (the walks up from its first step) and its span's nodes at that level four times (the
    walks across a span visit them one by one above it, each a union joined or read: about
    four steps of a walk, measured on the decoders of benchmarks/speed_targets.py). Short
    lifetimes (a decoder's buffers live a few steps) stop the tree low; 10^5 graph outputs
    alive to the end keep it whole."""
    height = max(steps - 1, 0).bit_length()
    if not spans:
        return height
    lengths = np.fromiter((last - first + 1 for first, last in spans), dtype=np.int64,
                          count=len(spans))
    costs = [2 * level * len(spans) + 4 * int((lengths >> level).sum())
             for level in range(height + 1)]
    return costs.index(min(costs))


class _OccupancyIndex:
    """Where placed buffers sit, as unions of offset ranges over ranges of steps.

    The best fit depends on the placed buffers that meet a lifetime only through the union
    of their [offset, end) ranges, so that union is all this index keeps: each union is a
    flat sorted list of boundaries [start0, end0, start1, end1, ...] (disjoint, touching
    ranges joined), whose length is the number of separate runs, however many buffers made
    them. A buffer meets [first, last] when it covers `first` (a stabbing query: it is
    joined into the unions of its canonical segment-tree nodes, and those on the path from
    `first`'s leaf up are read) or when it starts in (first, last] (it is joined into the
    unions of every node above its start step, and the canonical nodes of (first, last]
    are read). Unions over long stretches of steps fill up into few runs and short
    stretches hold few buffers, so a placement reads a few short lists where listing the
    buffers it meets read each of them (all 10^5 of a graph's outputs).

    The tree stops at level `top` (`top_level`): above it the nodes of that level stand
    side by side, and a range wider than them is split into its canonical nodes up to
    that level and then the level's nodes one by one. Each step is still covered by
    exactly one node of a range's split and each node's ancestors up to `top` are read,
    so the same buffers are found; a decoder's lifetimes of a few steps walk 5 levels,
    not the 15 of a tree over 22,000 steps.
    """

    def __init__(self, steps: int, top: int | None = None) -> None:
        height = max(steps - 1, 0).bit_length()
        self.size = 1 << height
        self.top = height if top is None else min(top, height)
        self.covering: list[list[int] | None] = [None] * (2 * self.size)
        self.starting: list[list[int] | None] = [None] * (2 * self.size)

    def add(self, first: int, last: int, offset: int, end: int) -> None:
        covering, starting = self.covering, self.starting
        low, high = first + self.size, last + self.size + 1
        # the top level's nodes are numbered from `limit`: a walk below it holds nodes
        # numbered from 2 * limit
        limit = self.size >> self.top
        below = 2 * limit
        # placements mostly climb and touch the run below them: `union[-1] == offset` extends
        # that run in place, the one case handled here without a call to `_joined`
        while below <= low < high:
            if low & 1:
                union = covering[low]
                if union is not None and union[-1] == offset:
                    union[-1] = end
                else:
                    covering[low] = _joined(union, offset, end)
                low += 1
            if high & 1:
                high -= 1
                union = covering[high]
                if union is not None and union[-1] == offset:
                    union[-1] = end
                else:
                    covering[high] = _joined(union, offset, end)
            low >>= 1
            high >>= 1
        for node in range(low, high):  # the top level's nodes, side by side
            covering[node] = _joined(covering[node], offset, end)
        node = first + self.size
        while node >= limit:
            union = starting[node]
            if union is None:
                starting[node] = [offset, end]
            elif (highest := union[-1]) == offset:
                union[-1] = end
            elif highest > offset and _covers(union, offset, end):
                break  # every union above this one holds it already
            else:
                starting[node] = _joined(union, offset, end)
            node >>= 1

    def meeting(self, first: int, last: int) -> tuple[list[int], bool]:
        """The runs where the placed buffers meeting [first, last] sit: the unions'
        boundary lists found, one after another, and whether there were several (their
        runs may overlap: `_gap_fit` reads their joint union)."""
        bounds: list[int] = []
        found = 0
        covering, starting = self.covering, self.starting
        limit = self.size >> self.top  # the top level's first node (see `add`)
        node = first + self.size
        while node >= limit:
            if (union := covering[node]) is not None:
                bounds += union
                found += 1
            node >>= 1
        low, high = first + 1 + self.size, last + self.size + 1
        below = 2 * limit
        while below <= low < high:
            if low & 1:
                if (union := starting[low]) is not None:
                    bounds += union
                    found += 1
                low += 1
            if high & 1:
                high -= 1
                if (union := starting[high]) is not None:
                    bounds += union
                    found += 1
            low >>= 1
            high >>= 1
        for node in range(low, high):  # the top level's nodes, side by side
            if (union := starting[node]) is not None:
                bounds += union
                found += 1
        return bounds, found > 1


def _joined(union: list[int] | None, offset: int, end: int) -> list[int]:
    """`union` (a boundary list, see `_OccupancyIndex`) with [offset, end) joined in."""
    if union is None:
        return [offset, end]
    top = union[-1]
    if top <= offset:  # at or above the highest run (placements mostly climb): no search
        if top == offset:
            union[-1] = end
        else:
            union += (offset, end)
        return union
    low = bisect_left(union, offset)  # odd: `offset` falls in (or at the end of) a run
    high = bisect_right(union, end, low)  # odd: `end` falls in (or at the start of) a run
    union[low:high] = ([] if low & 1 else [offset]) + ([] if high & 1 else [end])
    return union


def _covers(union: list[int], offset: int, end: int) -> bool:
    """Whether one run of `union` holds all of [offset, end)."""
    index = bisect_right(union, offset)
    return bool(index & 1) and union[index] >= end
