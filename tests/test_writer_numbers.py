"""The writers' fast paths for a bound graph's numbers give what the per-item computation gives,
on numbers, free dims, fractions and ties: the HTML live table's order (report/html/memory.py
`live_table` shows the liveness's order: it must be the sort by each size at the probe) and
the JSON's timeline (report/json/report.py `_quantities`)."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from graphmem.core.ir import DType, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.passes.liveness import _describe_live, _Live
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


def _live(rng: random.Random, count: int, symbolic: bool) -> list[_Live]:
    shape = (SymInt.const(1),)
    names = [f"t{index}" for index in range(count)]
    rng.shuffle(names)  # ties are ranked by name, not by position
    return [_Live(Value(name, DType.FLOAT32, shape, Role.ACTIVATION), _size(rng, symbolic), None)
            for name in names]


@pytest.mark.parametrize("seed", range(40))
def test_the_live_table_s_order_is_the_sort_by_each_size(seed: int) -> None:
    # the HTML table shows the liveness's order as it is: largest first at the probe value
    # (free dims at PROBE_DIM_VALUE, fractions rounded up), as a stable sort by each size
    # would rank them, ties by name
    rng = random.Random(seed)
    tensors = _describe_live(_live(rng, rng.randint(0, 60), symbolic=seed % 2 == 1), {})
    by_name = sorted(tensors, key=lambda t: t.name)
    assert list(tensors) == sorted(by_name, key=lambda t: -probe(t.nbytes))


@pytest.mark.parametrize("seed", range(40))
def test_the_timeline_is_each_size_s_quantity(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [_size(rng, symbolic=seed % 2 == 1) for _ in range(rng.randint(0, 60))]
    written = _quantities(sizes)
    assert written == [quantity(size) for size in sizes]
    # the same types too: a bound step is an int, a free one its formula's text
    assert [type(w) for w in written] == [type(quantity(size)) for size in sizes]
