"""Where an arena replay repeats itself: a decoder's layers, each the same allocations and frees.

A 22,000-node decoder's plan is a few dozen layers of the same events (the same sizes, each
buffer freed the same number of events after it is allocated). Once the arena has settled into
one layer's pattern (the same chunks, free or handed out, at the same addresses at the start
of two layers), every further layer repeats the last: the same chunks handed out, the same in
use after each step, no region added. `replay_numbered` (bfc_replay.py) then jumps over them.

The events as positions: each step's events, then a mark for the step's end. Each position
gets a code that says all the replay reads of it: an allocation, its request in 256-byte units
and its life (positions until its free; -1 never freed); a free of a number that holds a
chunk then; a free of one that holds none; the step's end. With `p` a period of the codes
(code[t] == code[t + p] for t in [b0, Z - p)) and the arena at b0 and b1 = b0 + p the same
(the chunks, address for address: size, region, free or not; each chunk handed out freed the
same number of positions after b0 and b1, or not before the windows' ends Z - p and Z), the
replay of [b1, Z) is that of [b0, Z - p) moved by p, event for event (induction on the
position: the same free list gives the same best fit and split; a free takes the chunk whose
holder is freed there, the same chunk on both sides; an allocation's holder is freed L
positions on, inside the window on both sides or on neither). So in use after each step of
[b1, Z) is that of the step p positions before, no region is added, the peak stays where it
was, and at Z the arena is that at b1 with each chunk held by the number allocated m * p
positions after its holder at b1 (Z = b1 + m * p), or by the same number where that holder
was allocated before b0 (then it is freed after Z).

Only event lists that allocate each number at most once, and free it at most once after that,
are read so (onnxruntime's plan does: one allocation and one free per buffer); others replay
event by event. tests/test_bfc_cycles.py checks the jump against the plain replay on random
layered event lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

from graphmem.runtime_models.bfc_arena import MIN_ALLOCATION_BYTES, _Chunk

_END, _FREE_HELD, _FREE_NONE = -3, -1, -2  # codes of a step's end and of frees
_NEVER = -1  # an allocation's life where it is never freed
_WINDOW = 64  # positions hashed to find the period
MIN_EVENTS = 2048  # shorter lists replay event by event: nothing much to jump over
_INF = -1  # a holder freed after its window
_KEPT_CHECKS = 4  # the arena compared with that at the last few checks (periods of layers)
_MIX, _BASE, _WRAP = np.int64(-7046029254386353131), np.int64(1099511628211), 1 << 64


class EventShape:
    """What of a numbered event list its sizes do not change, made once per list (a plan
    layout's events serve every probed batch): each event's position, each number's
    allocation and free; `valid` False where a number is allocated or freed twice, or freed
    before it is allocated (such lists replay event by event)."""

    def __init__(self, steps: Sequence[Sequence[int]]) -> None:
        count = len(steps)
        lengths = np.fromiter(map(len, steps), np.int64, count)
        events = np.fromiter(chain.from_iterable(steps), np.int64, int(lengths.sum()))
        self.events = len(events)
        self.step_start = np.concatenate(([0], np.cumsum(lengths + 1)))  # one past: the end
        self.total = int(self.step_start[-1])
        positions = np.arange(len(events)) + np.repeat(np.arange(count), lengths)
        allocs = events >= 0
        numbers = np.where(allocs, events, ~events)
        self.numbers = int(numbers.max()) + 1 if len(numbers) else 0
        self.alloc_numbers, self.alloc_positions = numbers[allocs], positions[allocs]
        self.free_numbers, self.free_positions = numbers[~allocs], positions[~allocs]
        self.alloc_at = alloc_at = np.full(self.numbers, -1, np.int64)
        alloc_at[self.alloc_numbers] = self.alloc_positions
        self.free_at = free_at = np.full(self.numbers, -1, np.int64)
        free_at[self.free_numbers] = self.free_positions
        self.valid = not (_repeats(self.alloc_numbers, self.numbers)
                          or _repeats(self.free_numbers, self.numbers)
                          or bool(np.any((free_at >= 0) & (free_at < alloc_at))))
        self.life = np.where(free_at >= 0, free_at - alloc_at, _NEVER)  # positions
        self.number_at = np.full(self.total, -1, np.int64)  # per position: allocated there
        self.number_at[self.alloc_positions] = self.alloc_numbers


class Cycles:
    """One event list's period (in positions and in steps) and the steps before which the
    replay compares the arena one period apart (`checks`)."""

    def __init__(self, shape: EventShape, held: np.ndarray, period: int, checks: list[int],
                 stop: int) -> None:
        self.shape = shape
        self.held = held  # per number: it takes a chunk (allocated, more than 0 bytes)
        self.period = period
        self.checks = checks
        self.stop = stop  # code[t] == code[t + period] from the first check's position to here
        self.recent: list[tuple[int, Snapshot | None]] = []  # in use (and arena) at checks

    def snapshot(self, check: int, first: _Chunk | None, taken: Sequence[_Chunk | None]
                 ) -> Snapshot:
        """The arena before `checks[check]`: per chunk in address order (size, region, free),
        and per chunk handed out, in address order, its holder's number (-1: none known)."""
        shape = self.shape
        at = shape.step_start[self.checks[check]]
        live = np.flatnonzero(self.held & (shape.alloc_at < at)
                              & ((shape.free_at >= at) | (shape.free_at < 0)))
        holder_of = {id(taken[n]): n for n in live.tolist()}
        chunks = []
        holders = []
        chunk = first
        while chunk is not None:
            free = chunk.free
            chunks.append((chunk.size, chunk.region, free))
            if not free:
                holders.append(holder_of.get(id(chunk), -1))
            chunk = chunk.next
        return tuple(chunks), holders

    def at_check(self, check: int, in_use: int, first: _Chunk | None,
                 taken: list[_Chunk | None]) -> tuple[int, int]:
        """Before `checks[check]`: where the arena is as it was a few checks before (a whole
        number of periods: the arena may settle into two layers' pattern), (steps the replay
        skips, steps of the period it repeats); `taken` then moved to the holders after them.
        (0, 0): replay on. The arena is read only where in use is as it was at one of the
        last checks."""
        recent = self.recent
        later = None
        if any(used == in_use for used, _ in recent):
            later = self.snapshot(check, first, taken)
            for back, (used, earlier) in enumerate(reversed(recent), 1):
                if earlier is not None and used == in_use:
                    skipped = self.jump(check - back, check, earlier, later, taken)
                    if skipped:
                        return skipped, self.checks[check] - self.checks[check - back]
        recent.append((in_use, later))
        del recent[:-_KEPT_CHECKS]
        return 0, 0

    def jump(self, before: int, check: int, earlier: Snapshot, later: Snapshot,
             taken: list[_Chunk | None]) -> int:
        """Where the arena before `checks[before]` and `checks[check]` is the same (module
        docstring), the number of steps the replay skips from the later one (whole periods:
        `taken` moved to the holders after them); else 0 (nothing moved)."""
        if earlier[0] != later[0]:
            return 0
        shape = self.shape
        b0 = int(shape.step_start[self.checks[before]])
        b1 = int(shape.step_start[self.checks[check]])
        period = b1 - b0  # a multiple of the codes' period: they repeat with it up to `stop`
        stop = self.stop - (period - self.period)
        periods = (stop - b0) // period  # code[t] == code[t + period] for t in [b0, Z - period)
        end = b1 + periods * period  # Z
        if periods < 1:
            return 0
        free_at, alloc_at, number_at = shape.free_at, shape.alloc_at, shape.number_at
        moves = []
        for n0, n1 in zip(earlier[1], later[1], strict=True):
            if n0 < 0 or n1 < 0:
                return 0
            f0, f1 = int(free_at[n0]), int(free_at[n1])
            if (f0 - b0 if 0 <= f0 < end - period else _INF) != \
                    (f1 - b1 if 0 <= f1 < end else _INF):
                return 0
            if alloc_at[n1] >= b0:  # held at Z by the number allocated `periods` periods on
                moves.append((n1, int(number_at[int(alloc_at[n1]) + periods * period])))
        for old, new in moves:
            taken[new], taken[old] = taken[old], None
        return periods * (self.checks[check] - self.checks[before])


Snapshot = tuple[tuple[tuple[int, int, bool], ...], list[int]]


def find_cycles(shape: EventShape, sizes: Sequence[int]) -> Cycles | None:
    """Where `shape`'s events, at `sizes`, repeat over at least two periods from some step:
    the period and the checks; None where they do not, or the list is not one allocation and
    at most one later free per number (module docstring)."""
    if not shape.valid or shape.events < MIN_EVENTS or shape.numbers > len(sizes):
        return None
    try:
        size = np.array(sizes, np.int64)
    except OverflowError:
        return None
    alloc_numbers, free_numbers = shape.alloc_numbers, shape.free_numbers
    held = (shape.alloc_at >= 0) & (size[:shape.numbers] > 0)
    codes = np.full(shape.total, _END, np.int64)
    lives = np.zeros(shape.total, np.int64)
    request = np.where(size > 0, -(-size // MIN_ALLOCATION_BYTES), 0)
    codes[shape.alloc_positions] = request[alloc_numbers]
    lives[shape.alloc_positions] = np.where(held[alloc_numbers], shape.life[alloc_numbers], 0)
    codes[shape.free_positions] = np.where(held[free_numbers], _FREE_HELD, _FREE_NONE)
    found = _period(codes, lives)
    if found is None:
        return None
    period, first, stop = found
    step_start = shape.step_start
    # the checks: step starts one period apart, from the first whose end mark before it
    # repeats too, up to the run's end
    first_step = int(np.searchsorted(step_start, first + 1))
    if first_step >= len(step_start) - 1:
        return None
    positions = np.arange(int(step_start[first_step]), stop + 1, period)
    checks = np.searchsorted(step_start, positions)
    if len(checks) < 3 or not np.array_equal(step_start[checks], positions):
        return None
    return Cycles(shape, held, period, checks.tolist(), stop)


def _repeats(numbers: np.ndarray, count: int) -> bool:
    return bool(len(numbers)) and int(np.bincount(numbers, minlength=count).max()) > 1


def _period(codes: np.ndarray, lives: np.ndarray) -> tuple[int, int, int] | None:
    """(p, first, stop): the codes repeat with period p over [first, stop + p) around the
    middle, at least two periods long; None where no window of the middle recurs."""
    total = len(codes)
    if total < 4 * _WINDOW:
        return None
    # a polynomial hash of each window, modulo 2 ** 64 (int64 arithmetic wraps)
    mixed = codes * _MIX + lives
    powers = np.cumprod(np.full(total, _BASE, np.int64))  # base ** (t + 1)
    prefix = np.concatenate(([0], np.cumsum(mixed * powers)))
    windows = prefix[_WINDOW:] - prefix[:-_WINDOW]  # base ** (t + 1) * hash of [t, t + w)
    middle = total // 2
    unsigned = int(windows[middle]) * pow(int(powers[middle]) % _WRAP, -1, _WRAP) % _WRAP
    target = np.int64(unsigned - _WRAP if unsigned >= _WRAP >> 1 else unsigned)
    same = np.flatnonzero(windows == target * powers[:len(windows)])
    later = same[same > middle]
    if not len(later):
        return None
    period = int(later[0] - middle)
    equal = (codes[:-period] == codes[period:]) & (lives[:-period] == lives[period:])
    if not equal[middle]:
        return None
    breaks = np.flatnonzero(~equal)
    before = breaks[breaks < middle]
    after = breaks[breaks > middle]
    first = int(before[-1]) + 1 if len(before) else 0
    stop = int(after[0]) if len(after) else len(equal)
    if stop - first < 2 * period:
        return None
    return period, first, stop
