"""onnxruntime's execution order and single-stream reuse plan, replayed over integers.

The rules are ort_cpu.py's (its docstring gives them with their sources in onnxruntime): the
order is `GraphViewer`'s reverse depth-first walk, the plan `ComputeSingleStreamReusePlan`
(alias, MayInplace on a last use of the same size, else the most recently freed buffer of the
same shape), the release `GenerateDeallocationPlan`'s. This module only holds the walk: every
value of the graph is numbered once (`_Steps`), and the planner, the buffers' steps and their
live spans run over lists of those numbers instead of looking each value up by its identity.
A 10^5-node graph makes about a million such look-ups; the plan is the same buffer for buffer
(tests/test_ort_plan.py checks it against the plain planner on random graphs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

from graphmem.core.ir import Graph, Node, Role, Value
from graphmem.core.ort_view import PlanShape
from graphmem.core.symbolic import SymInt
from graphmem.runtime_models.ort_kernels import ALIAS_OPS, CONTRIB_INPLACE_INPUT, INPLACE_OPS

_NONE, _ALIAS, _INPLACE = 0, 1, 2  # what a node's first output may take from an input


def ort_execution_order(graph: Graph) -> list[Node]:
    """onnxruntime's default order: post-order of a reverse DFS from the leaf nodes."""
    nodes = graph.nodes
    return [nodes[i] for i in _reverse_dfs(_Numbered(graph))]


class _Numbered:
    """`graph.nodes` over value numbers (places in `graph.values`): each node's present inputs
    (repeats kept) and outputs. The IR keeps `producer` and `consumers` to exactly these
    (core/ir.py `Graph.check`), so the order and the plan read the numbers instead."""

    def __init__(self, graph: Graph) -> None:
        values = self.values = list(graph.values.values())
        # keyed by the values themselves: hashed by identity (core/ir.py Value: eq=False)
        number = self.number = {v: i for i, v in enumerate(values)}
        nodes = graph.nodes
        self.inputs = [[number[v] for v in node.inputs if v is not None] for node in nodes]
        get = number.__getitem__
        self.outputs = [list(map(get, node.outputs)) for node in nodes]


def _reverse_dfs(numbered: _Numbered) -> list[int]:
    """The nodes' indices in onnxruntime's order: from the leaves (nodes whose outputs no node
    reads), each node's producers pushed in ascending index (so the highest is visited
    first), a node emitted once its inputs are done."""
    inputs, outputs = numbered.inputs, numbered.outputs
    producer = [-1] * len(numbered.values)
    for index, made in enumerate(outputs):
        for value in made:
            producer[value] = index
    read = bytearray(len(numbered.values))
    for used in inputs:
        for value in used:
            read[value] = 1
    is_read, producer_of = read.__getitem__, producer.__getitem__
    # a node index to visit, or its complement (~i < 0) to emit it once its inputs are done
    stack = [index for index, made in enumerate(outputs) if not any(map(is_read, made))]
    visited = bytearray(len(outputs))
    order: list[int] = []
    while stack:
        item = stack.pop()
        if item < 0:
            order.append(~item)
            continue
        if visited[item]:
            continue
        visited[item] = 1
        stack.append(~item)
        found = set(map(producer_of, inputs[item]))
        found.discard(-1)  # an input, a weight: made by no node
        for position in sorted(found):
            if not visited[position]:
                stack.append(position)
    return order


def plan_shape_from_ir(value: Value) -> PlanShape | None:
    """Fallback when the file's own shapes are not at hand: graphmem's shape, where a dim is a
    number or a bare dim name; any other formula counts as a dim onnxruntime cannot name."""
    if value.shape is None:
        return None
    return tuple(_plan_dim(d) for d in value.shape)


def _plan_dim(dim: SymInt | None) -> int | str | None:
    if dim is None:
        return None
    if dim.is_constant:
        return int(dim)
    terms = dim.terms()
    if len(terms) == 1:
        ((monomial, coefficient),) = terms.items()
        if coefficient == 1 and len(monomial) == 1 and monomial[0][1] == 1:
            return str(monomial[0][0])
    return None


@dataclass(frozen=True)
class PlanLayout:
    """The part of a plan the bound dims do not change (onnxruntime plans by its own shapes):
    made once per graph and plan shapes, so a max-batch search re-sizes, never re-plans."""

    order: tuple[Node, ...]
    buffers: tuple[tuple[Value, int, int, str], ...]  # owner, first step, last step, kind
    counts: tuple[int, int, int]  # in place, alias, reused
    positions: tuple[int, ...]  # per buffer, its owner's place in `graph.values`
    values: Sequence[Value] = field(repr=False)  # the graph's values, by number
    owner: Sequence[int] = field(repr=False)  # per value, the number of its buffer's owner
    # per tensor the order makes (in the order made): its buffer's owner, the step making it
    # and the last step it is still to be read
    made: np.ndarray = field(repr=False, compare=False)
    start: np.ndarray = field(repr=False, compare=False)
    last: np.ndarray = field(repr=False, compare=False)

    @cached_property
    def storage(self) -> dict[str, str]:
        """Value name -> name of the value owning its buffer."""
        values, owner = self.values, self.owner
        return {v.name: values[owner[i]].name for i, v in enumerate(values)}

    @cached_property
    def live_spans(self) -> dict[str, list[tuple[int, int]]]:
        """Per buffer owner: the steps during which some tensor placed in it is still to be
        read."""
        values = self.values
        spans: dict[str, list[tuple[int, int]]] = {}
        for held, start, last in zip(self.made.tolist(), self.start.tolist(),
                                     self.last.tolist(), strict=True):
            spans.setdefault(values[held].name, []).append((start, last))
        return spans

    def live_owners(self, step: int) -> set[int]:
        """The buffers (their owners' numbers) holding a tensor still to be read at `step`."""
        return set(self.made[(self.start <= step) & (self.last >= step)].tolist())


def make_layout(graph: Graph, plan_shapes: Mapping[str, PlanShape | None] | None,
                order: Sequence[Node] | None) -> PlanLayout:
    numbered = _Numbered(graph)
    places: list[int] | None
    if order is None:
        places = _reverse_dfs(numbered)
        order = tuple(graph.nodes[i] for i in places)
    else:
        order = tuple(order)
        index = {id(node): i for i, node in enumerate(graph.nodes)}
        found = [index.get(id(node), -1) for node in order]
        places = None if -1 in found else found  # a node outside the graph: read it again
    if plan_shapes is None:
        plan_shapes = {name: plan_shape_from_ir(v) for name, v in graph.values.items()}
    steps = _Steps(graph, numbered, order, places, plan_shapes)
    owner, counts = _plan(steps)
    held = _buffer_steps(steps, owner)
    return PlanLayout(order, held.buffers, counts, held.positions, steps.values, owner,
                      np.array(held.made, np.int64), np.array(held.starts, np.int64),
                      np.array(held.lasts, np.int64))


class _Steps:
    """The graph as numbers: values by their place in `graph.values`, each step's inputs
    (present ones, repeats kept) and outputs, each value's free-list key."""

    def __init__(self, graph: Graph, numbered: _Numbered, order: Sequence[Node],
                 places: Sequence[int] | None, shapes: Mapping[str, PlanShape | None]) -> None:
        self.values = values = numbered.values
        number = numbered.number
        if places is not None:  # the order's nodes by their places in `graph.nodes`
            self.inputs = [numbered.inputs[i] for i in places]
            self.outputs = [numbered.outputs[i] for i in places]
        else:
            self.inputs = [[number[v] for v in node.inputs if v is not None]
                           for node in order]
            self.outputs = [[number[v] for v in node.outputs] for node in order]
        self.graph_outputs = {number[v] for v in graph.outputs if v in number}
        self.resident = [v.producer is None for v in values]
        # only an op that may alias or write in place has a source (most have none)
        self.source = [_first_output_source(node, number) if node.op_type in _TAKES_OVER
                       else _NO_SOURCE for node in order]
        self.key, self.reusable = _shape_keys(values, shapes)


_NO_SOURCE = (_NONE, -1)
_TAKES_OVER = ALIAS_OPS | INPLACE_OPS | {op for _, op in CONTRIB_INPLACE_INPUT}


def _first_output_source(node: Node, number: Mapping[Value, int]) -> tuple[int, int]:
    """(how, input value number): what the node's first output may take over (_ALIAS: the
    input's buffer always; _INPLACE: on the input's last use at the same size)."""
    if not node.inputs:
        return _NONE, -1
    contrib = CONTRIB_INPLACE_INPUT.get((node.domain, node.op_type))
    if contrib is not None:
        source = node.input(contrib)
        return (_INPLACE, number[source]) if source is not None else (_NONE, -1)
    if node.domain not in ("", "ai.onnx") or node.inputs[0] is None:
        return _NONE, -1
    if node.op_type in ALIAS_OPS:
        return _ALIAS, number[node.inputs[0]]
    if node.op_type in INPLACE_OPS:
        return _INPLACE, number[node.inputs[0]]
    return _NONE, -1


def _shape_keys(values: Sequence[Value], shapes: Mapping[str, PlanShape | None]
                ) -> tuple[list[int], list[bool]]:
    """Per value, a number for its (element bits, shape), -1 where a dim is unknown or the
    element size is (a shape with an unnamed dim equals none: `SameSize` and
    `FindReusableTensor` both refuse it); and whether the free list may hold it (not a
    scalar: FindReusableTensor skips those). Residents get -1: they are never placed, and
    never freed (their use count starts at one), so no rule reads their key."""
    numbers: dict[tuple[int, PlanShape], int] = {}
    keys = [-1] * len(values)
    reusable = [False] * len(values)
    for number, value in enumerate(values):
        if value.producer is None:
            continue
        shape = shapes.get(value.name)
        bits = value.dtype.bits
        if shape is None or None in shape or bits <= 0:
            continue
        keys[number] = numbers.setdefault((bits, shape), len(numbers))
        reusable[number] = bool(shape)
    return keys, reusable


def _plan(steps: _Steps) -> tuple[list[int], tuple[int, int, int]]:
    """Each value's buffer owner (a value number) and the (in place, alias, reused) counts."""
    count = len(steps.values)
    owner = list(range(count))
    # ComputeReuseCount: +1 per consumer input slot, +1 for being defined, +1 for a graph
    # input, initializer or graph output (so those are never freed or written over)
    outputs = steps.graph_outputs
    uses = [1 if resident else 0 for resident in steps.resident]
    for value in outputs:
        uses[value] = 1
    for inputs, made in zip(steps.inputs, steps.outputs, strict=True):
        for value in inputs:
            uses[value] += 1
        for value in made:
            uses[value] += 1
    key, reusable = steps.key, steps.reusable
    free: dict[int, list[int]] = {}  # key -> freed owners, the most recently freed last
    inplace = alias = reused = 0
    for inputs, made, (how, source) in zip(steps.inputs, steps.outputs, steps.source,
                                           strict=True):
        for position, value in enumerate(made):
            if value in outputs:
                continue  # kAllocateOutput: its own buffer
            taken = -1
            if position == 0 and how == _ALIAS:
                alias += 1
                taken = owner[source]
            elif position == 0 and how == _INPLACE and uses[owner[source]] == 1 \
                    and key[source] >= 0 and key[source] == key[value]:
                inplace += 1
                taken = owner[source]
            # a tensor nothing reads (uses: its definition only) never takes a freed buffer:
            # onnxruntime's run gives it its own, which later tensors may take (measured:
            # TopK's unread indices, a GRU's or RNN's unread Y_h, test_ort_rnn_scratch.py)
            elif reusable[value] and uses[value] > 1 and (stack := free.get(key[value])):
                reused += 1
                taken = stack.pop()
            if taken >= 0:
                owner[value] = taken
                uses[taken] += uses[value]
        for group in (inputs, made):
            for value in group:
                held = owner[value]
                uses[held] -= 1
                if uses[held] == 0 and reusable[held]:
                    free.setdefault(key[held], []).append(held)
    return owner, (inplace, alias, reused)


def _buffer_steps(steps: _Steps, owner: Sequence[int]) -> _Buffers:
    """Each buffer from its first tensor's step to the last read of any tensor placed in it;
    a graph output, or a buffer nothing reads, is held to the end of the run. And per tensor
    the order makes, in the order made, its buffer's owner, the step making it, the last step
    it is still to be read (a graph output: the end; one nothing reads: its own step)."""
    end = len(steps.outputs) - 1
    last_read = [-1] * len(steps.values)
    for step, inputs in enumerate(steps.inputs):
        for value in inputs:
            last_read[value] = step  # steps ascend: the latest read is the last
    values, outputs = steps.values, steps.graph_outputs
    first: dict[int, int] = {}
    last: dict[int, int] = {}  # per owner, the last read of a tensor placed in it (-1: none)
    made: list[int] = []
    starts: list[int] = []
    lasts: list[int] = []
    made_here = bytearray(len(values))  # made by a node of the order (not an input, a weight)
    for start, outputs_made in enumerate(steps.outputs):
        for number in outputs_made:
            made_here[number] = 1
            held, read = owner[number], last_read[number]
            first.setdefault(held, start)
            if read > last.get(held, -1):
                last[held] = read
            made.append(held)
            starts.append(start)
            lasts.append(end if values[number].role is Role.OUTPUT
                         else (read if read >= 0 else start))
    buffers = []
    positions = []
    for held, step in first.items():
        if not made_here[held]:
            continue  # a view of a graph input or initializer: not the run's to allocate
        held_to_end = held in outputs or last.get(held, -1) < 0
        buffers.append((values[held], step, end if held_to_end else last[held],
                        "output" if held in outputs else "planned"))
        positions.append(held)
    return _Buffers(tuple(buffers), tuple(positions), made, starts, lasts)


class _Buffers(NamedTuple):
    buffers: tuple[tuple[Value, int, int, str], ...]
    positions: tuple[int, ...]
    made: list[int]  # per tensor made, in the order made: its buffer's owner
    starts: list[int]
    lasts: list[int]
