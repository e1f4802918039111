"""The budgets file (`graphmem.toml`): defaults plus one `[[model]]` entry per model.

    [defaults]                      # optional; every key but path, name and baseline
    gpu = "t4"
    batch = 32
    max_memory = "90%"              # of the GPU's usable memory, or a size: "12GiB"
    fail_on_unsupported = true

    [[model]]
    path = "models/classifier.onnx" # relative to this file
    max_latency = "5ms"

    [[model]]
    name = "encoder"                # how reports name it (default: the file's stem)
    path = "models/encoder.onnx"
    dims = { seq = 512 }            # merged over the defaults' dims
    max_memory = "6GiB"             # a model's key replaces the default; false removes it
    baseline = "baselines/encoder.json"
    max_growth = "5%"

The file is checked against a schema before anything is analyzed: unknown keys are errors (a
typo must not silently drop a budget; the message names the closest known key), every value
has its type and range, and an error names the file, the key path and the fix. The file is
read only if it is a regular file of at most MAX_BUDGETS_BYTES, and dotted keys nest at most
MAX_KEY_DEPTH deep (Python's TOML reader takes quadratic time in the depth of a dotted key).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from graphmem.core.conventions import MAX_DIM_VALUE, Loss
from graphmem.core.safe_text import NAME_MAX_CHARS, printable, printable_text
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.spec import is_model_spec
from graphmem.gate.baseline import read_input_file
from graphmem.gate.budgets import (
    Budgets,
    SpecError,
    parse_count,
    parse_latency_s,
    parse_memory_limit,
    parse_percent,
    parse_size,
)
from graphmem.gate.check import CheckSpec
from graphmem.gate.margin import parse_margin
from graphmem.gate.options import RequestBuilder, type_names
from graphmem.gate.sequences import min_sequences, serving_context

MAX_BUDGETS_BYTES = 1 << 20  # a budgets file of 1000 models is ~100 KiB
MAX_KEY_DEPTH = 8  # `a.b.c = 1`: 3 deep; the schema's deepest key is defaults.dims.seq
MAX_STRING_CHARS = 4096  # a path (PATH_MAX on Linux), a name, a GPU
MAX_DIMS = 256  # dims of one model


# ----- the schema --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Budget:
    """A budget key: a string (some also take a number) parsed by `parse`; false removes a
    default."""

    parse: Callable[[Any], Any]
    example: str
    numbers: bool  # an integer or float is read as its text (max_params = 25000000)


_BUDGET_KEYS = {
    "max_memory": _Budget(parse_memory_limit, "90%", False),
    "margin": _Budget(parse_margin, "10%", False),
    "max_tensor_memory": _Budget(parse_size, "64MiB", False),
    "max_latency": _Budget(parse_latency_s, "20ms", False),
    "max_params": _Budget(parse_count, "25M", True),
    "max_flops": _Budget(parse_count, "4.1G", True),
    "max_growth": _Budget(parse_percent, "5%", False),
    "min_sequences": _Budget(parse_count, "8", True),  # with context: serving (--serve)
}
_SETTING_KEYS = {"gpu", "batch", "dims", "cuda_reserve", "fail_on_unsupported", "context"}
_DEFAULT_KEYS = _SETTING_KEYS | set(_BUDGET_KEYS)
_MODEL_ONLY_KEYS = {"path", "name", "baseline"}
# options that name a Python file's function (`FILE.py:FN`): read relative to the file too
_SPEC_OPTIONS = ("loss", "example_inputs")
_MODEL_KEYS = _DEFAULT_KEYS | _MODEL_ONLY_KEYS


def load_budgets_file(path: Path, builder: RequestBuilder | None = None) -> list[CheckSpec]:
    """One CheckSpec per `[[model]]`, paths resolved against the file's folder. With the
    API's request `builder`, an entry may also give its keywords (train = true,
    tensor_parallel = 2, inputs = ["1x4096:int64"]: graphmem/gate/options.py)."""
    file = _File(path, builder)
    table = _read_toml(path, file)
    file.known_keys(table, {"defaults", "model"}, "")
    defaults = table.get("defaults", {})
    if not isinstance(defaults, dict):
        file.fail("defaults", defaults, "should be a table: [defaults] on a line of its own")
    file.known_keys(defaults, _DEFAULT_KEYS | file.options, "defaults.")
    models = table.get("model")
    if models is not None and not isinstance(models, list):
        file.fail("model", models, "should be an array of tables: write [[model]], not [model]")
    if not models:
        raise GraphmemError(f"{file.name} lists no model: add a [[model]] entry with path = ...")
    checked_defaults = _Values(file, "defaults.").settings(defaults)
    entries = [_entry(file, checked_defaults, model, index)
               for index, model in enumerate(models, 1)]
    return _with_labels(entries)


def _read_toml(path: Path, file: _File) -> dict[str, Any]:
    text = read_input_file(path, "budgets file", MAX_BUDGETS_BYTES)
    deep = _DEEP_KEY.search(text)
    if deep is not None:
        line = text.count("\n", 0, deep.start()) + 1
        raise GraphmemError(f"{file.name} line {line}: a dotted key nests more than"
                            f" {MAX_KEY_DEPTH} deep; a budgets file nests at most 3"
                            " (defaults.dims.seq): check the file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise GraphmemError(f"budgets file {file.name} is not valid TOML"
                            f" ({printable(error, 400)})") from None
    except RecursionError:
        raise GraphmemError(f"budgets file {file.name}: its arrays or inline tables nest too"
                            " deeply to read; a budgets file nests at most 3 deep") from None
    except ValueError:  # int() refuses more than 4300 digits
        raise GraphmemError(f"budgets file {file.name} holds a number too long to read (more"
                            " than 4300 digits): check the file") from None


# One key of a dotted key: bare, "basic" or 'literal'. The look-behind starts a match only
# where a key can start (not inside a bare key or after a dot), which keeps the search linear.
# Text in a string value that looks like 9 dotted keys is refused too: no budget needs it.
_KEY_PART = r"""(?:[A-Za-z0-9_-]++|"(?:[^"\\\n]|\\.)*+"|'[^'\n]*+')"""
_DEEP_KEY = re.compile(r"""(?<![A-Za-z0-9_."'-])""" + _KEY_PART
                       + rf"(?:[ \t]*+\.[ \t]*+{_KEY_PART}){{{MAX_KEY_DEPTH}}}")


class _File:
    """The budgets file, for messages: `graphmem.toml: [[model]] #2 (a.onnx) batch = 0 ...`."""

    def __init__(self, path: Path, builder: RequestBuilder | None = None) -> None:
        self.path = path
        self.name = printable(path, 400)
        # the API's keywords an entry may give -> the TOML types each takes
        self.option_types = dict(builder.keywords) if builder is not None else {}

    @property
    def options(self) -> set[str]:
        return set(self.option_types)

    def fail(self, key_path: str, value: object, problem: str) -> NoReturn:
        raise GraphmemError(f"{self.name}: {key_path} = {_shown(value)} {problem}")

    def known_keys(self, table: Mapping[str, Any], allowed: set[str], where: str) -> None:
        for key in table:
            if key in allowed:
                continue
            shown = printable(key, 80)
            if where == "defaults." and key in _MODEL_ONLY_KEYS:
                raise GraphmemError(f"{self.name}: [defaults] cannot hold '{shown}': each"
                                    " [[model]] gives its own")
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else (
                f"; known keys: {', '.join(sorted(allowed))}")
            raise GraphmemError(f"{self.name} {_section(where)}: unknown key '{shown}'{hint}")


def _section(where: str) -> str:
    """`defaults.` -> `[defaults]`; `[[model]] #2 (a.onnx) ` stays; "" -> the top level."""
    if where == "defaults.":
        return "[defaults]"
    return where.strip() or "(top level)"


def _shown(value: object) -> str:
    """A value of the file in a message, as TOML writes it where that differs from Python."""
    return "true" if value is True else "false" if value is False else printable(repr(value), 80)


@dataclass(frozen=True)
class _Values:
    """Checks the keys of one table ([defaults] or one [[model]]) against the schema."""

    file: _File
    where: str  # "defaults." or "[[model]] #2 (a.onnx) "

    def fail(self, key: str, value: object, problem: str) -> NoReturn:
        self.file.fail(f"{self.where}{key}", value, problem)

    def settings(self, table: Mapping[str, Any]) -> dict[str, Any]:
        """The table's values, checked: a budget parsed (None where false removes it)."""
        checked: dict[str, Any] = {}
        for key, value in table.items():
            if key in _BUDGET_KEYS:
                checked[key] = self.budget(key, value)
            elif key == "cuda_reserve":
                checked[key] = self.size(key, value)
            elif key in ("batch", "context"):
                checked[key] = self.dim_value(key, value)
            elif key == "dims":
                checked[key] = self.dims(value)
            elif key == "fail_on_unsupported":
                checked[key] = self.typed(key, value, bool)
            elif key in self.file.option_types and key not in _MODEL_KEYS:
                checked[key] = self.option(key, value)
            else:  # gpu, path, name, baseline
                checked[key] = self.text(key, value)
        return checked

    def option(self, key: str, value: Any) -> Any:
        """An API keyword's value (graphmem/gate/options.py): a TOML type its annotation
        takes, text printable; its meaning is checked when the Request is built."""
        kinds = self.file.option_types[key]
        if not kinds:
            self.fail(key, value, "is a Python object of graphmem.check_model; a budgets file"
                      " says it with the keywords it is made of (see docs/gate.md)")
        if type(value) not in kinds:
            self.fail(key, value, f"should be {type_names(kinds)}")
        for index, item in enumerate(value if isinstance(value, list) else ()):
            if isinstance(item, bool) or not isinstance(item, str | int):
                self.fail(f"{key}[{index}]", item, "should be a string or an integer")
            if isinstance(item, str):
                self.text(f"{key}[{index}]", item)
        return self.text(key, value) if isinstance(value, str) else value

    def typed(self, key: str, value: Any, kind: type) -> Any:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            hint = _TYPE_HINTS.get(key.partition(".")[0] if kind is int else key, "")
            self.fail(key, value, f"should be a {_KIND_NAMES[kind]}{hint}")
        return value

    def text(self, key: str, value: Any) -> str:
        text = self.typed(key, value, str)
        if not text.strip():
            self.fail(key, value, "should not be empty")
        if len(text) > MAX_STRING_CHARS or printable(text, None) != text:
            self.fail(key, value, f"should be printable text of at most {MAX_STRING_CHARS}"
                      " characters (no control characters)")
        return text

    def dim_value(self, key: str, value: Any) -> int:
        number = self.typed(key, value, int)
        if not 1 <= number <= MAX_DIM_VALUE:
            self.fail(key, value, f"should be from 1 to {MAX_DIM_VALUE} (a dim's value)")
        return number

    def dims(self, value: Any) -> dict[str, int]:
        if not isinstance(value, dict):
            self.fail("dims", value, "should be a table of integers, e.g. dims = { seq = 512 }")
        if len(value) > MAX_DIMS:
            self.fail("dims", f"<{len(value)} dims>", f"should bind at most {MAX_DIMS} dims")
        for name in value:
            if not name.strip() or len(name) > NAME_MAX_CHARS or printable(name, None) != name:
                self.fail(f"dims.{printable(name, 80)}", value[name],
                          f"names a dim by printable text of 1 to {NAME_MAX_CHARS} characters")
        return {name: self.dim_value(f"dims.{name}", n) for name, n in value.items()}

    def size(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, str | int):
            self.fail(key, value, "should be a size such as \"700MiB\"")
        try:
            return parse_size(value)
        except SpecError as error:
            raise GraphmemError(f"{self.file.name}: {self.where}{key}:"
                                f" {printable_text(error)}") from None

    def budget(self, key: str, value: Any) -> Any:
        """A budget's value parsed; None for false (it removes a default budget)."""
        spec = _BUDGET_KEYS[key]
        if value is False:
            return None
        allowed = (str, int, float) if spec.numbers else (str,)
        if isinstance(value, bool) or not isinstance(value, allowed):
            self.fail(key, value, f"should be a string such as {spec.example!r}, or false")
        try:
            return spec.parse(value if isinstance(value, str) else str(value))
        except SpecError as error:
            raise GraphmemError(f"{self.file.name}: {self.where}{key}:"
                                f" {printable_text(error)}") from None
        except (OverflowError, ValueError):  # '1e400T' must not reach int() as infinity
            self.fail(key, value, f"is out of range: give a value such as {spec.example!r}")


_KIND_NAMES = {int: "int", str: "string", bool: "boolean"}  # "a int": TOML's name, kept
_TYPE_HINTS = {"batch": " (an integer, e.g. batch = 32)",
               "dims": " (a dim's value, e.g. dims = { seq = 512 })"}


def _entry(file: _File, defaults: Mapping[str, Any], model: Any, index: int
           ) -> tuple[str, str | None, CheckSpec]:
    """(the model's path as written, its name or None, its CheckSpec)."""
    where = f"[[model]] #{index} "
    if not isinstance(model, dict):
        file.fail(f"[[model]] #{index}", model, "should be a table with path = ...")
    file.known_keys(model, _MODEL_KEYS | file.options, where)
    if "path" not in model:
        raise GraphmemError(f"{file.name} {where}needs path = \"model.onnx\" (relative to"
                            f" {printable(file.path.name)})")
    values = _Values(file, where)
    model_path = values.text("path", model["path"])
    values = _Values(file, f"{where}({printable(model_path, 80)}) ")
    checked = values.settings(model)
    merged = {**defaults, **checked,
              "dims": {**defaults.get("dims", {}), **checked.get("dims", {})}}
    folder = file.path.parent
    options = {key: value for key, value in merged.items()
               if key in file.options and key not in _MODEL_KEYS and value is not None}
    for key in _SPEC_OPTIONS:  # `FILE.py:FN` is relative to this file, as path is
        if isinstance(options.get(key), str) and options[key] not in set(Loss):
            options[key] = str(_model_path(folder, options[key]))
    count = merged.get("min_sequences")
    context, options = serving_context(count, _serving_context(merged), options)
    budgets = Budgets(
        max_memory=merged.get("max_memory"), margin=merged.get("margin"),
        max_tensor_bytes=merged.get("max_tensor_memory"),
        max_latency_s=merged.get("max_latency"),
        max_params=merged.get("max_params"), max_flops=merged.get("max_flops"),
        fail_on_unsupported=bool(merged.get("fail_on_unsupported", False)),
        max_growth=merged.get("max_growth"),
        min_sequences=min_sequences(count, context, f"{file.name} {where}",
                                    ("min_sequences = ", "context = ")))
    baseline = merged.get("baseline")
    spec = CheckSpec(
        model_path=_model_path(folder, model_path),
        label="",
        budgets=budgets,
        gpu=merged.get("gpu"),
        batch=merged.get("batch"),
        dims=merged["dims"],
        cuda_reserve_bytes=merged.get("cuda_reserve"),
        baseline_path=folder / baseline if baseline else None,
        options=options,
        origin=f"{file.name} {where.strip()}",
    )
    return model_path, checked.get("name"), spec


def _model_path(folder: Path, model_path: str) -> Path:
    """The entry's model relative to the file's folder; a `pkg.mod:fn` spec is imported by
    module name, as written."""
    if is_model_spec(model_path) and not model_path.rpartition(":")[0].endswith(".py"):
        return Path(model_path)
    return folder / model_path


def _serving_context(merged: Mapping[str, Any]) -> int | None:
    """The context of min_sequences; none where `min_sequences = false` removed a default
    (its context goes with it)."""
    removed = "min_sequences" in merged and merged["min_sequences"] is None
    return None if removed else merged.get("context")


def _with_labels(entries: list[tuple[str, str | None, CheckSpec]]) -> list[CheckSpec]:
    """Each model's name, or its file's stem (its relative path where stems repeat)."""
    stems = [Path(model_path).stem for model_path, _, _ in entries]
    return [replace(spec, label=name or (stem if stems.count(stem) == 1 else model_path))
            for (model_path, name, spec), stem in zip(entries, stems, strict=True)]
