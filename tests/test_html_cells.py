"""The page's per-row pieces as functions (report/html/cells.py: qty, bar, pct) write what the
jinja2 macros they replaced wrote, under the page's own settings (page.py
`report_environment`: every `{{ }}` made inert, then escaped): the macros' bodies, as they
were in templates/partials/macros.html.j2, rendered beside the functions on values with
markup, quotes, controls, line separators, lone surrogates, names around the 200-character
cut, formulas, NaN, infinities and both zeros; and the timeline's numbers per step
(memory.py `_probes`) are `probe` of each size, bound or free."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import jinja2
import pytest
from markupsafe import Markup

from graphmem.core.symbolic import SymInt
from graphmem.report.html.cells import inert
from graphmem.report.html.memory import _probes
from graphmem.report.html.page import report_environment
from graphmem.report.html.quantity import Quantity, probe

# the macros as they were (templates/partials/macros.html.j2 before cells.py)
MACROS = (
    '{% macro qty_macro(q, unit="bytes") -%}\n'
    '<span class="num{{ \' formula\' if q.is_formula }}" title="{{ q.exact_text }} {{ unit }}">'
    "{{ q.text }}</span>\n"
    "{%- endmacro %}\n"
    '{% macro bar_macro(percent, kind="") -%}\n'
    '<span class="bar-track"><span class="bar {{ kind }}" style="width: '
    "{{ '%.2f' | format([percent, 100.0] | min) }}%\"></span></span>\n"
    "{%- endmacro %}\n"
    "{% macro pct_macro(percent) -%}\n"
    "{% if percent > 0 and percent < 0.1 %}&lt;0.1%{% else %}{{ '%.1f' | format(percent) }}%"
    "{% endif %}\n"
    "{%- endmacro %}\n"
)
CALLS = """{% import "macros" as m %}\
{{ m.qty_macro(q, unit) }}|{{ qty(q, unit) }}|{{ m.qty_macro(q) }}|{{ qty(q) }}|\
{{ m.bar_macro(percent, kind) }}|{{ bar(percent, kind) }}|{{ m.bar_macro(percent) }}|\
{{ bar(percent) }}|{{ m.pct_macro(percent) }}|{{ pct(percent) }}"""
TEXTS = ("", "1.5 GiB", "<b>&amp;", 'q"u\'ote', "a\u2028b", "\x00\x1b[31m", "tab\tnl\n",
         "\ud800", "caf\u00e9 \U0001f600", "x" * 200, "x" * 201, "a " * 150, Markup("<i>m</i>"))
PERCENTS = (0.0, -0.0, 0.05, 0.1, 0.0999, 12.345, 99.995, 100.0, 150.0, -3.0, math.nan,
            math.inf, -math.inf, 7)


@pytest.fixture(scope="module")
def template() -> jinja2.Template:
    return report_environment(jinja2.DictLoader({"macros": MACROS, "calls": CALLS})
                              ).get_template("calls")


@pytest.mark.parametrize("seed", range(20))
def test_cells_write_what_the_macros_wrote(template: jinja2.Template, seed: int) -> None:
    pick = random.Random(seed).choice
    exact = pick((0, 12_345_678, 10**30, pick(TEXTS), "4096*batch + 12"))
    quantity = Quantity(exact, pick(TEXTS), 5, pick(TEXTS))
    written = template.render(q=quantity, unit=pick(TEXTS), percent=pick(PERCENTS),
                              kind=pick(TEXTS)).split("|")
    assert len(written) == 10
    for macro, function in zip(written[::2], written[1::2], strict=True):
        assert function == macro


def test_inert_fast_path_is_printable_text() -> None:
    from graphmem.core.safe_text import printable_text

    for text in TEXTS:
        expected = text if isinstance(text, Markup) else printable_text(text, None,
                                                                        multiline=True)
        assert inert(text) == expected and type(inert(text)) is type(expected)
    assert inert(7) == 7 and inert(None) is None


def test_probes_per_step() -> None:
    batch = SymInt.symbol("batch")
    bound = [SymInt.const(n) for n in (0, 1, 2**40, 7, Fraction(7, 2))]  # 3.5 B: 4
    free = [*bound, batch * 3 + 1]
    assert _probes(bound) == [probe(s) for s in bound] == [0, 1, 2**40, 7, 4]
    assert _probes(free) == [probe(s) for s in free]
    assert _probes([]) == []
