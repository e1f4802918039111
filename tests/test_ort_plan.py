"""onnxruntime's order and reuse plan over value numbers (graphmem/runtime_models/ort_plan.py)
equal the same rules applied value by value (`_reference_*` below: the planner as written
before the numbering, each rule on the Value objects), on random graphs with views, in-place
ops, graph outputs, repeated and missing inputs, scalars and shapes onnxruntime cannot name."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import pytest

from graphmem.core.ir import Graph, Node, Role
from graphmem.core.ort_view import PlanShape
from graphmem.runtime_models.ort_kernels import ALIAS_OPS, CONTRIB_INPLACE_INPUT, INPLACE_OPS
from graphmem.runtime_models.ort_plan import make_layout, ort_execution_order
from tests.helpers.ort_reference import plain_order
from tests.helpers.random_plans import random_graph


def _reference_plan(graph: Graph, order: Sequence[Node],
                    shapes: Mapping[str, PlanShape | None]) -> tuple[dict[str, str], list[int]]:
    """Each value's buffer owner by name, and the (in place, alias, reused) counts."""
    outputs = {v.name for v in graph.outputs}
    owner = {name: name for name in graph.values}
    uses = {name: int(v.producer is None or name in outputs) for name, v in graph.values.items()}
    for node in order:
        for value in [*node.present_inputs, *node.outputs]:
            uses[value.name] += 1
    free: dict[object, list[str]] = {}
    counts = [0, 0, 0]

    def key(name: str) -> tuple[int, PlanShape] | None:
        shape, bits = shapes.get(name), graph.values[name].dtype.bits
        return None if shape is None or None in shape or bits <= 0 else (bits, shape)

    def same_size(a: str, b: str) -> bool:  # SameSize: both shapes named, dim by dim
        return key(a) is not None and key(a) == key(b)

    for node in order:
        for position, value in enumerate(node.outputs):
            name = value.name
            if name in outputs:
                continue
            taken = None
            contrib = CONTRIB_INPLACE_INPUT.get((node.domain, node.op_type))
            source = node.input(contrib) if contrib is not None else (
                node.inputs[0] if node.inputs and node.domain == "" else None)
            if position == 0 and source is not None and node.op_type in ALIAS_OPS \
                    and contrib is None:
                counts[1] += 1
                taken = owner[source.name]
            elif position == 0 and source is not None \
                    and (contrib is not None or node.op_type in INPLACE_OPS) \
                    and uses[owner[source.name]] == 1 and same_size(source.name, name):
                counts[0] += 1
                taken = owner[source.name]
            elif (k := key(name)) is not None and k[1] and uses[name] > 1 and free.get(k):
                counts[2] += 1
                taken = free[k].pop()
            if taken is not None:
                owner[name] = taken
                uses[taken] += uses[name]
        for value in [*node.present_inputs, *node.outputs]:
            held = owner[value.name]
            uses[held] -= 1
            if uses[held] == 0 and key(held) is not None:
                free.setdefault(key(held), []).append(held)
    return owner, counts


def _reference_steps(graph: Graph, order: Sequence[Node], owner: Mapping[str, str]
                     ) -> tuple[list[tuple[str, int, int, str]], dict[str, list[tuple[int, int]]]]:
    step_of = {id(node): step for step, node in enumerate(order)}
    end = len(order) - 1
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for step, node in enumerate(order):
        for value in node.outputs:
            first.setdefault(owner[value.name], step)
        for value in node.present_inputs:
            last[owner[value.name]] = step
    outputs = {v.name for v in graph.outputs}
    buffers = []
    for name, step in first.items():
        producer = graph.values[name].producer
        if producer is None or id(producer) not in step_of:
            continue
        to_end = name in outputs or name not in last
        buffers.append((name, step, end if to_end else last[name],
                        "output" if name in outputs else "planned"))
    spans: dict[str, list[tuple[int, int]]] = {}
    for start, node in enumerate(order):
        for value in node.outputs:
            reads = [step_of[id(n)] for n in value.consumers if id(n) in step_of]
            stop = end if value.role is Role.OUTPUT else max(reads, default=start)
            spans.setdefault(owner[value.name], []).append((start, stop))
    return buffers, spans


@pytest.mark.parametrize("seed", range(300))
def test_numbered_plan_equals_the_plan_value_by_value(seed: int) -> None:
    rng = random.Random(seed)
    graph, shapes = random_graph(rng, rng.randint(1, 40))
    graph.check()
    order = ort_execution_order(graph)
    assert order == plain_order(graph)
    layout = make_layout(graph, shapes, None)
    owner, counts = _reference_plan(graph, order, shapes)
    assert layout.order == tuple(order)
    assert layout.storage == owner
    assert list(layout.counts) == counts
    buffers, spans = _reference_steps(graph, order, owner)
    assert [(v.name, first, last, kind) for v, first, last, kind in layout.buffers] == buffers
    assert layout.live_spans == spans
    assert list(layout.live_spans) == list(spans)  # the same order: the notes list them


def test_random_graphs_exercise_every_rule() -> None:
    """The generator makes views, in-place writes and reuse from the free list (a property
    test whose graphs never reuse a buffer would prove nothing)."""
    totals = [0, 0, 0]
    for seed in range(300):
        rng = random.Random(seed)
        graph, shapes = random_graph(rng, rng.randint(1, 40))
        for i, count in enumerate(make_layout(graph, shapes, None).counts):
            totals[i] += count
    assert min(totals) > 20, totals
