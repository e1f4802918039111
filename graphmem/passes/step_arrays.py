"""One order's live bytes at every step as prefix sums: the integer sweep of
`memory_model.order_peak` and the polynomial sweep of `sweep_events.symbolic_profile`, for
the searches that evaluate one order's peak at many values of a dim (the largest batch,
graphmem/pipeline/planning.py `DimProbe`) and for the candidates of a symbolic peak.

During step t the live bytes are the residents, plus every buffer allocated at or before t,
less every buffer freed after a step before t (the sweep's own order: allocate, record, free).
With the buffers listed in the order they are allocated, and the freed ones in the order they
are freed, both sets are prefixes of those lists: one cumulative sum of the sizes in each list
gives every step's total. The sums are numpy int64, exact while the sizes' absolute total
stays under 2**62; beyond it (or with fractional coefficients: sub-byte tensors with free
dims) these return None and the callers sweep in Python as before.

A polynomial size is a row of coefficients, one column per monomial: a step's total is the
sum of rows, and the candidates for the peak (the steps no other step dominates, coefficient
by coefficient: `symbolic.symint_max`) are found on the rows, in the order the steps first
reach them, as `symint_max` keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from typing import TypeVar

import numpy as np

from graphmem.core.dim_name import Monomial
from graphmem.core.evaluate import Evaluator, compile_count
from graphmem.core.symbolic import SymInt, sum_sizes
from graphmem.passes.sweep_events import StepEvents

_EXACT_BELOW = 1 << 62  # |sum| of everything summed: int64 prefix sums stay exact


@dataclass(frozen=True)
class StepPrefixes:
    """Which buffers are live during each step of one order, as prefixes of two lists (no
    sizes: one serves any sizes)."""

    allocated: np.ndarray  # buffers, in the order the steps allocate them
    allocated_upto: np.ndarray  # step -> how many of `allocated` exist during it
    freed: np.ndarray  # freed buffers, in the order the steps free them
    freed_before: np.ndarray  # step -> how many of `freed` are gone before it runs


def step_prefixes(allocates: Sequence[Sequence[int]], events: StepEvents) -> StepPrefixes:
    """The prefixes of `events`' order (node -> buffers it allocates: `allocates`)."""
    made = [allocates[node] for node in events.order]
    return StepPrefixes(
        allocated=_flat(made),
        allocated_upto=np.cumsum(np.fromiter(map(len, made), np.int64, len(made))),
        freed=_flat(events.frees),
        # freed before step t: everything freed after the steps before it
        freed_before=np.cumsum(np.fromiter(chain((0,), map(len, events.frees[:-1])),
                                           np.int64, len(events.frees))),
    )


def _flat(lists: Sequence[Sequence[int]]) -> np.ndarray:
    return np.fromiter(chain.from_iterable(lists), np.int64)


def live_during(prefixes: StepPrefixes, sizes: np.ndarray, start: np.ndarray | int
                ) -> np.ndarray:
    """Live bytes during each step: `sizes` per buffer (int64, one row of coefficients each
    where 2-D), `start` (the residents) added to every step."""
    zero = np.zeros((1, *sizes.shape[1:]), dtype=np.int64)
    made = np.concatenate((zero, np.cumsum(sizes[prefixes.allocated], axis=0)))
    gone = np.concatenate((zero, np.cumsum(sizes[prefixes.freed], axis=0)))
    during: np.ndarray = made[prefixes.allocated_upto] - gone[prefixes.freed_before]
    return during + start


T = TypeVar("T")


def by_identity(items: Sequence[T]) -> dict[int, T]:
    """id -> item, each distinct object once (C-speed: nothing hashed but the ids)."""
    return dict(zip(map(id, items), items, strict=True))


class _Distinct:
    """Sizes by position, as indices into their distinct values (a graph's sizes are a few
    hundred distinct polynomials), with how often each occurs."""

    def __init__(self, sizes: Sequence[SymInt | None]) -> None:
        # grouped by identity first (no polynomial hashed per position), then by value
        slot: dict[SymInt | None, int] = {}
        slot_of = {key: slot.setdefault(size, len(slot))
                   for key, size in by_identity(sizes).items()}
        self.index = np.fromiter(map(slot_of.__getitem__, map(id, sizes)), np.int64,
                                 len(sizes))
        self.values: list[SymInt | None] = list(slot)
        self.counts: list[int] = np.bincount(self.index, minlength=len(slot)).tolist()


class OrderArrays:
    """One order of a memory model, with sizes that are polynomials in the dims left free:
    its integer peak at any dims, and its candidate peaks as polynomials."""

    def __init__(self, allocates: Sequence[Sequence[int]], events: StepEvents,
                 buffer_sizes: Sequence[SymInt | None],
                 resident_sizes: Sequence[SymInt | None]) -> None:
        """`buffer_sizes` by buffer, `resident_sizes` by resident (None: unknown, 0 bytes)."""
        self.prefixes = step_prefixes(allocates, events)
        self.buffers = _Distinct(buffer_sizes)
        self.residents = _Distinct(resident_sizes)

    def resident_total(self) -> SymInt:
        """The residents' sizes summed as polynomials (each distinct size times its count)."""
        return sum_sizes((size or SymInt()) * count for size, count
                         in zip(self.residents.values, self.residents.counts, strict=True))

    @cached_property
    def evaluators(self) -> tuple[list[Evaluator], list[Evaluator]]:
        """The distinct buffer sizes' and resident sizes' evaluators, compiled once."""
        return ([_evaluator(size) for size in self.buffers.values],
                [_evaluator(size) for size in self.residents.values])

    def peak(self, dims: Mapping[str, int]) -> tuple[int, int] | None:
        """(peak bytes, first step at the peak) at `dims`, every size evaluated alone (as
        `memory_model.rebind` does) and swept as `order_peak` sweeps; None where int64 could
        overflow."""
        buffer_evaluators, resident_evaluators = self.evaluators
        values = [evaluate(dims) for evaluate in buffer_evaluators]
        residents = [evaluate(dims) for evaluate in resident_evaluators]
        resident = sum(v * c for v, c in zip(residents, self.residents.counts, strict=True))
        total = sum(abs(v) * c for v, c in zip(values, self.buffers.counts, strict=True))
        if total + abs(resident) >= _EXACT_BELOW:
            return None
        if not len(self.prefixes.allocated_upto):
            return -1, 0  # order_peak's answer for an empty order
        sizes = np.array(values, dtype=np.int64)[self.buffers.index]
        during = live_during(self.prefixes, sizes, resident)
        step = int(np.argmax(during))  # the first step at the peak
        return int(during[step]), step

    def candidates(self, start: SymInt) -> list[SymInt] | None:
        """`symint_max` of the steps' totals as polynomials (`start`: the residents' total),
        in the same order; None where a coefficient is not an integer or int64 could
        overflow."""
        rows = _coefficient_rows(self.buffers, start)
        if rows is None:
            return None
        monomials, table, start_row = rows
        during = live_during(self.prefixes, table[self.buffers.index], start_row)
        if not len(during):
            return []
        variable = [i for i, monomial in enumerate(monomials) if monomial != ()]
        if not during[:, variable].any():  # every step a number: the largest
            constant = monomials.index(())
            return [SymInt.const(int(during[:, constant].max()))]
        kept = sorted(_undominated(during))  # as symint_max keeps them: by first step
        return [_polynomial(monomials, during[step]) for step in kept]


def _evaluator(size: SymInt | None) -> Evaluator:
    """`memory_model.size_at` of `size` as a function of the dims, compiled once."""
    if size is None:
        return lambda dims: 0
    return compile_count(size)  # a number as int(size): compile_count's constant case


Rows = tuple[list[Monomial], np.ndarray, np.ndarray]


def _coefficient_rows(sizes: _Distinct, start: SymInt) -> Rows | None:
    """(monomials, distinct size -> its coefficients, start's coefficients) as int64; None
    where a coefficient is not an integer or the columns' absolute sums reach 2**62."""
    terms = [(size or SymInt()).terms() for size in sizes.values]
    column: dict[Monomial, int] = {(): 0}
    for polynomial in (*terms, start.terms()):
        for monomial, coefficient in polynomial.items():
            if type(coefficient) is not int:
                return None
            column.setdefault(monomial, len(column))
    bound = [0] * len(column)
    counted = [*zip(terms, sizes.counts, strict=True), (start.terms(), 1)]
    for polynomial, count in counted:
        for monomial, coefficient in polynomial.items():
            bound[column[monomial]] += abs(int(coefficient)) * count
    if max(bound) >= _EXACT_BELOW:
        return None
    table = np.zeros((len(terms), len(column)), dtype=np.int64)
    for row, polynomial in enumerate(terms):
        for monomial, coefficient in polynomial.items():
            table[row, column[monomial]] = coefficient
    start_row = np.zeros(len(column), dtype=np.int64)
    for monomial, coefficient in start.terms().items():
        start_row[column[monomial]] = coefficient
    return list(column), table, start_row


def _undominated(rows: np.ndarray) -> list[int]:
    """The first index of each distinct row no other row dominates (every coefficient >=).

    The lexicographically largest remaining row is never dominated (a row that dominates
    another is lexicographically larger): keep it, drop every row it dominates (its equals
    too), repeat. The sort is stable: of equal rows the first comes first."""
    by_rank = np.lexsort(-rows.T[::-1])  # lexicographically largest first
    alive = np.ones(len(rows), dtype=bool)
    kept: list[int] = []
    while True:
        remaining = np.flatnonzero(alive[by_rank])
        if not len(remaining):
            return kept
        best = int(by_rank[remaining[0]])
        kept.append(best)
        alive &= ~np.all(rows <= rows[best], axis=1)


def _polynomial(monomials: Sequence[Monomial], row: np.ndarray) -> SymInt:
    return SymInt({monomial: int(coefficient)
                   for monomial, coefficient in zip(monomials, row.tolist(), strict=True)
                   if coefficient})
