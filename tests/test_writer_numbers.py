"""The writers' fast paths for a bound graph's numbers give what the per-item computation gives,
on numbers, free dims, fractions and ties: the HTML live table's order (report/html/memory.py
`_largest_first`) and the JSON's timeline (report/json/report.py `_quantities`)."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from graphmem.core.ir import Role
from graphmem.core.symbolic import SymInt
from graphmem.passes.liveness import LiveTensor
from graphmem.report.html.memory import _largest_first
from graphmem.report.html.quantity import probe
from graphmem.report.json.report import _quantities, quantity


def _size(rng: random.Random, symbolic: bool) -> SymInt:
    # few distinct sizes: ties are the point of a stable order
    size = SymInt.const(rng.choice([0, 1, 256, 4096, 4096, 1 << 20]))
    if rng.random() < 0.1:
        size = size + SymInt.const(Fraction(rng.randint(1, 7), 8))  # sub-byte: rounds up
    if symbolic and rng.random() < 0.5:
        size = size + SymInt.symbol(rng.choice(["batch", "seq"])) * rng.choice([1, 512])
    return size


def _tensors(rng: random.Random, count: int, symbolic: bool) -> list[LiveTensor]:
    return [LiveTensor(f"t{index}", _size(rng, symbolic), Role.ACTIVATION, "float32", "[1]",
                       None, None) for index in range(count)]


@pytest.mark.parametrize("seed", range(40))
def test_the_live_table_s_order_is_the_sort_by_each_size(seed: int) -> None:
    rng = random.Random(seed)
    tensors = _tensors(rng, rng.randint(0, 60), symbolic=seed % 2 == 1)
    assert _largest_first(tensors) == sorted(tensors, key=lambda t: -probe(t.nbytes))


@pytest.mark.parametrize("seed", range(40))
def test_the_timeline_is_each_size_s_quantity(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [_size(rng, symbolic=seed % 2 == 1) for _ in range(rng.randint(0, 60))]
    written = _quantities(sizes)
    assert written == [quantity(size) for size in sizes]
    # the same types too: a bound step is an int, a free one its formula's text
    assert [type(w) for w in written] == [type(quantity(size)) for size in sizes]
