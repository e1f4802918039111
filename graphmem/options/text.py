"""Option values read from text, for the command line and for strings given in Python."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from graphmem.errors import GraphmemError, SpecError

if TYPE_CHECKING:
    from graphmem.gate.budgets import MemoryLimit


def dim_binding(text: str) -> tuple[str, int]:
    """`batch=8` -> ("batch", 8)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not re.fullmatch(r"-?\d+", value.strip()):
        raise SpecError(f"'{text}' is not NAME=INTEGER, e.g. --dim seq=512")
    # int() refuses thousands of digits; 21 characters keep the sign and the range check's say
    return name.strip(), int(value.strip()[:21])


def dims_dict(bindings: Iterable[tuple[str, int]]) -> dict[str, int]:
    """The --dim list as a dict; a dim given twice with two values is an error."""
    dims: dict[str, int] = {}
    for name, value in bindings:
        if dims.get(name, value) != value:
            raise GraphmemError(f"--dim {name} is given twice ({dims[name]} and {value})")
        dims[name] = value
    return dims


# The budgets' grammar of sizes (graphmem/gate/budgets.py), imported when a size is given: a
# command given none imports no gate module (and through them no serving model).
def size_bytes(text: str | int) -> int:
    """`12GiB`, `1.5 GB`, `800000000` (bytes) -> bytes."""
    from graphmem.gate.budgets import parse_size

    return parse_size(text)


def memory_limit(text: str | int) -> MemoryLimit:
    """`90%` (of the GPU's memory) or a size with its unit (`12GiB`)."""
    from graphmem.gate.budgets import parse_memory_limit

    return parse_memory_limit(text)
