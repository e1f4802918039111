"""README.md is the contract and the manual: its commands, flags, paths and links must be real.

Cheap static checks (no analysis runs): every `--flag` of every `graphmem <command>` line the
README shows is accepted by that command's parser, the option and budget tables name real
flags, every repository path it names exists, every `(#anchor)` link points at a heading, and
the set-up and test commands are the ones `.ci/run` runs.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from graphmem.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
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
    for line in _joined_lines(README):
        for match in re.finditer(r"graphmem (analyze|check|verify|gpus)\b([^`#\n]*)", line):
            found.append((match.group(1), match.group(2)))
    return found


def _table_after(header: str) -> list[str]:
    start = README.index(header)
    rows = []
    for line in README[start:].splitlines()[2:]:
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
                     r"/[\w./-]*\w)", README)
    # Module paths written relative to the package, e.g. `passes/schedule.py`.
    inner = re.findall(r"`((?:core|ops|frontends|passes|training|runtime_models|distributed|"
                       r"suggest|pipeline|verify|gate|devices|report|cli)/[\w./]*\w)`", README)
    paths = set(top) | {f"graphmem/{path}" for path in inner}
    assert len(paths) > 20
    assert sorted(path for path in paths if not (ROOT / path).exists()) == []


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_anchor_link_points_at_a_heading() -> None:
    slugs = {_slug(line.lstrip("#")) for line in README.splitlines() if line.startswith("#")}
    anchors = set(re.findall(r"\]\(#([^)]+)\)", README))
    assert anchors, "the README links its own sections"
    assert sorted(anchors - slugs) == []


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
