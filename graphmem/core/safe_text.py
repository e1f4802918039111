"""Model strings as inert data in every output (terminal, JUnit XML, HTML).

A model is untrusted input: its node, tensor, op, dim, graph and module names and its doc
strings can hold rich markup (`[/b]`), terminal escapes (ESC, C1 controls), bidi overrides
that reorder what a reviewer reads (U+202E), characters XML 1.0 cannot carry (NUL, most
C0 controls, lone surrogates) and megabytes of text. Every renderer shows such a string
through `printable` (or `markup`, which also escapes rich markup), so that:

- each unsafe character is written as a visible escape (`\\x1b`, `\\u202e`), never sent;
- a name is at most NAME_MAX_CHARS characters: the middle is elided with an ellipsis (the
  JSON report keeps the full name);
- the work is linear in the text's length (the cut comes first, on a slice).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache

NAME_MAX_CHARS = 200  # one name as shown: node, tensor, op, dim, module, file
TEXT_MAX_CHARS = 2000  # a sentence that quotes names, as shown on one terminal line
SNIPPET_MAX_CHARS = 20_000  # code to paste (a suggestion's snippet): lines of names, each bounded
ELLIPSIS = "\u2026"

# C0 controls (tab, newline and CR included: a name is one line), DEL and C1 controls; the
# Arabic letter mark and LRM/RLM; line/paragraph separators; bidi embeddings and overrides
# (U+202A-U+202E) and isolates (U+2066-U+2069); lone surrogates (not encodable in UTF-8) and
# the noncharacters U+FFFE/U+FFFF (XML 1.0 forbids them).
_UNSAFE_CLASS = (r"\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                 r"\ud800-\udfff\ufffe\uffff")
_UNSAFE_ONE_LINE = re.compile(r"[\x00-\x1f" + _UNSAFE_CLASS + "]")
_UNSAFE_MULTILINE = re.compile(r"[\x00-\x08\x0b-\x1f" + _UNSAFE_CLASS + "]")  # keeps \t, \n

_SHORT_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shorten(text: str, max_chars: int) -> str:
    """`text` in at most `max_chars` characters: its start and end around an ellipsis (the
    end too, since names often differ only there: `/encoder/layer.11/attn/MatMul`)."""
    if len(text) <= max_chars:
        return text
    if max_chars <= 1:
        return ELLIPSIS[:max_chars]
    tail = (max_chars - 1) // 3
    head = max_chars - 1 - tail
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


def printable(text: object, max_chars: int | None = NAME_MAX_CHARS, *,
              multiline: bool = False) -> str:
    """`text` safe to show anywhere: unsafe characters as visible escapes, at most
    `max_chars` characters (None: any length); `multiline` keeps tabs and newlines."""
    value = str(text)
    if max_chars is not None and len(value) > max_chars:
        value = shorten(value, max_chars)  # first: cleaning 1 MB to show 200 B is waste
    if value.isprintable():  # the common case: every unsafe character is a non-printable one
        return value
    unsafe = _UNSAFE_MULTILINE if multiline else _UNSAFE_ONE_LINE
    value = unsafe.sub(_visible, value)
    return value if max_chars is None else shorten(value, max_chars)


def printable_text(text: object, max_chars: int | None = TEXT_MAX_CHARS,
                   name_chars: int = NAME_MAX_CHARS, *, multiline: bool = False) -> str:
    """A sentence that quotes names, safe to show: each run of non-space characters longer
    than `name_chars` (a name) is shortened in place, then the whole to `max_chars`."""
    value = str(text)
    if len(value) > name_chars:
        value = _long_runs(name_chars).sub(lambda m: shorten(m.group(), name_chars), value)
    return printable(value, max_chars, multiline=multiline)


@cache
def _long_runs(name_chars: int) -> re.Pattern[str]:
    """Runs longer than `name_chars`; the look-behind starts a match only at a run's first
    character, which keeps the scan linear."""
    return re.compile(rf"(?<!\S)\S{{{name_chars + 1},}}")


def markup(text: object, max_chars: int = NAME_MAX_CHARS) -> str:
    """A name inside a rich markup string: printable, and its `[...]` escaped."""
    return escape_markup(printable(text, max_chars))


def markup_text(text: object, max_chars: int = TEXT_MAX_CHARS, *,
                multiline: bool = False) -> str:
    """A sentence that quotes names, inside a rich markup string."""
    return escape_markup(printable_text(text, max_chars, multiline=multiline))


def escape_markup(text: str) -> str:
    """rich's escape of a text made printable already, reading the same wherever it is put.
    A trailing backslash would escape the tag after it ("name\\" + "[/]"); rich doubles it,
    which shows doubled where no tag follows, so it is written as its visible escape."""
    from rich.markup import escape  # an error line needs no rich: it is plain text

    if text.endswith("\\"):
        text = text[:-1] + "\\x5c"
    return escape(text)


def dims_text(dims: Mapping[str, object] | Iterable[str], empty: str = "") -> str:
    """`batch=8, seq=128` (a mapping of dim name to value) or `batch, seq` (names), safe."""
    if isinstance(dims, Mapping):
        text = ", ".join(f"{printable(name)}={value}" for name, value in dims.items())
    else:
        text = ", ".join(printable(name) for name in dims)
    return shorten(text, TEXT_MAX_CHARS) or empty


def markup_dims(dims: Mapping[str, object] | Iterable[str], empty: str = "") -> str:
    """Dims (a model's names) inside a rich markup string."""
    return escape_markup(dims_text(dims, empty))
