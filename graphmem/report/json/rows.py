"""What the JSON writer (report.py `json_chunks`) shares with the sections that hand it rows.

`item` is the C encoder the writer writes each row with; a `TextRows` is a list of rows that
the writer asks for as text (`texts`), made from pieces encoded once where rows repeat them,
each exactly the text `item` writes for the row's dict (`__iter__`, what a plain list of the
dicts would hold: `to_dict(lazy_nodes=False)`).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

_ENCODER = json.JSONEncoder(separators=(", ", ": "))


def _c_item_encoder() -> Callable[[Any], str]:
    """The C encoder, made once: `JSONEncoder.encode` makes one per call (with a closure
    and a dict of markers), a tenth of the writer's time at one call per node row. No
    markers: the rows are trees graphmem builds (a cycle would recurse, not loop)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # a Python without the C accelerator
        return _ENCODER.encode
    encode = make(None, _ENCODER.default, json.encoder.encode_basestring_ascii, None,
                  _ENCODER.key_separator, _ENCODER.item_separator, False, False, True)

    def item(value: Any) -> str:
        if isinstance(value, str):
            return json.encoder.encode_basestring_ascii(value)
        return "".join(encode(value, 0))

    return item


item = _c_item_encoder()
text = json.encoder.encode_basestring_ascii  # a str as `item` writes it


def fields_text(fields: dict[str, Any]) -> str:
    """`fields` as `item` writes them inside a dict: `"a": 1, "b": null`."""
    return item(fields)[1:-1]


class TextRows(ABC):
    """Rows the writer asks for as text, one row's JSON a string (see the module's doc)."""

    @abstractmethod
    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Each row's dict."""

    @abstractmethod
    def texts(self) -> Iterator[str]:
        """Each row as `item(dict)`, in the same order."""
