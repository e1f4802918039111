"""The smallest pieces of the page the templates call per row: a quantity, a share bar and a
percentage, as HTML (Markup), called as functions (`{{ qty(row.size) }}`).

Each is what a jinja2 macro of the same body writes under the page's settings (page.py
`report_environment`: every value made inert, then escaped), made here because a macro
call costs about 10 us: a 22,000-node graph's page calls these some 2,500 times (its first
500 nodes and 500 live tensors). tests/test_html_cells.py renders each macro's body beside
them on awkward values.
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup, escape

from graphmem.core.safe_text import NAME_MAX_CHARS, printable_text
from graphmem.report.html.quantity import Quantity


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
    """`{{ value }}` as the page writes it."""
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
