"""What a `graphmem check` entry may give of the option table (graphmem/gate/options.py):
each option but the check's own settings, with the TOML value types it takes, read from the
entry's kind, parser and default, and the function that builds the Request."""

from __future__ import annotations

from typing import Any

from graphmem.gate.options import CHECK_OWNED, RequestBuilder
from graphmem.options import table
from graphmem.options.table import OUTPUT, Kind, Option
from graphmem.pipeline.request import Request


def request_builder() -> RequestBuilder:
    """`build_request(model, inputs, **keywords)` as graphmem.api's, and the keywords a check
    entry may give."""
    from graphmem.options import request_from_keywords

    def build(model: object, inputs: object = None, **keywords: Any) -> Request:
        return request_from_keywords(model, {**keywords, "inputs": inputs})

    return RequestBuilder(build, entry_keywords())


def entry_keywords() -> dict[str, tuple[type, ...]]:
    return {o.keyword: toml_types(o) for o in table.OPTIONS
            if o.feeds != OUTPUT and o.keyword not in CHECK_OWNED}


def toml_types(option: Option) -> tuple[type, ...]:
    """The TOML values an option takes: a switch a boolean (and the words Python also takes:
    serve = "sglang"), a repeated flag an array, an optional value a boolean or a string,
    an int or a float flag that number (an int is a float's value too), other flags a string;
    a Python-only keyword the type of its default (none: a Python object, API only)."""
    words: tuple[type, ...] = (str,) if option.python_words else ()
    if option.kind is Kind.SWITCH:
        return (bool, *words)
    if option.kind is Kind.REPEAT:
        return (list,)
    if option.kind is Kind.OPTIONAL:
        return (bool, str)
    if not option.flags:
        default = option.default
        if isinstance(default, tuple | list):
            return (list,)
        return (type(default),) if isinstance(default, bool | str) else ()
    if option.parse is int:
        return (int,)
    if option.parse is float:
        return (float, int)
    return (str,)
