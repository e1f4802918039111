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

Finding the intersecting buffers uses a segment tree over the steps (a stabbing query for the
buffers live when this one starts) and lists of starts per step and per block of steps (those
that start during it), so a placement costs O(log steps + its lifetime / block + buffers it
meets), not O(all buffers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from graphmem.passes.memory_model import (
    MemoryModel,
    StepEvents,
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
    order = list(order if order is not None else range(model.node_count))
    events = step_events(model, order)  # one walk for the lifetimes and the peak
    spans = lifetimes(model, order, events)
    sizes = model.buffer_bytes
    steps = max(len(order), 1)
    offsets = [0] * len(sizes)
    ends = [0] * len(sizes)  # offset + size of each placed buffer
    bounds = [(0, 0)] * len(sizes)  # (offset, end) of each placed buffer, for the best fit
    index = _IntervalIndex(steps)
    ranked = sorted((b for b in range(len(sizes)) if sizes[b] > 0),
                    key=lambda b: (-sizes[b], spans[b][0], b))
    placed_offsets = np.zeros(len(sizes), dtype=np.int64)
    placed_ends = np.zeros(len(sizes), dtype=np.int64)
    for buffer in ranked:
        first, last = spans[buffer]
        met = index.overlapping(first, last)
        size = sizes[buffer]
        if len(met) < _VECTORIZE_FROM:
            offset = _best_fit(sorted(map(bounds.__getitem__, met)), size, alignment)
        else:
            ids = np.array(met, dtype=np.int64)
            offset = _best_fit_vectorized(placed_offsets[ids], placed_ends[ids], size, alignment)
        offsets[buffer], ends[buffer] = offset, offset + size
        bounds[buffer] = (offset, offset + size)
        placed_offsets[buffer], placed_ends[buffer] = offset, offset + size
        index.add(buffer, first, last)
    placements = tuple(
        Placement(name, offsets[b], sizes[b], spans[b][0], spans[b][1])
        for b, name in enumerate(model.buffer_names)
    )
    return ArenaPlan(
        arena_bytes=max(ends, default=0),
        live_activation_peak_bytes=_live_activation_peak(model, order, events),
        no_reuse_bytes=sum(sizes),
        alignment=alignment,
        placements=placements,
    )


def _best_fit(placed: list[tuple[int, int]], size: int, alignment: int) -> int:
    """The start of the smallest gap between `placed` (sorted by offset) that fits `size`."""
    if alignment == 1:
        return _best_fit_unaligned(placed, size)
    return _best_fit_aligned(placed, size, alignment)


def _best_fit_aligned(placed: list[tuple[int, int]], size: int, alignment: int) -> int:
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


def _best_fit_unaligned(placed: list[tuple[int, int]], size: int) -> int:
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


def _live_activation_peak(model: MemoryModel, order: Sequence[int], events: StepEvents) -> int:
    """The most activation bytes live at one step (the memory-event sweep's peak)."""
    during, _ = live_profile(model, order, events)
    return max(during, default=model.resident_bytes) - model.resident_bytes


class _IntervalIndex:
    """Inclusive step intervals; which of them intersect a query interval.

    An interval meeting [first, last] either covers `first` (a stabbing query on a segment
    tree holding each interval in its O(log n) canonical nodes) or starts in (first, last]:
    those are listed per start step and per block of `_BLOCK` steps, so a short query (most
    lifetimes are a step or two) reads a few steps and a long one whole blocks.
    """

    def __init__(self, steps: int) -> None:
        self.size = 1 << max(steps - 1, 0).bit_length()
        self.covering: list[list[int]] = [[] for _ in range(2 * self.size)]
        self.starts: list[list[int]] = [[] for _ in range(self.size)]  # step -> items
        self.block_starts: list[list[int]] = [[] for _ in range(self.size // _BLOCK + 1)]

    def add(self, item: int, first: int, last: int) -> None:
        low, high = first + self.size, last + self.size + 1
        while low < high:
            if low & 1:
                self.covering[low].append(item)
                low += 1
            if high & 1:
                high -= 1
                self.covering[high].append(item)
            low >>= 1
            high >>= 1
        self.starts[first].append(item)
        self.block_starts[first // _BLOCK].append(item)

    def overlapping(self, first: int, last: int) -> list[int]:
        found: list[int] = []
        node = first + self.size
        while node:
            found += self.covering[node]
            node >>= 1
        return found + self._starting_in(first + 1, last)

    def _starting_in(self, low: int, high: int) -> list[int]:
        """Items starting at a step in [low, high]."""
        found: list[int] = []
        starts = self.starts
        if high - low < 2 * _BLOCK:
            for step in range(low, high + 1):
                found += starts[step]
            return found
        whole_from, whole_to = -(-low // _BLOCK), (high + 1) // _BLOCK  # blocks inside
        for step in range(low, whole_from * _BLOCK):
            found += starts[step]
        for block in range(whole_from, whole_to):
            found += self.block_starts[block]
        for step in range(whole_to * _BLOCK, high + 1):
            found += starts[step]
        return found
