"""The option values one caller gave, with that caller's defaults, and how its messages name
an option: the command line by its flag (`--optimizer adam`), Python by its keyword
(`optimizer='adam'`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from graphmem.core.conventions import closed
from graphmem.errors import GraphmemError
from graphmem.options import table
from graphmem.options.table import OUTPUT, Kind, Option


@dataclass(frozen=True)
class OptionValues:
    """Every option's value (the caller's default where not given), and who gave them."""

    values: Mapping[str, object]
    command_line: bool

    def __getitem__(self, keyword: str) -> object:
        return self.values[keyword]

    def default(self, keyword: str) -> object:
        option = table.BY_KEYWORD[keyword]
        return option.command_line_default if self.command_line else option.default

    def given(self, keyword: str) -> bool:
        """Whether the option differs from the caller's default (a switch: True)."""
        value, default = self.values[keyword], self.default(keyword)
        if table.BY_KEYWORD[keyword].kind is Kind.SWITCH:
            return bool(value) and not default
        return value is not None and value != default

    def first_given(self, keywords: tuple[str, ...]) -> str | None:
        return next((keyword for keyword in keywords if self.given(keyword)), None)

    def name(self, keyword: str) -> str:
        """`--fsdp-depth` on the command line, `fsdp_depth` in Python."""
        return table.BY_KEYWORD[keyword].flag if self.command_line else keyword

    def said(self, keyword: str, value: object) -> str:
        """`--strategy fsdp` on the command line, `strategy='fsdp'` in Python."""
        if self.command_line:
            return f"{table.BY_KEYWORD[keyword].flag} {value}"
        shown = repr(str(value)) if isinstance(value, str) else repr(value)
        return f"{keyword}={shown}"

    def switch(self, keyword: str) -> str:
        """`--train` on the command line, `train=True` in Python."""
        return table.BY_KEYWORD[keyword].flag if self.command_line else f"{keyword}=True"


def command_line_values(given: Mapping[str, object]) -> OptionValues:
    """The parsed flags (argparse has filled each default) as option values; the options
    the command line has no flag for at their defaults."""
    return OptionValues({o.keyword: given.get(o.keyword, o.command_line_default)
                         for o in table.OPTIONS}, command_line=True)


def python_values(keywords: Mapping[str, object]) -> OptionValues:
    """`build_request`'s keywords, checked and read: exactly the table's (a wrong one is a
    TypeError naming the nearest), text read as on the command line, defaults filled."""
    known = python_keywords()
    for keyword in keywords:
        if keyword not in known:
            raise TypeError(f"build_request() got an unexpected keyword argument {keyword!r}"
                            f"{_nearest(keyword, known)}")
    values: dict[str, object] = {}
    for keyword in known:
        option = table.BY_KEYWORD[keyword]
        value = keywords.get(keyword, option.default)
        values[keyword] = _read(option, value) if isinstance(value, str) else value
    return OptionValues(values, command_line=False)


def python_keywords() -> tuple[str, ...]:
    return tuple(o.keyword for o in table.OPTIONS if o.feeds != OUTPUT)


def _nearest(keyword: str, known: tuple[str, ...]) -> str:
    import difflib  # a mistyped keyword only

    close = difflib.get_close_matches(keyword, known, n=1, cutoff=0.5)
    return f": did you mean {close[0]!r}?" if close else ""


def _read(option: Option, text: str) -> object:
    """A string given in Python, read as the command line reads the flag's text."""
    if text in option.python_words:
        return text
    if option.vocabulary is not None:
        return closed(option.vocabulary, text, option.keyword)
    if option.choices and text not in option.choices:
        raise GraphmemError(f"{option.keyword}={text!r}: choose one of"
                            f" {', '.join(option.choices)}")
    if option.parse is None:
        return text
    try:
        return option.parse(text)
    except ValueError as error:  # SpecError too
        raise GraphmemError(f"{option.keyword}={text!r}: {error}") from None
