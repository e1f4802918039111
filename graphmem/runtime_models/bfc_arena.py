"""onnxruntime's best-fit-with-coalescing arena (BFCArena), replayed on a list of events.

What it reproduces (onnxruntime/core/framework/bfc_arena.cc, 1.31):
- every request is rounded up to a multiple of 256 bytes (kMinAllocationSize);
- the free chunk handed out is the smallest one that fits, the lowest address among equals
  (the bins only speed that search up);
- the chunk is split only when it is at least twice the rounded request (or would waste
  128 MiB or more): a smaller free chunk is handed out whole, and in use counts all of it;
- a freed chunk merges with free neighbours in the same region;
- when nothing fits, a region is added (`Extend`), by the arena's extend strategy: under
  kNextPowerOfTwo (the default) the current region size (1 MiB at first) doubled until the
  request fits, and after a region that needed no doubling the next one is twice as large, up
  to 1 GiB (max_power_of_two_extend_bytes; a larger current size falls back to 1 GiB then);
  under kSameAsRequested (the `arena_extend_strategy` provider option, or an OrtArenaCfg)
  a region of exactly the rounded request;
- bounded by the device (`device_free_bytes`: what cudaMalloc can still hand out, the CUDA
  provider's gpu_mem_limit being SIZE_MAX by default): a region the device cannot give is
  retried at 90% of its size (kBackpedalFactor, a float 0.9f), rounded up to 256 bytes, until
  it is given or falls below the request (or 8 KiB): then the allocation fails, and the run
  with it (onnxruntime reports "Failed to allocate memory for requested buffer");
- in use (`mem_bytes_in_use`) is the sum of the chunks handed out; held (`mem_arena_held`)
  is the sum of the regions.
cudaMalloc's own granularity (2 MiB pages) is not modelled: near the limit the device may
refuse a region graphmem gives, so a "fits" within 2 MiB per region of the capacity is
optimistic by that much.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from graphmem.runtime_models.vocabulary import ArenaExtend as ArenaExtend  # handed on

MIN_ALLOCATION_BYTES = 256
INITIAL_REGION_BYTES = 1 << 20  # DEFAULT_INITIAL_CHUNK_SIZE_BYTES
MAX_DEAD_BYTES_PER_CHUNK = 128 << 20  # DEFAULT_MAX_DEAD_BYTES_PER_CHUNK
MAX_POWER_OF_TWO_EXTEND_BYTES = 1 << 30  # DEFAULT_MAX_POWER_OF_TWO_EXTEND_BYTES
MIN_BACKOFF_BYTES = 8 * 1024  # Extend gives up below 8 KiB


def _float32(value: float) -> float:
    """`value` rounded to a C float: Extend computes `bytes * kBackpedalFactor` in float."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


BACKPEDAL_FACTOR = _float32(0.9)  # kBackpedalFactor = 0.9f


class ArenaEvent(NamedTuple):
    """Allocate `size_bytes` under `key`, or free what `key` holds (size_bytes None).

    A named tuple, not a dataclass: a largest-batch search builds tens of thousands per probe."""

    key: str
    size_bytes: int | None


@dataclass(frozen=True)
class ArenaFailure:
    """The allocation the device could not back: the run stops there (an OOM)."""

    key: str
    step: int
    request_bytes: int  # rounded to 256 bytes
    region_bytes: int  # the last region size tried (90% steps from the first)
    device_free_bytes: int  # what the device had left for a new region
    in_use_bytes: int  # chunks handed out when it failed
    held_bytes: int  # regions held when it failed


@dataclass(frozen=True)
class ArenaResult:
    peak_in_use_bytes: int
    peak_step: int
    held_bytes: int  # regions reserved from the system at the end (or at the failure)
    in_use_after_step: tuple[int, ...]  # in use once each step's events are done
    failure: ArenaFailure | None = None  # None: every allocation was satisfied

    @property
    def satisfied(self) -> bool:
        return self.failure is None


@dataclass(eq=False, slots=True)  # chunks are compared by identity
class _Chunk:
    address: int
    size: int
    region: int
    free: bool = True
    previous: _Chunk | None = field(default=None, repr=False)  # the chunk below, any region
    next: _Chunk | None = field(default=None, repr=False)


def unlink_chunks(first: _Chunk | None) -> None:
    """Every link of the chunk list from `first` cut: a replay's chunks are garbage once it
    returns, and their two-way links would keep them for the cyclic collector, which a
    one-command process turns off and freezes around the runtime model (core/collector.py)."""
    chunk = first
    while chunk is not None:
        following = chunk.next
        chunk.previous = chunk.next = None
        chunk = following


def rounded_bytes(size_bytes: int) -> int:
    return -(-max(size_bytes, 1) // MIN_ALLOCATION_BYTES) * MIN_ALLOCATION_BYTES


class ArenaOutOfMemory(Exception):
    """A region the device cannot back; `request` and `tried` say what was asked for."""

    def __init__(self, request_bytes: int, tried_bytes: int) -> None:
        super().__init__(f"no region of {tried_bytes} bytes for {request_bytes}")
        self.request_bytes = request_bytes
        self.tried_bytes = tried_bytes


class BfcArena:
    """onnxruntime's BFC arena: regions laid end to end, cut into chunks (a linked list in
    address order); the free chunks also kept sorted by (size, address), so the best fit is
    one bisection, not a scan of every chunk (10,000 live outputs took 6.4 s)."""

    def __init__(self, initial_region_bytes: int = INITIAL_REGION_BYTES,
                 device_free_bytes: int | None = None,
                 extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO) -> None:
        """`device_free_bytes`: what cudaMalloc can hand out for regions (None: unbounded)."""
        self.device_free_bytes = device_free_bytes
        self.extend = extend
        self.region_bytes = initial_region_bytes
        self.first: _Chunk | None = None
        self.last: _Chunk | None = None
        self.free_chunks: list[tuple[int, int, _Chunk]] = []  # (size, address, chunk), sorted
        self.held_bytes = 0
        self.in_use_bytes = 0
        self.regions = 0
        self.taken: dict[str, _Chunk] = {}

    @property
    def chunks(self) -> list[_Chunk]:
        """Every chunk in address order."""
        found, chunk = [], self.first
        while chunk is not None:
            found.append(chunk)
            chunk = chunk.next
        return found

    def allocate(self, key: str, size_bytes: int) -> None:
        if size_bytes <= 0:
            return
        request = rounded_bytes(size_bytes)
        chunk = self._best_fit(request)
        if chunk is None:
            chunk = self._extend(request)
        else:
            self._unlist(chunk)
        if chunk.size >= 2 * request or chunk.size - request >= MAX_DEAD_BYTES_PER_CHUNK:
            self._split(chunk, request)
        chunk.free = False
        self.in_use_bytes += chunk.size
        self.taken[key] = chunk

    def free(self, key: str) -> None:
        chunk = self.taken.pop(key, None)
        if chunk is None:
            return
        chunk.free = True
        self.in_use_bytes -= chunk.size
        self._list(self._coalesce(chunk))

    def _best_fit(self, request: int) -> _Chunk | None:
        """The smallest free chunk that fits, the lowest address among equals."""
        index = bisect.bisect_left(self.free_chunks, (request, -1))
        return self.free_chunks[index][2] if index < len(self.free_chunks) else None

    def _list(self, chunk: _Chunk) -> None:
        bisect.insort(self.free_chunks, (chunk.size, chunk.address, chunk))

    def _unlist(self, chunk: _Chunk) -> None:
        """Take a free chunk out of the sorted list ((size, address) is unique)."""
        index = bisect.bisect_left(self.free_chunks, (chunk.size, chunk.address))
        del self.free_chunks[index]

    def _extend(self, request: int) -> _Chunk:
        size = self._region_size(request)
        size = self._backed_off(request, size)
        chunk = _Chunk(self.held_bytes, size, self.regions, previous=self.last)
        if self.last is None:
            self.first = chunk
        else:
            self.last.next = chunk
        self.last = chunk
        self.held_bytes += size
        self.regions += 1
        if self.device_free_bytes is not None:
            self.device_free_bytes -= size
        return chunk

    def _region_size(self, request: int) -> int:
        """The size Extend asks the device for, before any back-off."""
        if self.extend is ArenaExtend.SAME_AS_REQUESTED:
            return request
        grew = False
        while request > self.region_bytes:
            self.region_bytes *= 2
            grew = True
        size = self.region_bytes
        if not grew:  # the next region: twice this one, at most 1 GiB
            doubled = self.region_bytes * 2
            self.region_bytes = (doubled if doubled < MAX_POWER_OF_TWO_EXTEND_BYTES
                                 else MAX_POWER_OF_TWO_EXTEND_BYTES)
        return size

    def _backed_off(self, request: int, size: int) -> int:
        """The region size the device gives: `size`, else 90% steps down to the request."""
        free = self.device_free_bytes
        while free is not None and size > free:
            smaller = rounded_bytes(int(_float32(size * BACKPEDAL_FACTOR)))
            if smaller < request or smaller < MIN_BACKOFF_BYTES:
                raise ArenaOutOfMemory(request, size)
            size = smaller
        return size

    def _split(self, chunk: _Chunk, request: int) -> None:
        """`chunk` (taken, out of the free list) keeps `request` bytes; the rest is free."""
        rest = _Chunk(chunk.address + request, chunk.size - request, chunk.region,
                      previous=chunk, next=chunk.next)
        if chunk.next is None:
            self.last = rest
        else:
            chunk.next.previous = rest
        chunk.next = rest
        chunk.size = request
        self._list(rest)

    def _coalesce(self, chunk: _Chunk) -> _Chunk:
        """Merge a freed chunk with its free neighbours of the same region; the merged one."""
        following = chunk.next
        if following is not None and following.free and following.region == chunk.region:
            self._unlist(following)
            chunk.size += following.size
            self._unlink(following)
        previous = chunk.previous
        if previous is not None and previous.free and previous.region == chunk.region:
            self._unlist(previous)
            previous.size += chunk.size
            self._unlink(chunk)
            return previous
        return chunk

    def _unlink(self, chunk: _Chunk) -> None:
        if chunk.previous is None:
            self.first = chunk.next
        else:
            chunk.previous.next = chunk.next
        if chunk.next is None:
            self.last = chunk.previous
        else:
            chunk.next.previous = chunk.previous


def replay_through_arena(steps: Sequence[Sequence[ArenaEvent]],
                         device_free_bytes: int | None = None,
                         extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO) -> ArenaResult:
    """`replay`, event by event through BfcArena's methods: the general path the fast loop is
    checked against."""
    arena = BfcArena(device_free_bytes=device_free_bytes, extend=extend)
    try:
        return _replayed(arena, steps)
    finally:
        unlink_chunks(arena.first)


def _replayed(arena: BfcArena, steps: Sequence[Sequence[ArenaEvent]]) -> ArenaResult:
    peak = peak_step = 0
    after: list[int] = []
    for step, events in enumerate(steps):
        for event in events:
            if event.size_bytes is None:
                arena.free(event.key)
                continue
            try:
                arena.allocate(event.key, event.size_bytes)
            except ArenaOutOfMemory as oom:
                failure = ArenaFailure(event.key, step, oom.request_bytes, oom.tried_bytes,
                                       arena.device_free_bytes or 0, arena.in_use_bytes,
                                       arena.held_bytes)
                return ArenaResult(peak, peak_step, arena.held_bytes, tuple(after), failure)
            if arena.in_use_bytes > peak:
                peak, peak_step = arena.in_use_bytes, step
        after.append(arena.in_use_bytes)
    return ArenaResult(peak, peak_step, arena.held_bytes, tuple(after))
