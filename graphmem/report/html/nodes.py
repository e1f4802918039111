"""The HTML report's compute tables: FLOPs by op type, and every node (the first rows as HTML,
every row as data for the script).

Without JavaScript the page shows the first MAX_NODE_ROWS nodes as a plain table. With it, the
script pages through all of them (sorted, filtered by name / op / module) from one compact
JSON array, so a graph of tens of thousands of nodes opens as fast as a small one. The
array bypasses the page's escaping (it is Markup), so its strings are made printable here.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from markupsafe import Markup

from graphmem.core.safe_text import NAME_MAX_CHARS, printable, printable_text
from graphmem.core.symbolic import SymInt, sum_sizes
from graphmem.passes.costs import CostReport, CostStatus, NodeCost, qualified_op
from graphmem.report.html.quantity import (
    Quantity,
    bytes_quantity,
    count_quantity,
    format_time,
    percent,
)
from graphmem.report.node_kinds import shared_node_kinds

if TYPE_CHECKING:  # a GPU's roofline: imported where the analysis has one
    from graphmem.passes.roofline import NodeTime, RooflineResult

MAX_NODE_ROWS = 500  # rows written as HTML; the script shows them all
PAGE_ROWS = 100  # rows per page when the script runs

# The order of the fields of one node in the script's data (see templates/partials/script.js.j2)
DATA_FIELDS = ("step", "name", "op", "module", "phase", "shapes", "params", "macs", "macs_text",
               "flops", "flops_text", "bytes", "bytes_text", "time_s", "time_text", "bound",
               "status", "note")


def op_names(costs: CostReport) -> Callable[[str], str]:
    """Node name -> the op as shown: `Conv`, or `com.microsoft.FusedGemm` outside ai.onnx,
    for the few nodes the page describes (the peak's, the timeline's targets): looked up by
    name, the last node of a name as a dict of every node's op would have it, and each op's
    text made once (10^5 nodes are a handful of ops)."""
    by_name = dict(zip(map(_NAME, costs.nodes), costs.nodes, strict=True))
    shown: dict[tuple[str, str], str] = {}

    def op_of(name: str) -> str:
        cost = by_name[name]
        op = shown.get((cost.domain, cost.op_type))
        if op is None:
            op = shown[(cost.domain, cost.op_type)] = printable(qualified_op(cost))
        return op

    return op_of


class NodeRow(NamedTuple):
    step: int
    name: str
    op: str
    module: str
    phase: str
    output_shapes: str
    params: int
    macs: Quantity
    flops: Quantity
    output_bytes: Quantity
    time_s: float | None
    time_text: str
    bound: str
    status: str
    note: str

    def data(self) -> list[Any]:
        counted = self.status == CostStatus.OK
        return [self.step, self.name, self.op, self.module, self.phase, self.output_shapes,
                self.params,
                self.macs.probe if counted else -1, self.macs.text if counted else "not counted",
                self.flops.probe if counted else -1,
                self.flops.text if counted else "not counted",
                self.output_bytes.probe, self.output_bytes.text,
                self.time_s, self.time_text, self.bound, self.status, self.note]


class NodeTable(NamedTuple):
    rows: tuple[NodeRow, ...]  # the first MAX_NODE_ROWS, written as HTML
    total: int
    has_times: bool  # a GPU with every dim bound: estimated time and bound per node
    has_phases: bool
    data: Markup  # every row, as a JSON array safe inside <script>
    page_rows: int = PAGE_ROWS

    @property
    def truncated(self) -> bool:
        return len(self.rows) < self.total

    @property
    def fields(self) -> tuple[str, ...]:
        return DATA_FIELDS


def node_table(costs: CostReport, roofline: RooflineResult | None,
               phases: Sequence[str]) -> NodeTable:
    times: Sequence[NodeTime | None] = roofline.nodes if roofline else [None] * len(costs.nodes)
    nodes = enumerate(zip(costs.nodes, times, phases, strict=True))
    rows = [node_row(step, cost, time, phase) for step, (cost, time, phase)
            in islice(nodes, MAX_NODE_ROWS)]
    # the rest only as data text: no NodeRow (and its Quantities) for tens of thousands of nodes
    rest = _row_texts(costs, roofline, phases, len(rows))
    return NodeTable(
        rows=tuple(rows),
        total=len(costs.nodes),
        has_times=roofline is not None,
        has_phases=any(phases),
        data=script_json_text("[" + ",".join([*(_DUMPS(row.data()) for row in rows), *rest])
                              + "]"),
    )


def node_row(step: int, cost: NodeCost, time: NodeTime | None, phase: str = "") -> NodeRow:
    counted = cost.status is CostStatus.OK
    return NodeRow(
        step=step,
        name=printable(cost.name),
        op=printable(qualified_op(cost)),
        module=printable(cost.module_path),
        phase=phase,
        output_shapes=printable_text(", ".join(cost.output_shapes)),
        params=cost.param_count,
        macs=count_quantity(cost.macs if counted else None),
        flops=count_quantity(cost.flops if counted else None, "FLOP"),
        output_bytes=bytes_quantity(cost.bytes_written),
        time_s=time.est_time_s if time else None,
        time_text=format_time(time.est_time_s) if time else "",
        bound=time.bound if time else "",
        status=cost.status.value,
        note=printable_text(cost.note),
    )


# script_json's encoder: a list encodes as "[" + its items' texts joined by "," + "]"
_DUMPS = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_TEXT = json.encoder.encode_basestring  # a str as _DUMPS writes it


def _row_texts(costs: CostReport, roofline: RooflineResult | None, phases: Sequence[str],
               start: int) -> Iterator[str]:
    """`_DUMPS(node_row(...).data())` of each node from `start` on, without the rows: a
    kind's fields (report/node_kinds.py: the op as shown; the shapes, parameters, quantities,
    time, status and note) encoded once, each module path and phase once, and the step and
    name per node."""
    kinds = shared_node_kinds(costs, roofline)
    nodes = costs.nodes
    ops, tails = [], []  # per kind: the op; the fields after the phase
    for index in kinds.first:
        cost = nodes[index]
        op, shapes, quantities, status = _kind_texts(cost)
        params = cost.param_count
        time = _time_text(roofline.nodes[index] if roofline else None)
        ops.append(op)
        tails.append(shapes + "," + (int.__repr__(params) if params.__class__ is int
                                     else _DUMPS(params)) + ","
                     + quantities + "," + time + "," + status)
    of_node = kinds.of_node[start:]
    paths = list(map(_MODULE_PATH, nodes[start:]))
    modules = {path: _TEXT(printable(path)) for path in set(paths)}
    phase_texts = {phase: _TEXT(phase) for phase in set(phases[start:])}
    return map("[{},{},{},{},{},{}]".format, range(start, len(nodes)),
               map(_TEXT, _shown_names(list(map(_NAME, nodes[start:])))),
               map(ops.__getitem__, of_node), map(modules.__getitem__, paths),
               map(phase_texts.__getitem__, phases[start:]), map(tails.__getitem__, of_node))


_NAME = attrgetter("name")
_MODULE_PATH = attrgetter("module_path")


def _shown_names(names: list[str]) -> Iterable[str]:
    """`printable` of each name: the names themselves where all are short and printable (one
    test of their joined text, which is printable when each of them is)."""
    if max(map(len, names), default=0) <= NAME_MAX_CHARS and "".join(names).isprintable():
        return names
    return map(printable, names)


def _time_text(time: NodeTime | None) -> str:
    """The time, its text and the bound, as JSON text."""
    if time is None:
        return 'null,"",""'
    return _DUMPS([time.est_time_s, format_time(time.est_time_s), time.bound])[1:-1]


def _kind_texts(cost: NodeCost) -> tuple[str, str, str, str]:
    """The op, the shapes, the six quantity fields and the status and note, as JSON text
    (the parameters and time: `_row_texts`)."""
    counted = cost.status is CostStatus.OK
    macs = count_quantity(cost.macs) if counted else None
    flops = count_quantity(cost.flops, "FLOP") if counted else None
    written = bytes_quantity(cost.bytes_written)
    quantities = [macs.probe if macs else -1, macs.text if macs else "not counted",
                  flops.probe if flops else -1, flops.text if flops else "not counted",
                  written.probe, written.text]
    return (_TEXT(printable(qualified_op(cost))),
            _TEXT(printable_text(", ".join(cost.output_shapes))),
            _DUMPS(quantities)[1:-1],
            _DUMPS([cost.status.value, printable_text(cost.note)])[1:-1])


def script_json(value: Any) -> Markup:
    """JSON that is safe inside <script type="application/json">: no '<', '>' or '&' in it."""
    return script_json_text(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def script_json_text(text: str) -> Markup:
    """script_json of the value `text` encodes (compact, not ASCII-only)."""
    for char, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return Markup(text)  # escaped above: it cannot end the script element


# ----- FLOPs by op type -----------------------------------------------------------------------


class OpShare(NamedTuple):
    op: str
    nodes: int
    macs: Quantity
    flops: Quantity
    percent: float  # of all FLOPs, at the probe value


class OpTable(NamedTuple):
    rows: tuple[OpShare, ...]  # ops with FLOPs, largest first
    no_arithmetic: tuple[tuple[str, int], ...]  # ops that count 0 FLOPs (data movement)
    not_counted: tuple[tuple[str, int], ...]  # unsupported / shape unknown / control flow


def op_table(costs: CostReport, roofline: RooflineResult | None = None) -> OpTable:
    """The FLOPs by op. A kind of node (report/node_kinds.py; `roofline`: the one the node
    table reads, so both share the kinds found once) has one op, status and count of each,
    so where every count is a number an op's total is each kind's count times its nodes;
    counts in free dims are added node by node, in order (a formula's terms keep the order
    they first appear in: `_node_totals`)."""
    kinds = shared_node_kinds(costs, roofline)
    firsts = [costs.nodes[index] for index in kinds.first]
    if not all(c.macs.is_constant and c.flops.is_constant for c in firsts):
        return _op_table(*_node_totals(costs))
    nodes_of = Counter(kinds.of_node)
    groups: dict[str, list[tuple[NodeCost, int]]] = {}  # op -> its kinds, first node first
    not_counted: Counter[str] = Counter()
    for kind, cost in enumerate(firsts):
        op = printable(qualified_op(cost))
        if cost.status is CostStatus.OK:
            groups.setdefault(op, []).append((cost, nodes_of[kind]))
        else:
            not_counted[f"{op} ({cost.status.value.replace('_', ' ')})"] += nodes_of[kind]
    totals = {op: (count_quantity(SymInt.const(sum([c.macs.constant_term * n for c, n in group]))),
                   count_quantity(SymInt.const(sum([c.flops.constant_term * n
                                                    for c, n in group])), "FLOP"),
                   sum([n for _, n in group]))
              for op, group in groups.items()}
    return _op_table(totals, not_counted)


def _node_totals(costs: CostReport) -> tuple[dict[str, tuple[Quantity, Quantity, int]],
                                                Counter[str]]:
    """Each counted op's MACs, FLOPs and nodes, summed over its nodes in order; the nodes not
    counted, by op and status."""
    counted: dict[str, list[NodeCost]] = {}
    not_counted: Counter[str] = Counter()
    for cost in costs.nodes:
        op = printable(qualified_op(cost))
        if cost.status is CostStatus.OK:
            counted.setdefault(op, []).append(cost)
        else:
            not_counted[f"{op} ({cost.status.value.replace('_', ' ')})"] += 1
    totals = {op: (count_quantity(sum_sizes(n.macs for n in group)),
                   count_quantity(sum_sizes(n.flops for n in group), "FLOP"), len(group))
              for op, group in counted.items()}
    return totals, not_counted


def _op_table(totals: dict[str, tuple[Quantity, Quantity, int]], not_counted: Counter[str]
              ) -> OpTable:
    all_flops = sum(flops.probe for _, flops, _ in totals.values())
    rows = [OpShare(op, count, macs, flops, percent(flops.probe, all_flops))
            for op, (macs, flops, count) in totals.items() if flops.exact != 0]
    zero = [(op, count) for op, (_, flops, count) in totals.items() if flops.exact == 0]
    return OpTable(
        rows=tuple(sorted(rows, key=lambda r: (-r.flops.probe, r.op))),
        no_arithmetic=tuple(sorted(zero, key=lambda item: (-item[1], item[0]))),
        not_counted=tuple(sorted(not_counted.items())),
    )
