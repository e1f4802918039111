"""One option table for `graphmem analyze` and the Python API (table.py), the values one
caller gave (values.py), the refusals between them (refusals.py) and the one Request they
describe (build.py). The command line's parser is generated from the table in
graphmem/cli/option_flags.py."""

from __future__ import annotations

from collections.abc import Mapping

from graphmem.options.build import request_from_values
from graphmem.options.values import command_line_values, python_values
from graphmem.pipeline.request import Request

__all__ = ["request_from_flags", "request_from_keywords"]


def request_from_keywords(model: object, keywords: Mapping[str, object]) -> Request:
    """Python's keywords (build_request's, `inputs` among them) as one Request."""
    return request_from_values(model, python_values(keywords))


def request_from_flags(model: object, flags: Mapping[str, object]) -> Request:
    """The command line's parsed flags ({dest: value}, every default filled) as one Request."""
    return request_from_values(model, command_line_values(flags))
