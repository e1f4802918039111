"""onnxruntime's BFC arena replayed over numbered events, in one loop over locals.

`replay_numbered` is bfc_arena.py's BfcArena (allocate's best fit, split and Extend, free's
coalescing) inlined over numbers: `n` allocates `sizes[n]` under number n, `~n` frees it.
Where the events repeat (a decoder's layers) and the arena has settled into their pattern,
the repeats are jumped over (bfc_cycles.py). tests/test_bfc_replay.py checks it against
BfcArena driven event by event, tests/test_bfc_cycles.py the jumps against the replay without
them.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from graphmem.runtime_models.bfc_arena import (
    BACKPEDAL_FACTOR,
    INITIAL_REGION_BYTES,
    MAX_DEAD_BYTES_PER_CHUNK,
    MAX_POWER_OF_TWO_EXTEND_BYTES,
    MIN_ALLOCATION_BYTES,
    MIN_BACKOFF_BYTES,
    ArenaEvent,
    ArenaExtend,
    ArenaFailure,
    ArenaResult,
    _Chunk,
    _float32,
    rounded_bytes,
    unlink_chunks,
)
from graphmem.runtime_models.bfc_cycles import (
    MIN_EVENTS,
    EventShape,
    find_cycles,
)


def replay(steps: Sequence[Sequence[ArenaEvent]], device_free_bytes: int | None = None,
           extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO) -> ArenaResult:
    """Run each step's events through a fresh arena; the peak of in-use bytes and its step.
    With `device_free_bytes` (what the device can give the arena's regions) the replay stops
    at the first allocation the device cannot back: `failure` says which. `extend`: the
    arena's extend strategy. The events numbered (`numbered_events`) and replayed by
    `replay_numbered`; `replay_through_arena` drives BfcArena itself, the same answers
    (tests/test_bfc_replay.py)."""
    numbered, sizes, keys = numbered_events(steps)
    return replay_numbered(numbered, sizes, keys, device_free_bytes, extend)[0]


def numbered_events(steps: Sequence[Sequence[ArenaEvent]]
                    ) -> tuple[list[list[int]], list[int], list[str]]:
    """`steps` as replay_numbered's numbers: each allocation its own number (its size and key
    at that place), a free the complement of its key's latest allocation (a key allocated
    again leaves the earlier chunk in use, as the arena's own map does)."""
    sizes: list[int] = []
    keys: list[str] = []
    latest: dict[str, int] = {}
    numbered = []
    for events in steps:
        step = []
        for key, size_bytes in events:
            if size_bytes is None:
                if key not in latest:  # never taken: a number that holds nothing
                    latest[key] = len(sizes)
                    sizes.append(0)
                    keys.append(key)
                step.append(~latest[key])
                continue
            if size_bytes > 0:  # nothing taken: a free of the key frees what it held
                latest[key] = len(sizes)
            step.append(len(sizes))
            sizes.append(size_bytes)
            keys.append(key)
        numbered.append(step)
    return numbered, sizes, keys


def replay_numbered(steps: Sequence[Sequence[int]], sizes: Sequence[int],
                    keys: Sequence[str], device_free_bytes: int | None = None,
                    extend: ArenaExtend = ArenaExtend.NEXT_POWER_OF_TWO, demand: bool = False,
                    jumps: bool = True, shape: EventShape | None = None
                    ) -> tuple[ArenaResult, ArenaResult | None]:
    """`replay` on events as numbers: `n` >= 0 allocates `sizes[n]` bytes under number n,
    `~n` frees what number n holds; `keys[n]` names it in a failure. onnxruntime's plan
    numbers its buffers once per layout (graphmem/runtime_models/ort_cpu.py), so a probed
    batch only brings a list of sizes. BfcArena's allocate and free in one loop over locals.

    `demand`: where the bounded run fails, the second result is the same run unbounded (the
    demand), carried on from the failing allocation where no region was backed off before
    it (until then both runs are the same: held only grows, and a region the unbounded run
    takes beyond the device's memory is the first the bounded one must back off); None
    where it does not fail or a region was backed off (the caller replays unbounded).
    `jumps` False: every step replayed, none jumped over (bfc_cycles.py; the tests' reference);
    `shape`: `EventShape(steps)`, where the caller keeps it for these steps.
    """
    heads: list[_Chunk] = []  # the chunk list's first, where one was made
    try:
        return _replay_numbered(steps, sizes, keys, device_free_bytes, extend, demand, jumps,
                                shape, heads)
    finally:  # the chunks' two-way links are cycles: cut, so that no collector need free them
        unlink_chunks(heads[0] if heads else None)


def _replay_numbered(steps: Sequence[Sequence[int]], sizes: Sequence[int],
                     keys: Sequence[str], device_free_bytes: int | None,
                     extend: ArenaExtend, demand: bool, jumps: bool, shape: EventShape | None,
                     heads: list[_Chunk]) -> tuple[ArenaResult, ArenaResult | None]:
    free_list: list[tuple[int, int, _Chunk]] = []  # (size, address, chunk), sorted
    taken: list[_Chunk | None] = [None] * len(sizes)
    region_bytes, same_as_requested = INITIAL_REGION_BYTES, extend is SAME_AS_REQUESTED
    held = in_use = regions = peak = peak_step = 0
    last: _Chunk | None = None
    device_free = device_free_bytes
    backed_off = False
    bounded: ArenaResult | None = None  # the bounded run's failure, where carried on
    after: list[int] = []
    bisect_left, insort = bisect.bisect_left, bisect.insort
    first: _Chunk | None = None
    cycles = None
    if jumps and shape is None and sum(map(len, steps)) >= MIN_EVENTS:
        shape = EventShape(steps)
    if jumps and shape is not None:
        cycles = find_cycles(shape, sizes)
    checks = cycles.checks if cycles is not None else []
    check = start = step = 0
    count = len(steps)
    while True:  # the steps up to the next check, then the check (bfc_cycles.py)
        until = checks[check] if check < len(checks) else count
        for step, events in enumerate(steps[start:until], start):
            for number in events:
                if number < 0:  # free, merged with free neighbours of its region
                    chunk = taken[~number]
                    if chunk is None:
                        continue
                    taken[~number] = None
                    chunk.free = True
                    in_use -= chunk.size
                    following, region = chunk.next, chunk.region
                    if following is not None and following.free and following.region == region:
                        del free_list[bisect_left(free_list, (following.size, following.address))]
                        if _absorbed(chunk, following):
                            last = chunk
                    previous = chunk.previous
                    if previous is not None and previous.free and previous.region == region:
                        del free_list[bisect_left(free_list, (previous.size, previous.address))]
                        if _absorbed(previous, chunk):
                            last = previous
                        chunk = previous
                    insort(free_list, (chunk.size, chunk.address, chunk))
                    continue
                size_bytes = sizes[number]
                if size_bytes <= 0:
                    continue
                request = -(-size_bytes // MIN_ALLOCATION_BYTES) * MIN_ALLOCATION_BYTES
                index = bisect_left(free_list, (request, -1))  # the best fit, lowest address
                if index < len(free_list):
                    chunk = free_list.pop(index)[2]
                else:  # Extend: a new region after the last
                    if same_as_requested:
                        size = request
                    else:
                        grew = request > region_bytes
                        while request > region_bytes:
                            region_bytes *= 2
                        size = region_bytes
                        if not grew:
                            region_bytes = min(region_bytes * 2, MAX_POWER_OF_TWO_EXTEND_BYTES)
                    if device_free is not None and size > device_free:
                        tried = _backed_off_region(request, size, device_free)
                        if tried < 0:  # no region the device can give: the run fails here
                            failure = ArenaFailure(keys[number], step, request, -tried,
                                                   device_free, in_use, held)
                            bounded = ArenaResult(peak, peak_step, held, tuple(after), failure)
                            if not demand or backed_off:
                                return bounded, None
                            device_free = None  # the demand: the same run, unbounded from here
                        else:
                            size, backed_off = tried, True
                    chunk = _Chunk(held, size, regions, previous=last)
                    if last is not None:
                        last.next = chunk
                    else:
                        first = chunk
                        heads.append(chunk)
                    last = chunk
                    held += size
                    regions += 1
                    if device_free is not None:
                        device_free -= size
                size = chunk.size
                if size >= 2 * request or size - request >= MAX_DEAD_BYTES_PER_CHUNK:  # split
                    rest = _Chunk(chunk.address + request, size - request, chunk.region,
                                  previous=chunk, next=chunk.next)
                    if chunk.next is None:
                        last = rest
                    else:
                        chunk.next.previous = rest
                    chunk.next = rest
                    chunk.size = size = request
                    insort(free_list, (rest.size, rest.address, rest))
                chunk.free = False
                in_use += size
                taken[number] = chunk
                if in_use > peak:
                    peak, peak_step = in_use, step
            after.append(in_use)
        start = until
        if until >= count:
            break
        if cycles is not None:  # where the arena repeats, the periods after jumped over
            skipped, repeated = cycles.at_check(check, in_use, first, taken)
            if skipped:
                block = after[start - repeated:start]
                for _ in range(skipped // repeated):
                    after.extend(block)
                start += skipped
                checks = []  # one jump: the rest replayed
        check += 1
    result = ArenaResult(peak, peak_step, held, tuple(after))
    return (result, None) if bounded is None else (bounded, result)


def _backed_off_region(request: int, size: int, device_free: int) -> int:
    """The region Extend gets where the device has less than `size` left: 90% steps down;
    where none fits before falling below the request (or 8 KiB), minus the last size tried."""
    while size > device_free:
        smaller = rounded_bytes(int(_float32(size * BACKPEDAL_FACTOR)))
        if smaller < request or smaller < MIN_BACKOFF_BYTES:
            return -size
        size = smaller
    return size


SAME_AS_REQUESTED = ArenaExtend.SAME_AS_REQUESTED


def _absorbed(lower: _Chunk, upper: _Chunk) -> bool:
    """`upper` merged into `lower`, the chunk below it; True where `upper` was the last."""
    lower.size += upper.size
    lower.next = following = upper.next
    if following is None:
        return True
    following.previous = lower
    return False
