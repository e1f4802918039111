"""What a `graphmem check` entry may give of the option table (graphmem/gate/options.py):
each option but the check's own settings, with the TOML value types it takes, read from the
entry's kind, parser and default, and the function that builds the Request."""

from __future__ import annotations

from graphmem.gate.options import CHECK_OWNED, RequestBuilder
from graphmem.options import table
from graphmem.options.table import OUTPUT, Kind, Option


def request_builder() -> RequestBuilder:
    """The option table's Request builder (graphmem.api.build_request's) and the keywords a
    check entry may give."""
    from graphmem.options import request_from_keywords

    return RequestBuilder(request_from_keywords, entry_keywords())


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
