"""The node table of the HTML report: the first rows as HTML, every row as data for the script.

Without JavaScript the page shows the first MAX_NODE_ROWS nodes as a plain table. With it, the
script pages through all of them (sorted, filtered by name / op / module) from one compact
JSON array, so a graph of tens of thousands of nodes opens as fast as a small one. The
array bypasses the page's escaping (it is Markup), so its strings are made printable here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from graphmem.report.html.quantity import Quantity, bytes_quantity, count_quantity, format_time
from graphmem.report.safe_text import printable, printable_text

MAX_NODE_ROWS = 500  # rows written as HTML; the script shows them all
PAGE_ROWS = 100  # rows per page when the script runs

# The order of the fields of one node in the script's data (see templates/partials/script.js.j2)
DATA_FIELDS = ("step", "name", "op", "module", "phase", "shapes", "params", "macs", "macs_text",
               "flops", "flops_text", "bytes", "bytes_text", "time_s", "time_text", "bound",
               "status", "note")


@dataclass(frozen=True)
class NodeRow:
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
        counted = self.status == "ok"
        return [self.step, self.name, self.op, self.module, self.phase, self.output_shapes,
                self.params,
                self.macs.probe if counted else -1, self.macs.text if counted else "not counted",
                self.flops.probe if counted else -1,
                self.flops.text if counted else "not counted",
                self.output_bytes.probe, self.output_bytes.text,
                self.time_s, self.time_text, self.bound, self.status, self.note]


@dataclass(frozen=True)
class NodeTable:
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


def node_table(
    nodes: Sequence[Mapping[str, Any]], qualified_op: Sequence[str], phases: Sequence[str]
) -> NodeTable:
    rows = [_row(step, node, qualified_op[step], phases[step]) for step, node in enumerate(nodes)]
    return NodeTable(
        rows=tuple(rows[:MAX_NODE_ROWS]),
        total=len(rows),
        has_times=any(row.time_s is not None for row in rows),
        has_phases=any(phases),
        data=script_json([row.data() for row in rows]),
    )


def _row(step: int, node: Mapping[str, Any], op: str, phase: str) -> NodeRow:
    time_s = node.get("est_time_s")
    return NodeRow(
        step=step,
        name=printable(node["name"]),
        op=printable(op),
        module=printable(node.get("module") or ""),
        phase=phase,
        output_shapes=printable_text(", ".join(node["output_shapes"])),
        params=node["params"],
        macs=count_quantity(node["macs"]),
        flops=count_quantity(node["flops"], "FLOP"),
        output_bytes=bytes_quantity(node["output_bytes"]),
        time_s=time_s,
        time_text=format_time(time_s) if time_s is not None else "",
        bound=node.get("bound") or "",
        status=node["status"],
        note=printable_text(node["note"]),
    )


def script_json(value: Any) -> Markup:
    """JSON that is safe inside <script type="application/json">: no '<', '>' or '&' in it."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return Markup(text)  # escaped above: it cannot end the script element
