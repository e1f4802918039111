"""The HTML report: one self-contained, offline page rendered with jinja2 from templates/.

view.py maps the Analysis's typed results to a ReportView; the templates only lay it out, in
the order a reader asks: does it fit (by how much, the largest batch), where the memory goes
(by module, by role), the largest tensors live at the peak, then the timeline, what to change,
the runtime, compute, every node and how it is all computed.

The templates are compiled once, not at every run: compiled/ holds each as the Python module
jinja2's compiler makes of it with this page's settings (template_modules.py writes them),
used where they are this jinja2's compilation of these very sources (`_loader`).
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

import jinja2

from graphmem.core.output_files import write_output_text
from graphmem.errors import GraphmemError
from graphmem.pipeline.analysis import Analysis
from graphmem.report.html.cells import (
    bar,
    breakable,
    hover_rect,
    inert,
    live_row,
    node_table_row,
    pct,
    qty,
)
from graphmem.report.html.view import build_view

_TEMPLATE = "report.html.j2"
COMPILED_DIR = Path(__file__).resolve().parent / "compiled"


def templates_dir() -> Path:
    """The templates folder: `templates/` at the top of the project, as the design lays it
    out; the wheel ships it inside the package as `graphmem/templates` (pyproject.toml,
    force-include), where an installed graphmem finds it first."""
    package = Path(__file__).resolve().parents[2]  # graphmem/
    for folder in (package / "templates", package.parent / "templates"):
        if (folder / _TEMPLATE).is_file():
            return folder
    raise GraphmemError(f"HTML report templates not found in {package / 'templates'}:"
                        " reinstall graphmem")


def render_html(analysis: Analysis) -> str:
    """The report as one HTML document: inline CSS, JS and SVG; no network requests."""
    view = build_view(analysis)
    return _environment(templates_dir()).get_template(_TEMPLATE).render(view=view)


def write_html(analysis: Analysis, path: Path) -> None:
    write_output_text(path, [render_html(analysis)])


@cache
def _environment(folder: Path) -> jinja2.Environment:
    return report_environment(_loader(folder))


def _loader(folder: Path) -> jinja2.BaseLoader:
    """The templates as compiled modules (COMPILED_DIR) where they were compiled by this
    jinja2 from `folder`'s sources as they are now; else the sources, compiled as used."""
    try:
        from graphmem.report.html import compiled
    except ImportError:  # not generated: the sources serve
        return jinja2.FileSystemLoader(folder)
    if jinja2.__version__ == compiled.JINJA2_VERSION \
            and sources_digest(folder) == compiled.SOURCES_SHA256:
        return jinja2.ModuleLoader(COMPILED_DIR)
    return jinja2.FileSystemLoader(folder)


def sources_digest(folder: Path) -> str:
    """SHA-256 over every template file's path and bytes under `folder` (0.5 ms)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder).as_posix()}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def report_environment(loader: jinja2.BaseLoader) -> jinja2.Environment:
    """The report's jinja2 settings: the compiled modules are made and run under these."""
    environment = jinja2.Environment(
        loader=loader,
        autoescape=True,  # every template here is HTML (or SVG inside it)
        finalize=inert,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters["thousands"] = "{:,}".format
    environment.filters["breakable"] = breakable
    # cells.py: called per row
    environment.globals.update(qty=qty, bar=bar, pct=pct, hover_rect=hover_rect, live_row=live_row,
                               node_table_row=node_table_row)
    return environment
