"""The report's templates compiled once (graphmem/report/html/template_modules.py): the
modules in the package are what jinja2 makes of templates/ now, a report rendered from them is
byte for byte the one rendered from the sources, and an edited template is read from its
source until the modules are written again."""

from __future__ import annotations

import shutil
from pathlib import Path

import jinja2
import pytest

from graphmem import analyze_onnx
from graphmem.report.html import page
from graphmem.report.html.page import COMPILED_DIR, render_html, report_environment, templates_dir
from graphmem.report.html.template_modules import module_texts, write_modules
from graphmem.report.html.view import build_view

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
REGENERATE = "run `python -m graphmem.report.html.template_modules` after editing templates/"


def test_the_compiled_modules_are_the_templates_compiled_now() -> None:
    expected = module_texts(templates_dir())
    found = {path.name: path.read_text(encoding="utf-8")
             for path in COMPILED_DIR.glob("*.py")}
    assert sorted(found) == sorted(expected), REGENERATE
    for name, text in expected.items():
        assert found[name] == text, f"{name}: {REGENERATE}"
    # one module per template file, and the stamp
    assert len(expected) == 1 + sum(1 for p in templates_dir().rglob("*.j2"))


def test_a_report_uses_them_and_compiles_no_template(monkeypatch: pytest.MonkeyPatch) -> None:
    analysis = analyze_onnx(SAMPLES / "tiny_cnn.onnx", batch=2, gpu="t4")
    page._environment.cache_clear()
    monkeypatch.setattr(jinja2.Environment, "compile", _no_compiling)
    try:
        assert isinstance(page._loader(templates_dir()), jinja2.ModuleLoader)
        compiled = render_html(analysis)
    finally:
        page._environment.cache_clear()
    monkeypatch.undo()
    sources = report_environment(jinja2.FileSystemLoader(templates_dir()))
    from_sources = sources.get_template("report.html.j2").render(view=build_view(analysis))
    assert compiled == from_sources and "tiny_cnn" in compiled


def _no_compiling(*args: object, **kwargs: object) -> None:
    raise AssertionError("a template was compiled at run time")


def test_an_edited_template_is_read_from_its_source(tmp_path: Path) -> None:
    folder = tmp_path / "templates"
    shutil.copytree(templates_dir(), folder)
    assert isinstance(page._loader(folder), jinja2.ModuleLoader)  # the same sources
    headline = folder / "partials" / "headline.html.j2"
    headline.write_text(headline.read_text() + "<!-- edited -->", encoding="utf-8")
    loader = page._loader(folder)
    assert isinstance(loader, jinja2.FileSystemLoader)
    template = report_environment(loader).get_template("partials/headline.html.j2")
    assert template.render(view={"answers": [], "facts": []}).endswith("<!-- edited -->")
    # written again, the modules match the edited sources
    target = tmp_path / "compiled"
    written = write_modules(folder, target)
    assert "__init__.py" in written and (target / "__init__.py").read_text().count(
        page.sources_digest(folder)) == 1
