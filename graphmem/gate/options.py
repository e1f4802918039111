"""What a check entry may say about the run besides its budgets: the Python API's keywords.

A check entry describes the run as `graphmem analyze` does (inputs, train, optimizer, gpus,
tensor_parallel, serve, lora, ...). The names and types are not kept here: they are the option
table's (graphmem/options/table.py, read by graphmem/options/check_entry.py and handed in with
the function that turns keywords into a Request, as the gate may not import the layer above),
so an option the table gains is a key of the budgets file at once. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphmem.errors import GraphmemError
from graphmem.pipeline.request import Request

# Keywords of the builder a check entry does not take: the check's own settings (model, gpu,
# batch, dims, cuda_reserve_bytes are CheckSpec fields), and what only an interactive
# analysis asks for (suggestions, sweeps, module grouping, report labels).
CHECK_OWNED = frozenset({"model", "gpu", "batch", "dims", "cuda_reserve_bytes", "suggest",
                         "memory_budget", "memory_budget_bytes", "memory_budget_share",
                         "sweep", "plan", "module_depth", "label"})

# TOML's values and the Python types that accept them
_TOML_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "a boolean (true)"), (int, "an integer"), (float, "a number"),
    (str, "a string"), (list, "an array"))


@dataclass(frozen=True)
class RequestBuilder:
    """`build(model, keywords) -> Request` (graphmem.options.request_from_keywords, what
    graphmem.api.build_request runs) and each keyword a check entry may give -> the TOML
    value types it accepts (empty: a Python object, given through the API only):
    graphmem/options/check_entry.py makes it."""

    build: Callable[..., Request]
    keywords: Mapping[str, tuple[type, ...]]

    def request(self, model: object, options: Mapping[str, Any], **settings: Any) -> Request:
        """The Request of one check entry: its keywords and the check's own settings."""
        unknown = sorted(set(options) - set(self.keywords))
        if unknown:
            raise GraphmemError(f"{unknown[0]}: not an option of a check entry"
                                f"{nearest(unknown[0], self.keywords)}")
        return self.build(model, {**options, **settings, "suggest": False})


def nearest(name: str, known: Sequence[str] | Mapping[str, object]) -> str:
    """`; did you mean 'tensor_parallel'?`, or nothing when no name is close."""
    import difflib

    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def type_names(kinds: tuple[type, ...]) -> str:
    """`(bool, str)` -> 'a boolean (true) or a string'."""
    names = [name for kind, name in _TOML_TYPES if kind in kinds]
    return " or ".join(names)
