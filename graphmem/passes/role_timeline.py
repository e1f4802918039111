"""Live bytes at each step of a schedule, split by role (parameters, gradients, activations...).

The same accounting as graphmem/passes/liveness.py (it reuses that pass's last-use walk), so at
every step the roles add up to `LivenessResult.live_bytes_per_step`: residents by their role
for the whole run, an activation from its producer's step to its last use, views and in-place
results counted once, on the tensor that owns the storage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from graphmem.core.ir import RESIDENT_ROLES, Graph, Node, Role
from graphmem.core.symbolic import SymInt
from graphmem.passes.liveness import _last_use_steps, _size, _values_freed_after


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
    """Bytes live during each step of `order` (default: the model's order), by role."""
    schedule = list(order if order is not None else graph.nodes)
    live: dict[Role, SymInt] = {}
    for value in graph.values.values():
        if value.role in RESIDENT_ROLES and value.alias_of is None:
            live[value.role] = live.get(value.role, SymInt()) + _size(value, sizes)
    frees = _values_freed_after(_last_use_steps(graph, schedule))
    steps: list[dict[Role, SymInt]] = []
    for step, node in enumerate(schedule):
        for value in node.outputs:
            live[value.role] = live.get(value.role, SymInt()) + _size(value, sizes)
        steps.append(dict(live))
        for value in frees.get(step, []):
            live[value.role] = live[value.role] - _size(value, sizes)
    roles = tuple(r for r in STACK_ORDER if any(s.get(r, SymInt()) != 0 for s in steps))
    return RoleTimeline(
        roles=roles,
        bytes_per_step=tuple(tuple(s.get(r, SymInt()) for r in roles) for s in steps),
    )


@dataclass(frozen=True)
class PhaseSpan:
    phase: str  # "forward" | "backward" | "optimizer"
    first_step: int
    last_step: int  # inclusive


_BACKWARD_ROLES = frozenset({Role.ACTIVATION_GRADIENT, Role.GRADIENT})


def training_phases(graph: Graph) -> tuple[PhaseSpan, ...]:
    """Forward, backward and optimizer spans of a traced training step, from tensor roles.

    The step is traced in that order (torch_trace.py), so each phase is one run of steps:
    backward runs from the first node that makes a gradient (of an activation or of a
    parameter) to the last node that makes one or a view of one; the optimizer update is
    the rest. Empty for a graph without gradients (inference).
    """
    marks = [_is_backward(node) for node in graph.nodes]
    if not any(marks):
        return ()
    first = marks.index(True)
    last = len(marks) - 1 - marks[::-1].index(True)
    spans = [PhaseSpan("forward", 0, first - 1), PhaseSpan("backward", first, last),
             PhaseSpan("optimizer", last + 1, len(marks) - 1)]
    return tuple(s for s in spans if s.first_step <= s.last_step)


def _is_backward(node: Node) -> bool:
    """Makes a gradient, or only views of gradients (`t(mm)` of a weight's gradient).

    A node that reads nothing is not: with gradient accumulation the step starts with the
    .grad tensors of the earlier micro-batches (graphmem/training/expand.py)."""
    outputs = node.outputs
    if not node.present_inputs:
        return False
    makes = any(v.alias_of is None and v.role in _BACKWARD_ROLES for v in outputs)
    views = bool(outputs) and all(
        v.alias_of is not None and v.storage.role in _BACKWARD_ROLES for v in outputs)
    return makes or views
