"""The sweep of live bytes by group (graphmem/passes/sweep_events.py): the numbers-only path
a bound graph takes equals the polynomial path it skips."""

from __future__ import annotations

import random

from graphmem.core.symbolic import SymInt
from graphmem.passes.sweep_events import size_terms, step_events, symbolic_profile


class _Uses:
    def __init__(self, uses: tuple[tuple[int, ...], ...], pinned: tuple[bool, ...]) -> None:
        self.uses, self.pinned = uses, pinned


def _random_case(seed: int) -> tuple[list[tuple[int, ...]], list[int], _Uses, list[int]]:
    """Node i allocates buffer i (some 0 bytes); each reads up to three earlier buffers."""
    rng = random.Random(seed)
    nodes = rng.randint(1, 40)
    allocates: list[tuple[int, ...]] = [(i,) for i in range(nodes)]
    uses = tuple(tuple(sorted({i, *rng.sample(range(i + 1), min(i + 1, 3))}))
                 for i in range(nodes))
    pinned = tuple(rng.random() < 0.2 for _ in range(nodes))
    sizes = [rng.randint(0, 10**6) if rng.random() < 0.9 else 0 for _ in range(nodes)]
    groups = [rng.randrange(4) for _ in range(nodes)]
    return allocates, sizes, _Uses(uses, pinned), groups


def test_numbers_equal_the_polynomials_bound() -> None:
    n = SymInt.symbol("n")
    for seed in range(200):
        allocates, sizes, uses, groups = _random_case(seed)
        events = step_events(uses, range(len(allocates)))
        start = [SymInt.const(7 * g) for g in range(4)]
        numbers = symbolic_profile(allocates, [size_terms(SymInt.const(s)) for s in sizes],
                                   events, start, groups)
        # the same sizes times a dim: the polynomial path, then bound at n = 1
        polynomials = symbolic_profile(allocates, [size_terms(n * s) for s in sizes],
                                       events, [s * n for s in start], groups)
        assert numbers == [tuple(p.evaluate({"n": 1}) for p in step) for step in polynomials]
        assert all(type(v) is SymInt for step in numbers for v in step)


def test_numbers_by_hand() -> None:
    # node 0 makes buffer 0 (100 B, group 1), node 1 reads it and makes buffer 1 (30 B,
    # group 0); buffer 0 is freed after node 1, buffer 1 is pinned (an output)
    events = step_events(_Uses(((0,), (0, 1)), (False, True)), range(2))
    sizes = [size_terms(SymInt.const(100)), size_terms(SymInt.const(30))]
    steps = symbolic_profile([(0,), (1,)], sizes, events, [SymInt.const(5), SymInt()], [1, 0])
    # step 0: group 0 = 5 (start), group 1 = 100; step 1: group 0 = 5 + 30, group 1 still 100
    assert steps == [(5, 100), (35, 100)]
