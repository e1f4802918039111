"""Read a baseline: an earlier graphmem JSON (`analyze --json` or `check --json`).

Growth is measured against its peak memory, parameter count and FLOPs. Only schema version 1
is read, and only with every dim bound (with free dims its numbers are formulas).

A baseline is input like a model: it is read only from a regular file of at most
MAX_BASELINE_BYTES, and every value the gate reads is checked for its type and range before
use, so a file of the wrong shape is one error line naming the key path (`models[0].analysis
.memory.peak_bytes`), never a traceback. Unknown keys are refused in the parts of the JSON
whose keys graphmem defines in one place: a check JSON's envelope and its model entries
(report/json/gate.py), an analysis' top level (report/json/report.py), and its `dims`.
Inside the other sections keys may be added within schema version 1, and are not read.
"""

from __future__ import annotations

import difflib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from graphmem.core.conventions import MAX_DIM_VALUE
from graphmem.core.json_schema import (
    ANALYSIS_KEYS,
    CHECK_KEYS,
    CHECK_KIND,
    DIMS_KEYS,
    MODEL_KEYS,
    SCHEMA_VERSION,
)
from graphmem.core.safe_text import printable, printable_text
from graphmem.core.units import format_bytes
from graphmem.errors import GraphmemError
from graphmem.gate.budgets import Baseline

MAX_BASELINE_BYTES = 512 * 2**20  # a check JSON of several 100k-node graphs is ~100s of MiB
_MODES = ("inference", "training")
_MAX_NUMBER = 10**21  # above any peak (units.MAX_BYTES is 2**62) or FLOPs of one step
_MAX_NUMBER_TEXT = "10**21"
_REGENERATE = "regenerate it with 'graphmem analyze MODEL --batch N --json FILE'"


def load_baseline(path: Path, model_label: str | None = None) -> Baseline:
    """The baseline numbers in `path`; a check JSON with several models is matched by label."""
    data = _read_json(path)
    analysis, where = _analysis_dict(data, path, model_label)
    version = analysis.get("schema_version")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise GraphmemError(
            f"baseline {_shown_path(path)} has schema_version {_shown(version)}; this graphmem"
            f" reads version {SCHEMA_VERSION}: regenerate it with 'graphmem analyze MODEL --json"
            f" {_shown_path(path)}'")
    reader = _Reader(path)
    reader.known_keys(analysis, ANALYSIS_KEYS, where)
    dims = reader.table(analysis, "dims", where)
    reader.known_keys(dims, DIMS_KEYS, f"{where}dims.")
    free = reader.names(dims, "free", f"{where}dims.")
    bound = reader.dim_values(reader.table(dims, "bound", f"{where}dims."), f"{where}dims.bound.")
    numbers = (reader.quantity(reader.table(analysis, "memory", where), "peak_bytes",
                               f"{where}memory."),
               reader.quantity(reader.table(analysis, "params", where), "count",
                               f"{where}params."),
               reader.quantity(reader.table(analysis, "flops", where), "total", f"{where}flops."))
    mode = reader.choice(reader.table(analysis, "config", where), "mode", _MODES,
                         f"{where}config.")
    if free or not all(isinstance(n, int) for n in numbers):
        names = ", ".join(printable(name) for name in free) or "formulas"
        raise GraphmemError(
            f"baseline {_shown_path(path)} was analyzed with unbound dims ({names}): its"
            " numbers are formulas; regenerate it with the dims bound (--batch/--dim)")
    peak, params, flops = numbers
    return Baseline(source=str(path), dims=bound, mode=mode, peak_bytes=int(peak),
                    params=int(params), flops=int(flops))


# ----- reading an input file ------------------------------------------------------------------


def read_input_file(path: Path, what: str, max_bytes: int, missing_hint: str = "") -> str:
    """The UTF-8 text of `path`, a regular file of at most `max_bytes`.

    A FIFO would block the read until killed and a device may never end: both, and
    directories, are refused from their `stat`, before the file is opened (and again from the
    open file, which is opened non-blocking, in case the path was swapped in between).
    """
    shown = _shown_path(path)
    try:
        _require_regular(os.stat(path).st_mode, what, shown)
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise GraphmemError(f"{what} {shown} does not exist{missing_hint}") from None
    except (OSError, ValueError) as error:  # ValueError: a NUL in the path
        raise GraphmemError(f"{what} {shown} cannot be read ({printable_text(error)})") from None
    with os.fdopen(descriptor, "rb") as file:
        _require_regular(os.fstat(file.fileno()).st_mode, what, shown)
        try:
            data = file.read(max_bytes + 1)
        except OSError as error:
            raise GraphmemError(f"{what} {shown} cannot be read ({printable_text(error)})"
                                ) from None
    if len(data) > max_bytes:
        raise GraphmemError(f"{what} {shown} is larger than {format_bytes(max_bytes)}, the"
                            f" most graphmem reads for a {what}: check that it is the right file")
    try:
        return data.decode("utf-8-sig")  # a byte order mark, as some Windows editors write
    except UnicodeDecodeError as error:
        raise GraphmemError(f"{what} {shown} is not UTF-8 text ({error}): check that it is"
                            " the right file") from None


def _require_regular(mode: int, what: str, shown: str) -> None:
    if stat.S_ISREG(mode):
        return
    kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    raise GraphmemError(f"{what} {shown} is {kind}: give the path of a regular file")


def _shown_path(path: Path) -> str:
    return printable(path, 400)


def _shown(value: object) -> str:
    """A value of the file in a message: its repr, bounded."""
    return printable(repr(value), 80)


# ----- the JSON's shape -----------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any]:
    text = read_input_file(path, "baseline", MAX_BASELINE_BYTES,
                           f": write one with 'graphmem analyze MODEL --batch N --json {path}'")
    try:
        data = json.loads(text)
    except RecursionError:
        raise GraphmemError(f"baseline {_shown_path(path)} is not a graphmem JSON file (nested"
                            f" too deeply to read): {_REGENERATE}") from None
    except json.JSONDecodeError as error:
        raise GraphmemError(f"baseline {_shown_path(path)} is not a graphmem JSON file"
                            f" ({printable_text(error)})") from None
    except ValueError:  # int() refuses more than 4300 digits
        raise GraphmemError(f"baseline {_shown_path(path)} is not a graphmem JSON file (it holds"
                            f" a number of more than 4300 digits): {_REGENERATE}") from None
    if not isinstance(data, dict):
        raise GraphmemError(f"baseline {_shown_path(path)} is not a graphmem JSON file (not an"
                            f" object but {_type_name(data)}): {_REGENERATE}")
    return data


def _analysis_dict(data: dict[str, Any], path: Path, label: str | None
                   ) -> tuple[dict[str, Any], str]:
    """The analysis in an analyze JSON, or one model's analysis in a check JSON; with the
    key path that leads to it, for messages ("" or "models[2].analysis.")."""
    if "models" not in data:
        return data, ""
    reader = _Reader(path)
    reader.known_keys(data, CHECK_KEYS, "")
    if data.get("kind") != CHECK_KIND:
        reader.fail("kind", data.get("kind"), f"should be {CHECK_KIND!r} in a check JSON")
    models = reader.records(data, "models", "")
    if not models:
        reader.fail("models", [], "should list the models checked (it is empty)")
    for index, model in enumerate(models):
        reader.known_keys(model, MODEL_KEYS, f"models[{index}].")
        reader.text(model, "name", f"models[{index}].")
    index = _model_index(models, path, label)
    where = f"models[{index}]."
    return reader.table(models[index], "analysis", where), f"{where}analysis."


def _model_index(models: Sequence[Mapping[str, Any]], path: Path, label: str | None) -> int:
    if len(models) == 1:
        return 0
    matching = [i for i, m in enumerate(models) if m["name"] == label]
    if len(matching) != 1:
        names = printable_text(", ".join(str(m["name"]) for m in models))
        how_many = "none is" if not matching else f"{len(matching)} are"
        raise GraphmemError(
            f"baseline {_shown_path(path)} holds {len(models)} models ({names}) and {how_many}"
            f" named '{printable(label)}': name the model the same, or give its own JSON")
    return matching[0]


def _type_name(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "an array", dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


class _Reader:
    """Typed access to the baseline's values: a wrong one is a GraphmemError naming its key
    path and the fix (regenerate the file)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key_path: str, value: object, problem: str) -> NoReturn:
        raise GraphmemError(f"baseline {_shown_path(self.path)}: {printable(key_path)} ="
                            f" {_shown(value)} {problem}: {_REGENERATE}")

    def get(self, table: Mapping[str, Any], key: str, where: str) -> Any:
        if key not in table:
            raise GraphmemError(f"baseline {_shown_path(self.path)} lacks the field"
                                f" '{where}{key}' of a graphmem JSON: {_REGENERATE}")
        return table[key]

    def known_keys(self, table: Mapping[str, Any], known: frozenset[str], where: str) -> None:
        for key in table:
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f" (did you mean '{where}{close[0]}'?)" if close else ""
                raise GraphmemError(
                    f"baseline {_shown_path(self.path)}: unknown key '{printable(where + key)}'"
                    f"{hint} in a graphmem JSON: {_REGENERATE}")

    def table(self, table: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
        value = self.get(table, key, where)
        if not isinstance(value, dict):
            self.fail(where + key, value, f"should be an object, not {_type_name(value)}")
        return value

    def records(self, table: Mapping[str, Any], key: str, where: str) -> list[dict[str, Any]]:
        value = self.get(table, key, where)
        if not isinstance(value, list):
            self.fail(where + key, value, f"should be an array, not {_type_name(value)}")
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                self.fail(f"{where}{key}[{index}]", item,
                          f"should be an object, not {_type_name(item)}")
        return value

    def text(self, table: Mapping[str, Any], key: str, where: str) -> str:
        value = self.get(table, key, where)
        if not isinstance(value, str):
            self.fail(where + key, value, f"should be a string, not {_type_name(value)}")
        return value

    def choice(self, table: Mapping[str, Any], key: str, choices: Sequence[str],
               where: str) -> str:
        value = self.text(table, key, where)
        if value not in choices:
            self.fail(where + key, value, f"should be one of {', '.join(choices)}")
        return value

    def names(self, table: Mapping[str, Any], key: str, where: str) -> list[str]:
        value = self.get(table, key, where)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(where + key, value, "should be an array of dim names")
        return value

    def dim_values(self, table: Mapping[str, Any], where: str) -> dict[str, int]:
        for name, value in table.items():
            if not _is_int(value) or not 1 <= value <= MAX_DIM_VALUE:
                self.fail(where + name, value, f"should be a dim value from 1 to {MAX_DIM_VALUE}")
        return dict(table)

    def quantity(self, table: Mapping[str, Any], key: str, where: str) -> int | str:
        """An integer from 0 to _MAX_NUMBER, or a formula (a string) when dims were free."""
        value = self.get(table, key, where)
        if isinstance(value, str):
            return value
        if not _is_int(value) or not 0 <= value <= _MAX_NUMBER:
            self.fail(where + key, value, f"should be an integer from 0 to {_MAX_NUMBER_TEXT}")
        return int(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
