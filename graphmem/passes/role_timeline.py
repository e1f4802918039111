"""Live bytes at each step split by role (parameters, gradients, activations...), and the
phases of a training step.

Both are views of the liveness result (`LivenessResult.role_timeline`, `.phases`): the role
timeline sweeps the same events as liveness (graphmem/passes/memory_model.py), one total per
role, so at every step the roles add up to `live_bytes_per_step`: residents by their role for
the whole run, an activation from its producer's step to its last use, views and in-place
results counted once, on the tensor that owns the storage (and under its role).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TypeVar, cast

from graphmem.core.ir import Graph, Node, Phase, Role
from graphmem.core.symbolic import SymInt
from graphmem.passes.memory_model import MemorySweep, find_buffers, sweep_buffers
from graphmem.passes.step_arrays import by_identity

T = TypeVar("T")


@dataclass(frozen=True)
class RoleTimeline:
    roles: tuple[Role, ...]  # roles with any bytes, in the order they are stacked
    bytes_per_step: tuple[tuple[SymInt, ...], ...]  # [step][index in roles]

    def totals(self) -> tuple[SymInt, ...]:
        return tuple(sum(step, SymInt()) for step in self.bytes_per_step)


# Bottom to top in a stacked chart: what lives throughout first, then what comes and goes.
STACK_ORDER = (
    Role.PARAMETER, Role.BUFFER, Role.CONSTANT, Role.INPUT, Role.OPTIMIZER_STATE,
    Role.GRADIENT, Role.SAVED_ACTIVATION, Role.ACTIVATION, Role.ACTIVATION_GRADIENT,
    Role.OUTPUT, Role.TEMPORARY,
)


def role_timeline(
    graph: Graph, sizes: Mapping[str, SymInt | None], order: Sequence[Node] | None = None
) -> RoleTimeline:
    """Bytes live during each step of `order` (default: the model's order), by role (the
    liveness result has it too: `analyze_liveness(...).role_timeline`)."""
    return timeline_of(sweep_buffers(find_buffers(graph), sizes, order))


def timeline_of(sweep: MemorySweep) -> RoleTimeline:
    """The role timeline of one sweep: its events swept with one total per role."""
    group = {role: index for index, role in enumerate(STACK_ORDER)}
    start = [SymInt() for _ in STACK_ORDER]
    for value, size in zip(sweep.residents, sweep.resident_sizes, strict=True):
        start[group[value.role]] += size
    groups = [group[v.role] for v in sweep.storages]
    steps = sweep.profile(start, groups)
    # a role with no resident and no buffer stays at SymInt() at every step: only the roles
    # that have some are searched for a step where they hold bytes
    holding = {group[v.role] for v in sweep.residents}.union(groups)
    shown = [i for i in sorted(holding) if any(s[i] != 0 for s in steps)]
    return RoleTimeline(roles=tuple(STACK_ORDER[i] for i in shown),
                        bytes_per_step=_columns(steps, shown))


def timeline_numbers(sweep: MemorySweep) -> RoleNumbers | None:
    """`timeline_of(sweep)` as integers, swept as integers, where every size is an integer
    (a bound graph; None otherwise): the chart draws numbers, and 10^5 steps of roles made
    SymInts only to be turned back into numbers."""
    # each distinct size object asked once (values share them: a few hundred of 33,000)
    sizes = by_identity((*sweep.resident_sizes, *sweep.buffer_sizes)).values()
    if not all(type(size.constant_term) is int and size.is_constant for size in sizes):
        return None
    group = {role: index for index, role in enumerate(STACK_ORDER)}
    live = [0] * len(STACK_ORDER)
    for value, size in zip(sweep.residents, sweep.resident_sizes, strict=True):
        live[group[value.role]] += int(size)
    groups = [group[v.role] for v in sweep.storages]
    # the buffers' integers, found once per size object (`MemorySweep.numbers`: the
    # liveness's totals read them); ints, as checked above
    numbers = cast(list[int], sweep.numbers)
    allocates, events = sweep.allocates, sweep.events
    rows: list[tuple[int, ...]] = []
    for node, freed in zip(events.order, events.frees, strict=True):
        for buffer in allocates[node]:
            live[groups[buffer]] += numbers[buffer]
        rows.append(tuple(live))
        for buffer in freed:
            live[groups[buffer]] -= numbers[buffer]
    shown = [i for i in range(len(STACK_ORDER)) if any(map(itemgetter(i), rows))]
    return RoleNumbers(tuple(STACK_ORDER[i] for i in shown), _columns(rows, shown))


@dataclass(frozen=True)
class RoleNumbers:
    """A bound graph's role timeline in bytes (`timeline_numbers`)."""

    roles: tuple[Role, ...]
    bytes_per_step: tuple[tuple[int, ...], ...]  # [step][index in roles]


def _columns(rows: Sequence[tuple[T, ...]], shown: list[int]) -> tuple[tuple[T, ...], ...]:
    """The `shown` columns of each row (itemgetter: no generator per row of 10^5 steps)."""
    if len(shown) < 2:
        return tuple(tuple(row[i] for i in shown) for row in rows)
    return tuple(map(itemgetter(*shown), rows))


@dataclass(frozen=True)
class PhaseSpan:
    phase: Phase  # FORWARD, BACKWARD or OPTIMIZER (a StrEnum: == "forward" holds)
    first_step: int
    last_step: int  # inclusive


_SPAN_ORDER = (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER)


def phase_spans(nodes: Sequence[Node]) -> tuple[PhaseSpan, ...]:
    """Forward, backward and optimizer as consecutive spans of `nodes` (a schedule), read from
    `Node.phase`; () when no node is in a training phase (inference).

    A step runs its phases in that order, so each span ends at its phase's last node and the
    last span runs to the end. A node out of that order stays in the span around it: the
    .grad tensors gradient accumulation starts with (BACKWARD, graphmem/training/) show with
    the forward, and the step's trailing `loss.detach()` with the optimizer.
    """
    last = {node.phase: step for step, node in enumerate(nodes)}
    present = [phase for phase in _SPAN_ORDER if phase in last]
    spans: list[PhaseSpan] = []
    start = 0
    for phase in present:
        end = len(nodes) - 1 if phase is present[-1] else last[phase]
        if end >= start:
            spans.append(PhaseSpan(phase, start, end))
            start = end + 1
    return tuple(spans)


def training_phases(graph: Graph) -> tuple[PhaseSpan, ...]:
    """The phase spans of a graph in its own order (see `phase_spans`)."""
    return phase_spans(graph.nodes)
