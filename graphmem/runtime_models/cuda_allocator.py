"""PyTorch's CUDA caching allocator, simulated over a sequence of allocations and frees.

The rules are those of c10/cuda/CUDACachingAllocator.cpp (native backend, default settings:
no max_split_size, no expandable segments, no garbage collection, one stream, no
empty_cache):
- a request is rounded up to a multiple of 512 bytes (kMinBlockSize; at least 512); a request
  of 0 bytes allocates nothing;
- rounded sizes <= 1 MiB (kSmallSize) go to the small pool, larger ones to the large pool;
- each pool keeps its free blocks ordered by (size, address) and hands out the first block at
  least as large as the request: the smallest that fits, the lowest address among equals;
- when no free block fits, a new segment is cudaMalloc'ed: 2 MiB (kSmallBuffer) for the small
  pool, 20 MiB (kLargeBuffer) for requests under 10 MiB (kMinLargeAlloc), else the request
  rounded up to 2 MiB (kRoundLarge);
- the block found is split, the request taking its start, when the rest is >= 512 bytes
  (small pool) or > 1 MiB (large pool); otherwise the whole block is handed out and counted as
  allocated;
- a freed block merges with its free neighbours of the same segment; segments are not
  returned to the device while they are not needed;
- bounded by the device (`capacity_bytes`: what cudaMalloc can give the allocator's segments):
  when a new segment does not fit, the allocator frees every cached segment with no block in
  use (`release_cached_blocks`: whole free segments of both pools; with the default
  max_split_size `release_available_cached_blocks` frees nothing) and tries once more; if
  that fails too the request fails (torch.OutOfMemoryError, "CUDA out of memory").
Allocated bytes are the sizes of the blocks in use (torch.cuda.memory_allocated), reserved
bytes the sizes of the segments (torch.cuda.memory_reserved), requested bytes the sizes asked
for (the allocator's `requested_bytes` statistic).
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from graphmem.errors import GraphmemError

MIN_BLOCK_BYTES = 512  # kMinBlockSize
SMALL_SIZE_BYTES = 1 << 20  # kSmallSize: the largest small-pool request
SMALL_BUFFER_BYTES = 2 << 20  # kSmallBuffer: small-pool segment
MIN_LARGE_ALLOC_BYTES = 10 << 20  # kMinLargeAlloc: from here a request gets its own segment
LARGE_BUFFER_BYTES = 20 << 20  # kLargeBuffer: segment shared by 1-10 MiB requests
ROUND_LARGE_BYTES = 2 << 20  # kRoundLarge: rounding of own segments

# ("alloc" | "free", buffer id, requested bytes)
AllocatorEvent = tuple[str, Hashable, int]


@dataclass(frozen=True)
class AllocatorFailure:
    """The request no segment could serve, even after the cached segments were freed."""

    buffer_id: Hashable
    event_index: int
    request_bytes: int  # rounded
    segment_bytes: int  # the segment cudaMalloc was asked for
    reserved_bytes: int  # segments held after freeing the cached ones
    allocated_bytes: int  # blocks in use when it failed


@dataclass(frozen=True)
class AllocatorResult:
    allocated_peak_bytes: int  # torch.cuda.max_memory_allocated
    reserved_peak_bytes: int  # torch.cuda.max_memory_reserved (segments are never released)
    requested_peak_bytes: int  # the largest sum of requested sizes in use at once
    segment_count: int  # cudaMalloc calls
    small_segment_count: int  # of which 2 MiB small-pool segments
    allocated_final_bytes: int  # still allocated after the last event
    requested_at_allocated_peak_bytes: int  # requested sizes in use at the allocated peak
    failure: AllocatorFailure | None = None  # None: every request was served
    released_segment_count: int = 0  # cached segments freed to make room

    @property
    def satisfied(self) -> bool:
        return self.failure is None


def round_size(size_bytes: int) -> int:
    """Rounded request: a multiple of 512 bytes, at least 512."""
    blocks = max(1, -(-size_bytes // MIN_BLOCK_BYTES))
    return blocks * MIN_BLOCK_BYTES


def segment_bytes(rounded_bytes: int) -> int:
    """Size of the segment cudaMalloc'ed for a rounded request that no free block fits."""
    if rounded_bytes <= SMALL_SIZE_BYTES:
        return SMALL_BUFFER_BYTES
    if rounded_bytes < MIN_LARGE_ALLOC_BYTES:
        return LARGE_BUFFER_BYTES
    return -(-rounded_bytes // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES


@dataclass(eq=False, slots=True)
class _Block:
    address: int
    size: int
    small: bool
    allocated: bool = False
    prev: _Block | None = None  # neighbours within the same segment
    next: _Block | None = None


class _Pool:
    """Free blocks ordered by (size, address), as BlockComparatorSize orders them."""

    def __init__(self) -> None:
        self._keys: list[tuple[int, int]] = []
        self._blocks: dict[tuple[int, int], _Block] = {}

    def add(self, block: _Block) -> None:
        key = (block.size, block.address)
        bisect.insort(self._keys, key)
        self._blocks[key] = block

    def remove(self, block: _Block) -> None:
        key = (block.size, block.address)
        del self._keys[bisect.bisect_left(self._keys, key)]
        del self._blocks[key]

    def whole_segments(self) -> list[_Block]:
        """Free blocks that are a whole segment (no neighbour): release_blocks frees those."""
        return [b for b in self._blocks.values() if b.prev is None and b.next is None]

    def take_best_fit(self, size: int) -> _Block | None:
        index = bisect.bisect_left(self._keys, (size, -1))
        if index == len(self._keys):
            return None
        key = self._keys.pop(index)
        return self._blocks.pop(key)


class OutOfMemory(Exception):
    """No segment for a request, even after the cached ones were freed."""

    def __init__(self, size: int, segment: int) -> None:
        super().__init__(f"no segment of {segment} bytes for {size}")
        self.size = size
        self.segment = segment


class _CachingAllocator:
    def __init__(self, capacity_bytes: int | None = None) -> None:
        self.capacity_bytes = capacity_bytes
        self.released_segment_count = 0
        self.small = _Pool()
        self.large = _Pool()
        self.next_address = 0
        self.allocated_bytes = self.reserved_bytes = self.requested_bytes = 0
        self.segment_count = self.small_segment_count = 0

    def malloc(self, requested_bytes: int) -> _Block:
        size = round_size(requested_bytes)
        small = size <= SMALL_SIZE_BYTES
        pool = self.small if small else self.large
        block = pool.take_best_fit(size) or self._new_segment(size, small)
        if self._should_split(block, size):
            rest = _Block(block.address + size, block.size - size, small, False, block, block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next, block.size = rest, size
            pool.add(rest)
        block.allocated = True
        self.allocated_bytes += block.size
        self.requested_bytes += requested_bytes
        return block

    def free(self, block: _Block, requested_bytes: int) -> None:
        block.allocated = False
        self.allocated_bytes -= block.size
        self.requested_bytes -= requested_bytes
        pool = self.small if block.small else self.large
        if block.prev is not None and not block.prev.allocated:  # [prev block] -> one block
            before = block.prev
            pool.remove(before)
            block.address, block.size = before.address, before.size + block.size
            block.prev = before.prev
            if block.prev is not None:
                block.prev.next = block
        if block.next is not None and not block.next.allocated:  # [block next] -> one block
            after = block.next
            pool.remove(after)
            block.size, block.next = block.size + after.size, after.next
            if block.next is not None:
                block.next.prev = block
        pool.add(block)

    def _new_segment(self, size: int, small: bool) -> _Block:
        nbytes = segment_bytes(size)
        if not self._device_has(nbytes):
            self._release_cached_segments()  # then cudaMalloc is tried once more
            if not self._device_has(nbytes):
                raise OutOfMemory(size, nbytes)
        block = _Block(self.next_address, nbytes, small)
        self.next_address += nbytes
        self.reserved_bytes += nbytes
        self.segment_count += 1
        self.small_segment_count += small
        return block

    def _device_has(self, nbytes: int) -> bool:
        return self.capacity_bytes is None or self.reserved_bytes + nbytes <= self.capacity_bytes

    def _release_cached_segments(self) -> None:
        """release_cached_blocks: cudaFree every cached segment with no block in use."""
        for pool in (self.large, self.small):
            for block in pool.whole_segments():
                pool.remove(block)
                self.reserved_bytes -= block.size
                self.released_segment_count += 1

    @staticmethod
    def _should_split(block: _Block, size: int) -> bool:
        remaining = block.size - size
        return remaining >= MIN_BLOCK_BYTES if block.small else remaining > SMALL_SIZE_BYTES


def simulate_caching_allocator(events: Iterable[AllocatorEvent],
                               capacity_bytes: int | None = None) -> AllocatorResult:
    """Replay `events` in order; every id is allocated once and freed at most once. With
    `capacity_bytes` (what the device can give the allocator's segments) the replay stops at
    the first request the device cannot serve: `failure` says which."""
    allocator = _CachingAllocator(capacity_bytes)
    live: dict[Hashable, tuple[_Block | None, int]] = {}
    allocated_peak = reserved_peak = requested_peak = requested_at_peak = 0
    failure = None
    for index, (kind, buffer_id, size_bytes) in enumerate(events):
        if kind == "alloc":
            if buffer_id in live or size_bytes < 0:
                raise GraphmemError(f"allocator event alloc {buffer_id!r}: allocated twice or"
                                    " a negative size; give each buffer one alloc of >= 0 bytes")
            try:
                block = allocator.malloc(size_bytes) if size_bytes else None
            except OutOfMemory as oom:
                failure = AllocatorFailure(buffer_id, index, oom.size, oom.segment,
                                           allocator.reserved_bytes, allocator.allocated_bytes)
                break
            live[buffer_id] = (block, size_bytes)
        elif kind == "free":
            if buffer_id not in live:
                raise GraphmemError(f"allocator event free {buffer_id!r}: it is not allocated;"
                                    " free each buffer once, after its alloc")
            block, requested = live.pop(buffer_id)
            if block is not None:
                allocator.free(block, requested)
        else:
            raise GraphmemError(f"allocator event {kind!r}: use 'alloc' or 'free'")
        if allocator.allocated_bytes > allocated_peak:
            allocated_peak = allocator.allocated_bytes
            requested_at_peak = allocator.requested_bytes
        reserved_peak = max(reserved_peak, allocator.reserved_bytes)
        requested_peak = max(requested_peak, allocator.requested_bytes)
    return AllocatorResult(
        allocated_peak_bytes=allocated_peak,
        reserved_peak_bytes=reserved_peak,
        requested_peak_bytes=requested_peak,
        segment_count=allocator.segment_count,
        small_segment_count=allocator.small_segment_count,
        allocated_final_bytes=allocator.allocated_bytes,
        requested_at_allocated_peak_bytes=requested_at_peak,
        failure=failure,
        released_segment_count=allocator.released_segment_count,
    )

