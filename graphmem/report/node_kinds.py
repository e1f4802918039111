"""The nodes grouped by what their rows write alike, for the JSON and HTML writers.

A decoder's layers repeat a few dozen kinds of node: nodes of one kind differ in their name,
module path, step and phase alone, so each writer encodes a kind's fields once and writes a
row as its node's own strings around them. The kind of every node is found once per analysis
(`shared_node_kinds`) and read by both writers, which run on the same results one after the
other.

A kind is the node's cost fields (op, shapes, status, note, the four counts, its parameters)
and its roofline time (time, bound, intensity), compared by value, except where equal values
are written apart: 0.0 and -0.0, 1 and 1.0 compare equal, so a time that is not a nonzero
float is compared by its class and repr (a NaN, unequal to itself, is a kind of its own).
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING

from graphmem.passes.costs import CostReport, NodeCost

if TYPE_CHECKING:  # a GPU's roofline: imported where the analysis has one
    from graphmem.passes.roofline import NodeTime, RooflineResult

# the cost fields a row writes, besides the node's name and module path
_COST_FIELDS = attrgetter("op_type", "domain", "output_shapes", "status", "note", "macs",
                          "flops", "bytes_read", "bytes_written", "param_count")


@dataclass(frozen=True)
class NodeKinds:
    of_node: list[int]  # node index -> its kind
    first: list[int]  # kind -> the index of its first node, whose fields the kind's text shows


def node_kinds(nodes: Sequence[NodeCost], times: Sequence[NodeTime] | None,
               groups: Sequence[int] = ()) -> NodeKinds:
    """Each node's kind, numbered in order of first appearance. `groups`: the costs' signature
    numbers (`CostReport.groups`, () where unknown): nodes of one number >= 0 share every cost
    field a kind reads (passes/costs.py `_renamed`), so a node whose time's fields are the
    very objects of its number's first node is of that node's kind, found without its key
    (22,000 nodes of 48 numbers: the key tuples and their hashing were this loop's time)."""
    kinds: dict[Hashable, int] = {}
    of_node: list[int] = []
    first: list[int] = []
    found = kinds.get
    node_times: Sequence[NodeTime | None] = [None] * len(nodes) if times is None else times
    numbers = groups if len(groups) == len(nodes) else repeat(-1, len(nodes))
    # a signature number -> its first node's kind and time fields (the same objects: the
    # same key, whose items compare by identity first, a NaN included)
    by_number: dict[int, tuple[int, object, object, object]] = {}
    seen = by_number.get
    for index, (cost, time, number) in enumerate(zip(nodes, node_times, numbers, strict=True)):
        if time is None:
            seconds = bound = intensity = None
        else:
            seconds, bound = time.est_time_s, time.bound
            intensity = time.intensity_flops_per_byte
        known = seen(number)
        if known is not None and known[1] is seconds and known[2] is bound \
                and known[3] is intensity:
            of_node.append(known[0])
            continue
        if time is None:
            key: Hashable = _COST_FIELDS(cost)
        else:  # the time's floats inline
            key = (_COST_FIELDS(cost),
                   seconds if seconds.__class__ is float and seconds else _exact(seconds),
                   bound,
                   intensity if intensity.__class__ is float and intensity else _exact(intensity))
        kind = found(key)
        if kind is None:
            kind = kinds[key] = len(first)
            first.append(index)
        if number >= 0 and known is None:
            by_number[number] = (kind, seconds, bound, intensity)
        of_node.append(kind)
    return NodeKinds(of_node, first)


def _exact(value: object) -> Hashable:
    """A key for a time that is not a nonzero float: equal where it is written alike (0.0 and
    -0.0, 1, 1.0 and True compare equal and are written apart)."""
    return value.__class__, repr(value)


class _LastKinds:
    """The kinds of the last results asked for, held by weak references to them (one tuple,
    replaced whole: a reader sees one analysis's entry or the other's)."""

    def __init__(self) -> None:
        self.last: tuple[weakref.ref[CostReport], weakref.ref[RooflineResult] | None,
                         NodeKinds] | None = None

    def get(self, costs: CostReport, roofline: RooflineResult | None) -> NodeKinds:
        last = self.last
        if last is not None and last[0]() is costs and (
                last[1] is None if roofline is None else
                last[1] is not None and last[1]() is roofline):
            return last[2]
        kinds = node_kinds(costs.nodes, roofline.nodes if roofline else None, costs.groups)
        self.last = (weakref.ref(costs), None if roofline is None else weakref.ref(roofline),
                     kinds)
        return kinds


shared_node_kinds = _LastKinds().get
