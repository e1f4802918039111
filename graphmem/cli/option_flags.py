"""The command line's flags, generated from the option table (graphmem/options/table.py):
`graphmem analyze` takes every option with a flag; another command describing a model
(`graphmem check`) takes the model-describing ones with `add_model_options` and reads them back
with `namespace_keywords`."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from graphmem.cli.common import argtype, word_choice
from graphmem.options import table
from graphmem.options.table import OUTPUT, Group, Kind, Option, model_options

__all__ = ["add_model_options", "add_options", "namespace_keywords"]


def add_options(parser: argparse.ArgumentParser,
                options: Iterable[Option] | None = None) -> None:
    """Each option with a flag (default: the whole table), in order, under its group."""
    groups: dict[Group, Any] = {Group.GENERAL: parser}
    for option in table.OPTIONS if options is None else options:
        if not option.flags:
            continue
        if option.group not in groups:
            groups[option.group] = parser.add_argument_group(str(option.group))
        groups[option.group].add_argument(*option.flags, **argparse_keywords(option))


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The options that describe the model and how it runs: not analyze's outputs, its
    suggestions or its sweep. A flag the parser already has stays the parser's own (`check`'s
    --gpu, --batch): `namespace_keywords` reads it where its dest is the table's keyword."""
    taken = set(parser._option_string_actions)
    add_options(parser, [o for o in model_options() if not taken & set(o.flags)])


def namespace_keywords(args: argparse.Namespace,
                       leave: Iterable[str] = ()) -> dict[str, object]:
    """The parsed flags as {keyword: value}, for graphmem.options.request_from_flags: those
    of the table the parser has (all of analyze's, the model's of another command), not the
    outputs, nor the keywords in `leave` (a command's own flag of the same dest: check's
    --context and --engine size its sequences budget, not a serving plan)."""
    left = set(leave)
    return {option.keyword: getattr(args, option.keyword) for option in table.OPTIONS
            if option.flags and option.feeds != OUTPUT and option.keyword not in left
            and hasattr(args, option.keyword)}


def argparse_keywords(option: Option) -> dict[str, Any]:
    keywords: dict[str, Any] = {"dest": option.keyword,
                                "help": option.help.replace("%", "%%")}
    if option.metavar is not None:
        keywords["metavar"] = option.metavar
    if option.kind is Kind.SWITCH:
        return {**keywords, "action": "store_true", "default": option.command_line_default}
    if option.kind is Kind.REPEAT:
        keywords.update(action="append", default=[])
    elif option.kind is Kind.OPTIONAL:
        keywords.update(nargs="?", const="")
    if option.command_line_default is not None:
        keywords["default"] = option.command_line_default
    if option.vocabulary is not None:
        keywords.update(word_choice(option.vocabulary, option.flag))
    elif option.choices:
        keywords["choices"] = option.choices
    if option.parse is not None:
        keywords["type"] = argtype(option.parse)
    return keywords
