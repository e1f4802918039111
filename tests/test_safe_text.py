"""A model's strings are inert data in every output (graphmem/core/safe_text.py).

Hostile models are built with onnx.helper: their graph, node, tensor and op names and dim
names hold rich markup (`[/b]`), terminal escapes, NUL, a bidi override, HTML, or a megabyte.
Each goes through `analyze` (terminal, JSON, HTML) and `check` (terminal, JUnit XML): the exit
code is never 3, the terminal shows no control character from the model, the JUnit XML parses,
the HTML escapes the name, and the JSON keeps it whole.
"""

from __future__ import annotations

import html
import json
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from rich.console import Console

from graphmem.cli.main import main
from graphmem.core.safe_text import (
    ELLIPSIS,
    NAME_MAX_CHARS,
    dims_text,
    markup,
    markup_text,
    printable,
    printable_text,
    shorten,
)
from graphmem.report.html.page import render_html

# What a terminal must never receive from a model: C0 controls but newline, DEL, C1, the bidi
# embeddings, overrides and isolates.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


# ----- the helper -----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "shown"), [
    ("\x1b[31mred", "\\x1b[31mred"),
    ("a\x00b", "a\\x00b"),
    ("ab\u202ecd", "ab\\u202ecd"),  # RIGHT-TO-LEFT OVERRIDE
    ("\u2066x\u2069", "\\u2066x\\u2069"),  # isolates
    ("line\nbreak\ttab\rcr", "line\\nbreak\\ttab\\rcr"),  # a name is one line
    ("del\x7f c1\x9b", "del\\x7f c1\\x9b"),
    ("\ud800lone", "\\ud800lone"),  # a lone surrogate: not encodable, not XML
    ("\ufffe", "\\ufffe"),  # a noncharacter XML 1.0 forbids
    ("/layer1/conv [/b] é 日本", "/layer1/conv [/b] é 日本"),  # printable text is kept
])
def test_printable_makes_unsafe_characters_visible(text: str, shown: str) -> None:
    assert printable(text) == shown
    assert not UNSAFE.search(printable(text))


def test_multiline_keeps_newlines_and_tabs() -> None:
    assert printable("a\n\tb\x1b", None, multiline=True) == "a\n\tb\\x1b"


def test_long_names_are_shortened_with_an_ellipsis_keeping_both_ends() -> None:
    name = "/encoder/" + "x" * 1000 + "/MatMul"
    shown = printable(name)
    assert len(shown) == NAME_MAX_CHARS and ELLIPSIS in shown
    assert shown.startswith("/encoder/") and shown.endswith("/MatMul")
    assert printable("short") == "short" and shorten("abcdef", 4) == "ab…f"
    # escapes that lengthen a name are bounded too
    assert len(printable("\x1b" * 1000)) == NAME_MAX_CHARS


def test_text_shortens_each_long_name_and_keeps_the_sentence() -> None:
    sentence = "node " + "n" * 5000 + " is unsupported; see " + "m" * 300
    shown = printable_text(sentence)
    assert shown.startswith("node n") and " is unsupported; see m" in shown
    assert len(shown) == 5 + NAME_MAX_CHARS + len(" is unsupported; see ") + NAME_MAX_CHARS
    assert len(printable_text("word " * 10_000, 100)) == 100


def test_a_megabyte_is_linear() -> None:
    started = time.perf_counter()
    for text in ("n" * 1_000_000, "a " * 500_000, "\x1b" * 1_000_000, ("y" * 199 + " ") * 5000):
        printable(text)
        printable_text(text)
        printable_text(text, None)
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize("name", ["[/b]", "[bold red]x[/]", "a\\", "[link=http://x]y[/link]",
                                  "\x1b[31mred", "\u202e"])
def test_markup_renders_the_name_as_it_is(name: str) -> None:
    console = Console(width=200, file=None, record=True)
    with console.capture() as capture:
        console.print(f"[bold]{markup(name)}[/] and {markup_text(name)}", soft_wrap=True)
    shown = printable(name)
    if shown.endswith("\\"):  # a trailing backslash would escape the next tag: made visible
        shown = shown[:-1] + "\\x5c"
    assert capture.get().rstrip("\n") == f"{shown} and {shown}"


def test_dims_text() -> None:
    assert dims_text({"batch": 8, "[/b]": 2}) == "batch=8, [/b]=2"
    assert dims_text(["a\x1b", "b"]) == "a\\x1b, b"
    assert dims_text({}, "none") == "none"


# ----- hostile models through every output ------------------------------------------------------

MEGABYTE_NAME = "n" * 1_000_000
HOSTILE = {
    "markup": "[/b]",
    "style": "[bold red]x[/]",
    "escape": "\x1b[31mred",
    "bidi": "ab\u202ecd",
    "html": "<script>alert(1)</script>&amp;",
    "control": "a\x01b\x7fc\x9bd",
}


def hostile_model(path: Path, name: str, dim: str = "batch", op: str = "Relu") -> Path:
    """x[dim, 16] -> Relu (node `name`, output `name`_t) -> op `op` -> y; graph named `name`.
    An op other than Relu is in a custom domain: unsupported, so `check` names it."""
    domain = "" if op == "Relu" else "hostile.domain"
    nodes = [helper.make_node("Relu", ["x"], [name + "_t"], name=name),
             helper.make_node(op, [name + "_t"], ["y"], name=name + "/2", domain=domain)]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 16])], doc_string=name)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets, doc_string=name)
    onnx.save(model, path)
    return path


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_inert_terminal(out: str, err: str) -> None:
    for text in (out, err):
        assert not UNSAFE.search(text), repr(UNSAFE.search(text))
        assert all(len(line) < 20_000 for line in text.splitlines())


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_names_are_data_in_analyze(kind: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    name = HOSTILE[kind]
    model = hostile_model(tmp_path / "m.onnx", name)
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    code, out, err = run(["analyze", str(model), "--batch", "2", "--gpu", "t4", "--verbose",
                          "--json", str(out_json), "--html", str(out_html)], capsys)
    assert code == 0, err
    assert_inert_terminal(out, err)
    assert printable(name) in out  # shown, as data (the graph's name: --verbose)
    assert json.loads(out_json.read_text())["model"]["name"] == name  # the JSON keeps it whole
    page = out_html.read_text(encoding="utf-8")
    assert html.escape(printable(name), quote=False) in page
    assert "<script>alert" not in page and not UNSAFE.search(page.replace("\n", " "))


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_dim_names_are_data(kind: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Free dims reach the headline, the formulas and the page (`[/b]` was a MarkupError)."""
    dim = HOSTILE[kind]
    model = hostile_model(tmp_path / "m.onnx", "graph", dim=dim)
    code, out, err = run(["analyze", str(model), "--json", str(tmp_path / "r.json"),
                          "--html", str(tmp_path / "r.html")], capsys)
    assert code in (0, 2), err  # 2: a dim name the importer refuses, with one line
    assert_inert_terminal(out, err)
    if code == 0:
        assert printable(dim) in out
        assert json.loads((tmp_path / "r.json").read_text())["dims"]["free"] == [dim]


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_op_names_in_check_terminal_and_junit(kind: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    name = HOSTILE[kind]
    model = hostile_model(tmp_path / "m.onnx", name, op="Op" + name)
    junit = tmp_path / "junit.xml"
    code, out, err = run(["check", str(model), "--batch", "2", "--fail-on-unsupported",
                          "--junit", str(junit)], capsys)
    assert code == 1, err  # the custom op is unsupported
    assert_inert_terminal(out, err)
    failure = ET.parse(junit).getroot().find("testsuite/testcase/failure")
    assert failure is not None and failure.text is not None
    assert printable("Op" + name) in failure.text
    assert not UNSAFE.search(failure.text)


def test_nul_and_controls_keep_the_junit_valid(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """ElementTree writes a NUL as it is, and the file no XML parser then reads."""
    model = hostile_model(tmp_path / "m.onnx", "n", op="Op\x00\x1b\x0c\ufffe")
    junit = tmp_path / "junit.xml"
    code, out, err = run(["check", str(model), "--batch", "2", "--fail-on-unsupported",
                          "--junit", str(junit)], capsys)
    assert code in (1, 2), err  # 2: the importer refuses a NUL in an op type
    assert_inert_terminal(out, err)
    if code == 1:
        ET.parse(junit)


@pytest.mark.slow
def test_a_megabyte_name_is_shortened_and_fast(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A 1 MB graph, node and tensor name: rich wrapped it for minutes; now every output
    shows NAME_MAX_CHARS of it, and the JSON keeps it whole, written in linear time."""
    model = hostile_model(tmp_path / "m.onnx", MEGABYTE_NAME, op="Op" + MEGABYTE_NAME)
    out_json, out_html, junit = tmp_path / "r.json", tmp_path / "r.html", tmp_path / "j.xml"
    started = time.perf_counter()
    code, out, err = run(["analyze", str(model), "--batch", "2", "--gpu", "t4",
                          "--json", str(out_json), "--html", str(out_html)], capsys)
    assert code == 0, err
    check_code, check_out, check_err = run(
        ["check", str(model), "--batch", "2", "--fail-on-unsupported", "--junit", str(junit)],
        capsys)
    assert check_code == 1, check_err
    assert time.perf_counter() - started < 30  # was still running after 600 s
    assert len(out) < 50_000 and len(check_out) < 20_000
    assert out_html.stat().st_size < 1_000_000
    assert junit.stat().st_size < 10_000 and ET.parse(junit)
    assert ELLIPSIS in out and "n" * (NAME_MAX_CHARS + 1) not in out  # wrapped at 80 columns
    assert json.loads(out_json.read_text())["model"]["name"] == MEGABYTE_NAME


def test_the_page_escapes_and_bounds_every_string(tmp_path: Path) -> None:
    """Strings the view does not shorten by name (a sentence quoting a name) are bounded by
    the environment's finalize: each run of non-space characters, and its controls."""
    from graphmem import analyze_onnx

    model = hostile_model(tmp_path / "m.onnx", "x" * 5000 + "\x1b", op="Op" + "y" * 5000)
    page = render_html(analyze_onnx(model, batch=2))
    assert "x" * (NAME_MAX_CHARS + 1) not in page and "y" * (NAME_MAX_CHARS + 1) not in page
    assert "\x1b" not in page
