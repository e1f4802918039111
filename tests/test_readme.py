"""README.md and docs/*.md are the contract and the manual: their commands, flags, paths and
links must be real.

Cheap static checks (no analysis runs): every `--flag` of every `graphmem <command>` line the
README or a docs page shows is accepted by that command's parser, the option and budget tables
name real flags, every repository path they name exists, every link to a page or an `#anchor`
points at a file and a heading, the README stays short, and the set-up and test commands are
the ones `.ci/run` runs.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from graphmem.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {path: path.read_text(encoding="utf-8")
         for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
DOCS = "\n".join(PAGES.values())  # the README and every docs page
README_MAX_LINES = 250
COMMANDS = ("analyze", "check", "verify", "gpus")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _subcommand_flags() -> dict[str, set[str]]:
    parser = build_parser()
    global_flags = {flag for action in parser._actions for flag in action.option_strings}
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: global_flags | {flag for action in sub.choices[name]._actions
                                  for flag in action.option_strings}
            for name in COMMANDS}


FLAGS = _subcommand_flags()


def _joined_lines(text: str) -> list[str]:
    """README lines with shell continuations (`\\` at the end) joined to the next line."""
    return text.replace("\\\n", " ").splitlines()


def _command_lines() -> list[tuple[str, str]]:
    """(command, its arguments) for every `graphmem <command> ...` the README shows."""
    found = []
    for line in _joined_lines(DOCS):
        for match in re.finditer(r"graphmem (analyze|check|verify|gpus)\b([^`#\n]*)", line):
            found.append((match.group(1), match.group(2)))
    return found


def _table_after(header: str) -> list[str]:
    start = DOCS.index(header)
    rows = []
    for line in DOCS[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_the_readme_shows_every_command() -> None:
    shown = {command for command, _ in _command_lines()}
    assert shown == set(COMMANDS)


@pytest.mark.parametrize(("command", "arguments"), _command_lines())
def test_every_flag_in_a_readme_command_exists(command: str, arguments: str) -> None:
    unknown = [flag for flag in FLAG.findall(arguments) if flag not in FLAGS[command]]
    assert not unknown, f"graphmem {command}{arguments}: unknown {unknown}"


def test_the_analyze_options_table_names_real_flags() -> None:
    rows = _table_after("| option | meaning |")
    flags = [FLAG.findall(row.split("|")[1])[0] for row in rows]
    assert len(flags) >= 10
    assert [flag for flag in flags if flag not in FLAGS["analyze"]] == []


def test_the_check_budget_table_names_real_flags() -> None:
    rows = _table_after("| budget | holds when | the value checked |")
    flags = {flag for row in rows for flag in FLAG.findall(row.split("|")[1])}
    assert {"--max-memory", "--max-latency", "--max-params", "--max-flops"} <= flags
    assert flags - FLAGS["check"] == set()


def test_every_path_the_readme_names_exists() -> None:
    top = re.findall(r"(?<![\w/.@-])((?:samples|benchmarks|tests|graphmem|templates|docs)"
                     r"/[\w./-]*\w)", DOCS)
    # Module paths written relative to the package, e.g. `passes/schedule.py`.
    inner = re.findall(r"`((?:core|ops|frontends|passes|training|runtime_models|distributed|"
                       r"suggest|pipeline|verify|gate|devices|report|cli)/[\w./]*\w)`", DOCS)
    paths = set(top) | {f"graphmem/{path}" for path in inner}
    assert len(paths) > 20
    assert sorted(path for path in paths if not (ROOT / path).exists()) == []


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _slugs(text: str) -> set[str]:
    return {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", sorted(PAGES), ids=lambda p: p.name)
def test_every_link_points_at_a_file_and_a_heading(page: Path) -> None:
    """`[x](other.md#anchor)`, `[x](#anchor)`, `[x](docs/page.md)`, `![x](image.png)`."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", PAGES[page]):
        if target.startswith(("http://", "https://")):
            continue
        file_part, _, anchor = target.partition("#")
        path = (page.parent / file_part).resolve() if file_part else page
        missing_anchor = path.exists() and anchor and anchor not in _slugs(
            path.read_text(encoding="utf-8"))
        if not path.exists() or missing_anchor:
            broken.append(target)
    assert broken == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", README))
    pages = {path.name for path in (ROOT / "docs").glob("*.md")}
    assert sorted(pages - linked) == []


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) < README_MAX_LINES


def test_slug_follows_github() -> None:
    # "Runtime model: onnxruntime (`--runtime ort-cpu`)": ':', '(', '`' and ')' dropped; each
    # space becomes '-', so "onnxruntime --runtime" gives three hyphens.
    assert _slug(" Runtime model: onnxruntime (`--runtime ort-cpu`)") == (
        "runtime-model-onnxruntime---runtime-ort-cpu")


def test_the_setup_and_test_commands_are_the_ones_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    setup = next(line for line in ci if line.startswith("pip install"))
    test = next(line for line in ci if line.startswith("python -m pytest"))
    first_section = README.split("\n## ")[1]
    assert first_section.startswith("Set up and run")
    assert f"    {setup}\n" in first_section
    assert f"    {test}\n" in first_section


def test_onnxruntime_is_the_cuda_build_where_one_exists_and_the_cpu_build_elsewhere() -> None:
    """onnxruntime-gpu has no macOS wheel: a hard dependency kept graphmem off a Mac. Exactly
    one of the two builds is required on every platform."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    builds = [Requirement(r) for r in project["dependencies"]
              if Requirement(r).name in ("onnxruntime", "onnxruntime-gpu")]
    platforms = {("linux", "x86_64"): "onnxruntime-gpu", ("win32", "AMD64"): "onnxruntime-gpu",
                 ("darwin", "arm64"): "onnxruntime", ("darwin", "x86_64"): "onnxruntime",
                 ("linux", "aarch64"): "onnxruntime"}
    for (system, machine), expected in platforms.items():
        chosen = [r.name for r in builds
                  if r.marker is None or r.marker.evaluate({"sys_platform": system,
                                                            "platform_machine": machine})]
        assert chosen == [expected], (system, machine, chosen)
