"""The events of running an order over a graph's buffers (what each step frees), and the
sweep of live bytes over them as polynomials in the free dims, optionally split into groups
such as roles (`symbolic_profile`); graphmem/passes/memory_model.py states the conventions
and builds the buffers these index."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from graphmem.core.dim_name import Coefficient, Monomial
from graphmem.core.symbolic import SymInt


class BufferUses(Protocol):
    @property
    def uses(self) -> tuple[tuple[int, ...], ...]: ...

    @property
    def pinned(self) -> tuple[bool, ...]: ...


@dataclass(frozen=True)
class StepEvents:
    """What an order frees: each step allocates what its node makes, then frees these."""

    order: tuple[int, ...]  # the node run at each step
    frees: tuple[tuple[int, ...], ...]  # step -> buffers freed after it (their last use)
    last_step: tuple[int, ...]  # buffer -> the step of its last use (the end if pinned)


def step_events(model: BufferUses, order: Sequence[int]) -> StepEvents:
    """The frees of running `order` (node indices), from one reverse walk of last uses."""
    order = tuple(order)
    pinned, uses = model.pinned, model.uses
    end = len(order) - 1
    last_step = [end if keep else -1 for keep in pinned]
    frees: list[tuple[int, ...]] = [()] * len(order)
    for step in range(end, -1, -1):
        freed = []
        for buffer in uses[order[step]]:
            if last_step[buffer] < 0:
                last_step[buffer] = step
                freed.append(buffer)
        if freed:
            frees[step] = tuple(freed)
    return StepEvents(order, tuple(frees), tuple(last_step))


Terms = tuple[tuple[Monomial, Coefficient], ...]


def symbolic_profile(allocates: Sequence[Sequence[int]], sizes: Sequence[Terms],
                     events: StepEvents, start: Sequence[SymInt],
                     groups: Sequence[int] | None = None) -> list[tuple[SymInt, ...]]:
    """Live bytes during each step as polynomials, one per group (`groups`: buffer -> its
    group, e.g. a role; None: one group), each starting from `start[group]`."""
    if all(s.is_constant for s in start) and all(_is_constant(terms) for terms in sizes):
        if groups is None and len(start) == 1:
            return _constant_profile(allocates, sizes, events, start[0])
        return _constant_groups_profile(allocates, sizes, events, start, groups)
    live = [dict(s.terms()) for s in start]
    # a step changes one or two groups: the others keep their SymInt from the step before
    current = list(start)
    changed: set[int] = set()
    steps: list[tuple[SymInt, ...]] = []
    for node, freed in zip(events.order, events.frees, strict=True):
        for buffer in allocates[node]:
            index = groups[buffer] if groups is not None else 0
            group = live[index]
            changed.add(index)
            for monomial, coefficient in sizes[buffer]:
                group[monomial] = group.get(monomial, 0) + coefficient
        for index in changed:
            current[index] = SymInt(live[index])
        changed.clear()
        steps.append(tuple(current))
        for buffer in freed:
            index = groups[buffer] if groups is not None else 0
            group = live[index]
            changed.add(index)
            for monomial, coefficient in sizes[buffer]:
                group[monomial] -= coefficient
    return steps


def _is_constant(terms: Terms) -> bool:
    return not terms or (len(terms) == 1 and terms[0][0] == ())


def _constant_profile(allocates: Sequence[Sequence[int]], sizes: Sequence[Terms],
                      events: StepEvents, start: SymInt) -> list[tuple[SymInt, ...]]:
    """`symbolic_profile` of one group where every size is a number (a bound graph): the
    totals are swept as numbers, not polynomials."""
    numbers = [terms[0][1] if terms else 0 for terms in sizes]
    totals = constant_totals(allocates, numbers, events, start.constant_term)
    return [(SymInt.const(live),) for live in totals]


def constant_totals(allocates: Sequence[Sequence[int]], numbers: Sequence[Coefficient],
                    events: StepEvents, start: Coefficient) -> list[Coefficient]:
    """The live bytes during each step where every buffer's size is a number: `start`, plus
    what the steps so far allocated, less what the steps before freed."""
    live = start
    totals: list[Coefficient] = []
    for node, freed in zip(events.order, events.frees, strict=True):
        for buffer in allocates[node]:
            live += numbers[buffer]
        totals.append(live)
        for buffer in freed:
            live -= numbers[buffer]
    return totals


def _constant_groups_profile(allocates: Sequence[Sequence[int]], sizes: Sequence[Terms],
                             events: StepEvents, start: Sequence[SymInt],
                             groups: Sequence[int] | None) -> list[tuple[SymInt, ...]]:
    """`symbolic_profile` by group (a role) where every size is a number: each group's total
    is swept as a number, and a step makes a SymInt only for the groups it changed."""
    numbers = [terms[0][1] if terms else 0 for terms in sizes]
    group_of = groups if groups is not None else [0] * len(sizes)
    live = [s.constant_term for s in start]
    current = list(start)
    changed: set[int] = set()
    steps: list[tuple[SymInt, ...]] = []
    for node, freed in zip(events.order, events.frees, strict=True):
        for buffer in allocates[node]:
            index = group_of[buffer]
            live[index] += numbers[buffer]
            changed.add(index)
        for index in changed:
            current[index] = SymInt.const(live[index])
        changed.clear()
        steps.append(tuple(current))
        for buffer in freed:
            index = group_of[buffer]
            live[index] -= numbers[buffer]
            changed.add(index)
    return steps


def size_terms(size: SymInt | None) -> Terms:
    return tuple((size or SymInt()).terms().items())
