"""The arena's fast replay (one loop over locals) against BfcArena's own methods, event by event.

`replay` inlines BfcArena.allocate and free (best fit, split, coalesce, Extend with its
doubling regions and the 90% back-off); `replay_through_arena` calls the class. Both must give
the same ArenaResult (peak, its step, the regions held, in use after each step, the failure)
on random event lists: sizes around the 256-byte rounding, the split rule's 2x and 128 MiB
edges, zero-byte requests, frees of keys never taken, keys reused, both extend strategies,
unbounded and bounded by devices small enough to fail part way.
"""

from __future__ import annotations

import random

import pytest

from graphmem.runtime_models.bfc_arena import (
    ArenaEvent,
    ArenaExtend,
    replay_through_arena,
)
from graphmem.runtime_models.bfc_replay import numbered_events, replay, replay_numbered

_SIZES = (0, 1, 255, 256, 257, 1000, 4096, 65_536, (1 << 20) - 1, 1 << 20, 3 << 20,
          (128 << 20) + 256, 300 << 20, 1 << 30)


def _random_steps(seed: int) -> list[list[ArenaEvent]]:
    rng = random.Random(seed)
    held: list[str] = []
    steps: list[list[ArenaEvent]] = []
    keys = 0
    for _ in range(rng.randint(1, 400)):
        events = []
        for _ in range(rng.randint(0, 4)):
            if rng.random() < 0.6 or not held:
                keys += 1
                key = f"k{keys if rng.random() < 0.95 else rng.randint(0, keys)}"  # reused
                size = rng.choice(_SIZES) * rng.randint(1, 3) + rng.choice((0, 0, 17, 256))
                events.append(ArenaEvent(key, size))
                held.append(key)
            elif rng.random() < 0.9:
                events.append(ArenaEvent(held.pop(rng.randrange(len(held))), None))
            else:
                events.append(ArenaEvent("never taken", None))
        steps.append(events)
    return steps


@pytest.mark.parametrize("seed", range(150))
def test_replay_equals_the_arena_driven_event_by_event(seed: int) -> None:
    steps = _random_steps(seed)
    unbounded = replay_through_arena(steps)
    rng = random.Random(-seed)
    # a device that fails part way: a share of what the unbounded run held, and tight ones
    bounds = (None, unbounded.held_bytes, unbounded.held_bytes - 1,
              int(unbounded.held_bytes * rng.uniform(0.05, 1.0)), 0, 8 << 10)
    for extend in ArenaExtend:
        for device_free in bounds:
            expected = replay_through_arena(steps, device_free, extend)
            assert replay(steps, device_free, extend) == expected, (extend, device_free)


def test_the_random_lists_fail_part_way_and_reuse_chunks() -> None:
    """The cases above fail part way (not only before the first event), and the unbounded
    runs hand freed chunks out again (in use at the peak below the regions held)."""
    unbounded = [replay_through_arena(_random_steps(seed)) for seed in range(300)]
    halved = [replay_through_arena(_random_steps(seed), result.held_bytes // 2)
              for seed, result in enumerate(unbounded)]
    assert sum(r.failure is not None and len(r.in_use_after_step) > 0 for r in halved) > 100
    assert sum(r.peak_in_use_bytes < r.held_bytes for r in unbounded) > 100


@pytest.mark.parametrize("seed", range(150))
def test_the_demand_carried_on_from_a_failure_is_the_unbounded_run(seed: int) -> None:
    """`demand`: a bounded run that fails gives the unbounded run too, carried on from the
    failing allocation; it must be the unbounded replay, and the bounded result unchanged."""
    steps = _random_steps(seed)
    numbered, sizes, keys = numbered_events(steps)
    for extend in ArenaExtend:
        unbounded = replay_through_arena(steps, None, extend)
        rng = random.Random(seed)
        for device_free in (unbounded.held_bytes - 1, unbounded.held_bytes // 2,
                            int(unbounded.held_bytes * rng.uniform(0.05, 1.0)), 0):
            bounded, demand = replay_numbered(numbered, sizes, keys, device_free, extend, True)
            assert bounded == replay_through_arena(steps, device_free, extend)
            if bounded.failure is None:
                assert demand is None
            elif demand is not None:
                assert demand == unbounded


def test_the_demand_is_carried_on_in_most_failing_runs() -> None:
    """Carried on (not None) wherever no region was backed off before the failure: most of
    the random failing runs, so the test above checks it."""
    carried = failing = 0
    for seed in range(100):
        numbered, sizes, keys = numbered_events(_random_steps(seed))
        held = replay_numbered(numbered, sizes, keys)[0].held_bytes
        bounded, demand = replay_numbered(numbered, sizes, keys, held // 2, demand=True)
        failing += bounded.failure is not None
        carried += demand is not None
    assert failing > 50 and carried > failing // 2
