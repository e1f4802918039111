"""onnxruntime's best-fit-with-coalescing arena (BFCArena), replayed on a list of events.

What it reproduces (onnxruntime/core/framework/bfc_arena.cc, 1.31):
- every request is rounded up to a multiple of 256 bytes (kMinAllocationSize);
- the free chunk handed out is the smallest one that fits, the lowest address among equals
  (the bins only speed that search up);
- the chunk is split only when it is at least twice the rounded request (or would waste
  128 MiB or more): a smaller free chunk is handed out whole, and in use counts all of it;
- a freed chunk merges with free neighbours in the same region;
- when nothing fits, a region is added: the current region size (1 MiB at first) doubled
  until the request fits, then doubled again for the next time (kNextPowerOfTwo, up to 1 GiB);
- in use (`mem_bytes_in_use`) is the sum of the chunks handed out; held (`mem_arena_held`)
  is the sum of the regions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MIN_ALLOCATION_BYTES = 256
INITIAL_REGION_BYTES = 1 << 20  # DEFAULT_INITIAL_CHUNK_SIZE_BYTES
MAX_DEAD_BYTES_PER_CHUNK = 128 << 20  # DEFAULT_MAX_DEAD_BYTES_PER_CHUNK
MAX_POWER_OF_TWO_EXTEND_BYTES = 1 << 30  # DEFAULT_MAX_POWER_OF_TWO_EXTEND_BYTES


@dataclass(frozen=True)
class ArenaEvent:
    """Allocate `size_bytes` under `key`, or free what `key` holds (size_bytes None)."""

    key: str
    size_bytes: int | None


@dataclass(frozen=True)
class ArenaResult:
    peak_in_use_bytes: int
    peak_step: int
    held_bytes: int  # regions reserved from the system at the end
    in_use_after_step: tuple[int, ...]  # in use once each step's events are done


@dataclass(eq=False)  # chunks are compared by identity
class _Chunk:
    address: int
    size: int
    region: int
    free: bool = True


def rounded_bytes(size_bytes: int) -> int:
    return -(-max(size_bytes, 1) // MIN_ALLOCATION_BYTES) * MIN_ALLOCATION_BYTES


class BfcArena:
    def __init__(self, initial_region_bytes: int = INITIAL_REGION_BYTES) -> None:
        self.region_bytes = initial_region_bytes
        self.chunks: list[_Chunk] = []  # sorted by address; regions laid end to end
        self.held_bytes = 0
        self.in_use_bytes = 0
        self.regions = 0
        self.taken: dict[str, _Chunk] = {}

    def allocate(self, key: str, size_bytes: int) -> None:
        if size_bytes <= 0:
            return
        request = rounded_bytes(size_bytes)
        chunk = self._best_fit(request) or self._extend(request)
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
        self._coalesce(chunk)

    def _best_fit(self, request: int) -> _Chunk | None:
        fits = [c for c in self.chunks if c.free and c.size >= request]
        return min(fits, key=lambda c: (c.size, c.address)) if fits else None

    def _extend(self, request: int) -> _Chunk:
        grew = False
        while request > self.region_bytes:
            self.region_bytes *= 2
            grew = True
        chunk = _Chunk(self.held_bytes, self.region_bytes, self.regions)
        self.chunks.append(chunk)
        self.held_bytes += self.region_bytes
        self.regions += 1
        if not grew and self.region_bytes * 2 < MAX_POWER_OF_TWO_EXTEND_BYTES:
            self.region_bytes *= 2
        return chunk

    def _split(self, chunk: _Chunk, request: int) -> None:
        rest = _Chunk(chunk.address + request, chunk.size - request, chunk.region)
        chunk.size = request
        self.chunks.insert(self.chunks.index(chunk) + 1, rest)

    def _coalesce(self, chunk: _Chunk) -> None:
        index = self.chunks.index(chunk)
        following = self.chunks[index + 1] if index + 1 < len(self.chunks) else None
        if following is not None and following.free and following.region == chunk.region:
            chunk.size += following.size
            del self.chunks[index + 1]
        previous = self.chunks[index - 1] if index > 0 else None
        if previous is not None and previous.free and previous.region == chunk.region:
            previous.size += chunk.size
            del self.chunks[index]


def replay(steps: Sequence[Sequence[ArenaEvent]]) -> ArenaResult:
    """Run each step's events through a fresh arena; the peak of in-use bytes and its step."""
    arena = BfcArena()
    peak = peak_step = 0
    after = []
    for step, events in enumerate(steps):
        for event in events:
            if event.size_bytes is None:
                arena.free(event.key)
                continue
            arena.allocate(event.key, event.size_bytes)
            if arena.in_use_bytes > peak:
                peak, peak_step = arena.in_use_bytes, step
        after.append(arena.in_use_bytes)
    return ArenaResult(peak, peak_step, arena.held_bytes, tuple(after))
