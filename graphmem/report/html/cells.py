"""The smallest pieces of the page the templates call per row: a quantity, a share bar and a
percentage, as HTML (Markup), called as functions (`{{ qty(row.size) }}`).

Each is what a jinja2 macro of the same body writes under the page's settings (page.py
`report_environment`: every value made inert, then escaped), made here because a macro
call costs about 10 us: a 22,000-node graph's page calls these some 2,500 times (its first
500 nodes and 500 live tensors). tests/test_html_cells.py renders each macro's body beside
them on awkward values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from markupsafe import Markup, escape

from graphmem.core.safe_text import NAME_MAX_CHARS, printable_text
from graphmem.report.html.quantity import Quantity

if TYPE_CHECKING:
    from graphmem.report.html.charts import HoverTarget
    from graphmem.report.html.memory import LiveRow
    from graphmem.report.html.nodes import NodeRow


def inert(value: Any) -> Any:
    """What page.py's `finalize` does to every `{{ ... }}` before it is escaped: text made
    printable (Markup is the view's own markup, already escaped: the node data, `| safe`
    entities). A model's names are shortened where the view takes them; this bounds every
    other string, a name quoted in a sentence too."""
    if value.__class__ is str and len(value) <= NAME_MAX_CHARS and value.isprintable():
        return value  # printable_text's own first answer, without its calls
    if isinstance(value, str) and not isinstance(value, Markup):
        return printable_text(value, None, multiline=True)
    return value


def _shown(value: Any) -> str:
    """`{{ value }}` as the page writes it. Without markupsafe's calls where they change
    nothing: an int's or float's text has none of the five characters it escapes, nor has a
    short printable string that holds none of them."""
    kind = value.__class__
    if kind is int or kind is float:
        return str(value)
    if kind is str and len(value) <= NAME_MAX_CHARS and value.isprintable() and not (
            "&" in value or "<" in value or ">" in value or "'" in value or '"' in value):
        return value
    return str(escape(inert(value)))


def qty(q: Quantity, unit: str = "bytes") -> Markup:
    """A quantity: the formatted text, the exact integer or formula as a tooltip."""
    formula = " formula" if q.is_formula else ""
    return Markup(f'<span class="num{formula}" title="{_shown(q.exact_text)} {_shown(unit)}">'
                  f"{_shown(q.text)}</span>")


def bar(percent: float, kind: str = "") -> Markup:
    """A horizontal share bar, as plain HTML: the width is the percentage (at most 100)."""
    width = "%.2f" % min([percent, 100.0])  # noqa: UP031 (jinja2's `format` filter: `%`)
    return Markup(f'<span class="bar-track"><span class="bar {_shown(kind)}" style="width:'
                  f' {_shown(width)}%"></span></span>')


def pct(percent: float) -> Markup:
    """A percentage, with "<0.1%" for the tiny ones rather than "0.0%"."""
    if percent > 0 and percent < 0.1:
        return Markup("&lt;0.1%")
    return Markup(_shown("%.1f" % percent) + "%")  # noqa: UP031


_BREAK_AFTER = "._/"  # where a long module path or node name may wrap


def breakable(text: str) -> Markup:
    """`text` escaped, with a line-break opportunity (<wbr>) after each `.`, `_` and `/`, so
    `transformer.h.0.attn` wraps between its parts, not inside a word."""
    escaped = str(Markup.escape(printable_text(text, None)))
    for mark in _BREAK_AFTER:
        escaped = escaped.replace(mark, f"{mark}<wbr>")
    return Markup(escaped)


def hover_rect(target: HoverTarget, top: float, bottom: float) -> Markup:
    """One tooltip target of the memory timeline (templates/partials/timeline.html.j2), as
    its six `{{ }}`s wrote it: one call a target (a 22,000-node graph has about 1,900)."""
    return Markup(f'<rect x="{_shown(target.x)}" y="{_shown(top)}" width="{_shown(target.width)}"'
                  f' height="{_shown(bottom - top)}" data-step="{_shown(target.step)}"><title>'
                  f"{_shown(target.title)}</title></rect>")


def live_row(row: LiveRow, more: bool) -> Markup:
    """One row of the tensors live at the peak (templates/partials/live_tensors.html.j2), from
    `<tr` to `</tr>`, as the template's cells wrote it (`more`: past the rows shown first)."""
    share = "bar-resident" if row.resident else "bar-activation"
    module = _named(row.module, row.module.startswith("(")) if row.module else ""
    return Markup(
        f'<tr data-n="live"{_MORE if more else ""}>\n'
        f'        <td class="name"><code>{_shown(breakable(row.name))}</code></td>\n'
        f'        <td class="r" data-sort="{_shown(row.size.probe)}">{qty(row.size)}</td>\n'
        f'        <td data-sort="{_shown(row.percent)}" class="share">{bar(row.percent, share)}'
        f" {pct(row.percent)}</td>\n"
        f"        <td>{_shown(row.role)}</td>\n"
        f'        <td class="shapes"><code>{_shown(row.shape)}</code></td>'
        f"<td>{_shown(row.dtype)}</td>\n"
        f'        <td class="name module">{module}</td>\n'
        f'        <td class="name">{_named(row.made_by, row.resident)}</td>\n'
        f'        <td class="name">{_named(row.kept_alive_by, row.kept_alive_by.startswith("("))}'
        "</td>\n"
        "      </tr>")


_MORE = ' class="more"'


def _named(name: str, note: bool) -> str:
    """A name cell's inside: a note such as "(resident)" in <em>, else the name in <code>,
    with its line breaks."""
    return f"<em>{_shown(name)}</em>" if note else f"<code>{_shown(breakable(name))}</code>"


def node_table_row(row: NodeRow, has_phases: bool, has_times: bool) -> Markup:
    """One row of the node table (templates/partials/nodes.html.j2), from `<tr` to `</tr>`,
    as the template's cells wrote it: the phase and time cells follow the line before them
    (their `{% if %}` lines kept no indentation and no line end)."""
    status = "" if row.status == "ok" else f' class="status-{_shown(row.status)}"'
    params = row.params
    if row.status != "ok":
        counts = _NOT_COUNTED
    else:
        macs = qty(row.macs, "MACs") if row.macs.exact is not None else _DASH
        flops = qty(row.flops, "FLOPs") if row.flops.exact is not None else _DASH
        counts = (f'        <td class="r" data-sort="{_shown(row.macs.probe)}">{macs}</td>\n'
                  f'        <td class="r" data-sort="{_shown(row.flops.probe)}">{flops}</td>\n')
    phase = f"<td>{_shown(row.phase)}</td>" if has_phases else ""
    time = (f'<td class="r" data-sort="{_shown(-1 if row.time_s is None else row.time_s)}">'
            f"{_shown(row.time_text)}</td><td>{_shown(row.bound)}</td>" if has_times else "")
    note = f' title="{_shown(row.note)}"' if row.note else ""
    return Markup(
        f'<tr id="node-{_shown(row.step)}"{status}>\n'
        f'        <td class="r">{_shown(row.step)}</td><td class="name"><code>{_shown(row.name)}'
        f"</code></td><td>{_shown(row.op)}</td>\n"
        f'        <td class="name">{_shown(row.module)}</td>\n'
        f'{phase}        <td class="shapes"><code>{_shown(row.output_shapes)}</code></td>\n'
        f'        <td class="r" data-sort="{_shown(-1 if params is None else params)}">'
        f'{_shown(_DASH if params is None else f"{params:,}")}</td>\n'
        f"{counts}"
        f'        <td class="r" data-sort="{_shown(row.output_bytes.probe)}">'
        f"{qty(row.output_bytes)}</td>\n"
        f'{time}        <td{note}>{_shown(row.status.replace("_", " "))}</td>\n'
        "      </tr>")


_DASH = "\u2013"  # an unknown count
_NOT_COUNTED = ('        <td class="r" data-sort="-1"><em>not counted</em></td><td class="r"'
                ' data-sort="-1"><em>not counted</em></td>\n')
