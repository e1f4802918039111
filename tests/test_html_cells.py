"""The page's per-row pieces as functions (report/html/cells.py: qty, bar, pct; a timeline
hover target, a row of the live tensors, a row of the node table) write what the jinja2
macros and template lines they replaced wrote, under the page's own settings (page.py
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
from graphmem.report.html.charts import HoverTarget, PlotBox
from graphmem.report.html.memory import LiveRow, _probes
from graphmem.report.html.nodes import NodeRow
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


# the lines they replaced, as they were (templates/partials/timeline.html.j2 and
# live_tensors.html.j2 before hover_rect and live_row), beside the lines that call them
ROWS = {
    "hover": '{% for h in targets %}<rect x="{{ h.x }}" y="{{ b.top }}" width="{{ h.width }}"'
             ' height="{{ b.bottom - b.top }}" data-step="{{ h.step }}">'
             "<title>{{ h.title }}</title></rect>{% endfor %}\n",
    "hover_rect": "{% for h in targets %}{{ hover_rect(h, b.top, b.bottom) }}{% endfor %}\n",
    "live": (
             '    {% for row in live.rows %}\n'
             '      <tr data-n="live"{% if loop.index > live.shown %} class="more"{% endif %}>\n'
             '        <td class="name"><code>{{ row.name | breakable }}</code></td>\n'
             '        <td class="r" data-sort="{{ row.size.probe }}">{{ qty(row.size) }}</td>\n'
             '        '
             '<td data-sort="{{ row.percent }}" class="share">'
             '{{ bar(row.percent, "bar-resident"'
             ' if row.resident else "bar-activation") }}'
             ' {{ pct(row.percent) }}</td>\n'
             '        <td>{{ row.role }}</td>\n'
             '        <td class="shapes"><code>{{ row.shape }}</code></td>'
             '<td>{{ row.dtype }}</td>\n'
             '        <td class="name module">{% if row.module.startswith("(") %}'
             '<em>{{ row.module }}</em>{% elif row.module %}'
             '<code>{{ row.module | breakable }}</code>{% endif %}</td>\n'
             '        <td class="name">{% if row.resident %}<em>{{ row.made_by }}</em>{% else %}'
             '<code>{{ row.made_by | breakable }}</code>{% endif %}</td>\n'
             '        <td class="name">{% if row.kept_alive_by.startswith("(") %}'
             '<em>{{ row.kept_alive_by }}</em>{% else %}'
             '<code>{{ row.kept_alive_by | breakable }}</code>{% endif %}</td>\n'
             '      </tr>\n'
             '    {% endfor %}\n'),
    "nodes": (
              '    {% for row in table.rows %}\n'
              '      <tr id="node-{{ row.step }}"{% if row.status != "ok" %} class="status-'
              '{{ row.status }}"{% endif %}>\n'
              '        <td class="r">{{ row.step }}</td><td class="name"><code>'
              '{{ row.name }}</code></td><td>{{ row.op }}</td>\n'
              '        <td class="name">{{ row.module }}</td>\n'
              '        {% if table.has_phases %}<td>{{ row.phase }}</td>{% endif %}\n'
              '        <td class="shapes"><code>{{ row.output_shapes }}</code></td>\n'
              '        <td class="r" data-sort="{{ row.params if row.params is not none'
              ' else -1 }}">{{ row.params | thousands if row.params is not none'
              ' else "\u2013" }}</td>\n'
              '        {% if row.status == "ok" %}\n'
              '        {#- a known zero reads 0 (as in "Where the FLOPs go");'
              ' an unknown count, a dash #}\n'
              '        <td class="r" data-sort="{{ row.macs.probe }}">{{ qty(row.macs, "MACs")'
              ' if row.macs.exact is not none else "\u2013" }}</td>\n'
              '        <td class="r" data-sort="{{ row.flops.probe }}">{{ qty(row.flops, "FLOPs")'
              ' if row.flops.exact is not none else "\u2013" }}</td>\n'
              '        {% else %}\n'
              '        <td class="r" data-sort="-1"><em>not counted</em></td>'
              '<td class="r" data-sort="-1"><em>not counted</em></td>\n'
              '        {% endif %}\n'
              '        <td class="r" data-sort="{{ row.output_bytes.probe }}">'
              '{{ qty(row.output_bytes) }}</td>\n'
              '        {% if table.has_times %}<td class="r" data-sort="{{ row.time_s'
              ' if row.time_s is not none else -1 }}">{{ row.time_text }}</td><td>'
              '{{ row.bound }}</td>{% endif %}\n'
              '        <td{% if row.note %} title="{{ row.note }}"{% endif %}>'
              '{{ row.status | replace("_", " ") }}</td>\n'
              '      </tr>\n'
              '    {% endfor %}\n'),
    "node_table_row": ("    {% for row in table.rows %}\n"
                       "      {{ node_table_row(row, table.has_phases, table.has_times) }}\n"
                       "    {% endfor %}\n"),
    "live_row": ("    {% for row in live.rows %}\n"
                 "      {{ live_row(row, loop.index > live.shown) }}\n"
                 "    {% endfor %}\n"),
}
NAMES = (*TEXTS[:-1], "(resident)", "(top level)", "(", "model.layers.0/attn_q.proj", "a.b_c/d")
FLOATS = (0.0, -0.0, 1.5, 12.345678, 1e-9, 1e21, math.nan, math.inf, -math.inf, 7, 10**20)


@pytest.fixture(scope="module")
def rows() -> jinja2.Environment:
    return report_environment(jinja2.DictLoader(ROWS))


@pytest.mark.parametrize("seed", range(20))
def test_row_functions_write_what_the_template_lines_wrote(rows: jinja2.Environment,
                                                           seed: int) -> None:
    rng = random.Random(seed)
    pick = rng.choice
    box = PlotBox(pick((800, 900)), 300, pick(FLOATS), pick(FLOATS), 880.0, pick(FLOATS))
    targets = [HoverTarget(pick(FLOATS), pick(FLOATS), pick(NAMES), rng.randrange(10**6))
               for _ in range(rng.randint(0, 12))]
    assert rows.get_template("hover_rect").render(targets=targets, b=box) == (
        rows.get_template("hover").render(targets=targets, b=box))
    live = [LiveRow(pick(NAMES), pick(NAMES), pick(NAMES),
                    Quantity(pick((0, 10**30, "4096*batch")), pick(NAMES), pick((0, 5, 10**20)),
                             pick(NAMES)),
                    pick(NAMES), pick(NAMES), pick(NAMES), pick(PERCENTS), pick((True, False)),
                    pick(NAMES)) for _ in range(rng.randint(0, 12))]
    table = {"rows": live, "shown": rng.randint(0, 12)}
    assert rows.get_template("live_row").render(live=table) == (
        rows.get_template("live").render(live=table))


def test_shown_fast_paths_are_the_escaped_inert_value() -> None:
    from markupsafe import escape

    from graphmem.report.html.cells import _shown

    values = (*TEXTS, *FLOATS, *PERCENTS, True, False, None, 0, -1, 10**40, 2**63,
              "a&b", "<", ">", "'", '"', "x" * 199 + "<", Fraction(1, 3))
    for value in values:
        assert _shown(value) == str(escape(inert(value))), value


@pytest.mark.parametrize("seed", range(20))
def test_node_rows_write_what_the_template_lines_wrote(rows: jinja2.Environment,
                                                       seed: int) -> None:
    rng = random.Random(seed)
    pick = rng.choice

    def quantity() -> Quantity:
        return Quantity(pick((None, 0, 10**30, "4096*batch")), pick(NAMES), pick((0, -1, 5)),
                        pick(NAMES))

    nodes = [NodeRow(rng.randrange(10**6), pick(NAMES), pick(NAMES), pick(NAMES), pick(NAMES),
                     pick(NAMES), pick((None, 0, 7, 10**20)), quantity(), quantity(),
                     quantity(), pick((None, *FLOATS)), pick(NAMES), pick(NAMES),
                     pick(("ok", "unsupported", "shape_unknown", "control_flow", "a_b<c")),
                     pick(("", *NAMES))) for _ in range(rng.randint(0, 12))]
    for has_phases in (False, True):
        for has_times in (False, True):
            table = {"rows": nodes, "has_phases": has_phases, "has_times": has_times}
            assert rows.get_template("node_table_row").render(table=table) == (
                rows.get_template("nodes").render(table=table))
