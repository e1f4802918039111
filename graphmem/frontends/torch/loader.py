"""Load a PyTorch model from `path/to/file.py:callable` or `package.module:callable`.

The model is built on the meta device: parameters have shapes and dtypes but no storage, so a
model of any size loads without memory. Every failure is one GraphmemError line.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import os
import re
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from graphmem.core.conventions import MAX_DIM_VALUE
from graphmem.core.units import MAX_BYTES, format_bytes
from graphmem.errors import GraphmemError

# PyTorch's CUDA kernels index at most 25 dims (ATen/cuda/detail/OffsetCalculator.cuh MAX_DIMS)
MAX_INPUT_RANK = 25

_DTYPES = {
    "float32": torch.float32, "float": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "half": torch.float16, "fp16": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float64": torch.float64, "int64": torch.int64, "long": torch.int64,
    "int32": torch.int32, "int": torch.int32, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}


@dataclass(frozen=True)
class TensorSpec:
    """An example input: its shape and dtype (`32x3x224x224`, `4x1024:int64`); with a `name`
    (`attention_mask=4x1024:int64`) it is passed as a keyword, `model(..., name=tensor)`."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    name: str | None = None


def parse_tensor_spec(text: str) -> TensorSpec:
    """`SHAPE[:dtype]`, or `NAME=SHAPE[:dtype]` for a keyword input."""
    name, equals, rest = text.partition("=")
    if equals:
        check_input_name(name, text)
        return replace(_parse_shape_dtype(rest, text), name=name)
    return _parse_shape_dtype(text, text)


def check_input_name(name: str, text: str) -> None:
    """A keyword input's name is a Python identifier (forward()'s parameter)."""
    if not name.isidentifier():
        raise GraphmemError(f"--input {text[:80]}: '{name[:40]}' is not a Python identifier;"
                            " give NAME=SHAPE[:dtype], e.g. attention_mask=4x1024:int64")


def check_input_order(specs: list[TensorSpec]) -> None:
    """Positional inputs first, each keyword once: as a Python call reads."""
    names = [spec.name for spec in specs if spec.name is not None]
    if len(set(names)) < len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise GraphmemError(f"--input {twice}=...: given twice; give each keyword input once")
    first_named = next((i for i, spec in enumerate(specs) if spec.name is not None), None)
    if first_named is not None and any(s.name is None for s in specs[first_named:]):
        raise GraphmemError("a positional --input follows a keyword one (NAME=SHAPE): give the"
                            " positional inputs first, in forward()'s order")


def _parse_shape_dtype(body: str, text: str) -> TensorSpec:
    shape_text, _, dtype_text = body.partition(":")
    dims = shape_text.lower().split("x")
    if not shape_text or not all(re.fullmatch(r"\d+", d) for d in dims):
        raise GraphmemError(f"--input {text}: expected a shape like 32x3x224x224[:dtype] (or"
                            " NAME=SHAPE[:dtype] for a keyword input)")
    if len(dims) > MAX_INPUT_RANK:
        raise GraphmemError(f"--input {text[:60]}...: {len(dims)} dims; PyTorch's CUDA kernels"
                            f" take at most {MAX_INPUT_RANK}")
    # a dim of 20 digits or more is out of range anyway (and int() refuses thousands)
    shape = tuple(int(d) if len(d) < 20 else MAX_DIM_VALUE + 1 for d in dims)
    if any(d <= 0 for d in shape):
        raise GraphmemError(f"--input {text}: every dim must be 1 or more")
    if any(d > MAX_DIM_VALUE for d in shape):
        raise GraphmemError(f"--input {text}: a dim is implausibly large (the limit is"
                            f" {MAX_DIM_VALUE}); check the numbers")
    dtype_name = (dtype_text or "float32").lower()
    if dtype_name not in _DTYPES:
        known = ", ".join(sorted(_DTYPES))
        raise GraphmemError(f"--input {text}: unknown dtype '{dtype_name}'; known: {known}")
    dtype = _DTYPES[dtype_name]
    size_bytes = math.prod(shape) * dtype.itemsize
    if size_bytes > MAX_BYTES:
        raise GraphmemError(f"--input {text}: {format_bytes(size_bytes)}, more than 2**62 bytes"
                            " (4 EiB): check the shape")
    return TensorSpec(shape, dtype)


def load_example_inputs(spec: str) -> list[TensorSpec]:
    """Call the user's `file.py:fn` that returns the example inputs (a tensor, a tuple or
    list of tensors or `SHAPE:dtype` strings, or a dict of keyword inputs) on the meta
    device: only shapes and dtypes are kept, no memory is allocated."""
    target = load_callable(spec)
    if not callable(target) or inspect.isclass(target):
        raise GraphmemError(f"--example-inputs {spec}: name a function that returns the inputs")
    try:
        with torch.device("meta"):
            value = target()
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 - the user's code: SystemExit included
        raise GraphmemError(f"calling {spec}() failed: {_describe(error)} (it must return the"
                            " example inputs with no arguments)") from None
    if isinstance(value, dict):  # keyword inputs: model(**value)
        specs = [replace(_input_spec(item, spec), name=str(key)) for key, item in value.items()]
        for named in specs:
            check_input_name(str(named.name), f"{named.name}= (from {spec})")
    else:
        items = list(value) if isinstance(value, tuple | list) else [value]
        specs = [_input_spec(item, spec) for item in items]
    if not specs:
        raise GraphmemError(f"--example-inputs {spec} returned no inputs")
    return specs


def spec_text(spec: TensorSpec) -> str:
    """The `--input` text of a spec: `4x1024:int64`, `attention_mask=4x1024:int64`."""
    dtype = next(n for n, d in _DTYPES.items() if d == spec.dtype)
    keyword = f"{spec.name}=" if spec.name is not None else ""
    return keyword + "x".join(str(d) for d in spec.shape) + f":{dtype}"


def split_inputs(specs: Sequence[TensorSpec], tensors: Sequence[Any]
                 ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The model's call arguments: the unnamed inputs positionally, the named as keywords."""
    args = tuple(t for spec, t in zip(specs, tensors, strict=True) if spec.name is None)
    kwargs = {spec.name: t for spec, t in zip(specs, tensors, strict=True)
              if spec.name is not None}
    return args, kwargs


def check_call(model: nn.Module, specs: Sequence[TensorSpec]) -> None:
    """forward() takes the inputs as given (positional count, keyword names), checked before
    tracing so that a misspelt keyword is named, not a failure deep inside the trace."""
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):  # a builtin or C forward: nothing to check against
        return
    args, kwargs = split_inputs(specs, list(specs))
    try:
        signature.bind(*args, **kwargs)
    except TypeError as error:
        params = ", ".join(signature.parameters)[:200]
        raise GraphmemError(f"the example inputs do not match {type(model).__name__}"
                            f".forward({params}): {error}; give the positional inputs in"
                            " its order and the keyword ones by these names") from None


class KeywordCall(nn.Module):
    """`model` called as `model(*positional, **named)` from a flat list of inputs, for code
    that calls `module(*inputs)` (the real step in graphmem/verify/runners/)."""

    def __init__(self, model: nn.Module, specs: Sequence[TensorSpec]) -> None:
        super().__init__()
        self.model = model
        self.specs = tuple(specs)

    def forward(self, *tensors: Any) -> Any:
        args, kwargs = split_inputs(self.specs, tensors)
        return self.model(*args, **kwargs)


def _input_spec(item: Any, spec: str) -> TensorSpec:
    if isinstance(item, torch.Tensor):
        return TensorSpec(tuple(int(d) for d in item.shape), item.dtype)
    if isinstance(item, str):
        return parse_tensor_spec(item)
    raise GraphmemError(f"--example-inputs {spec} returned {type(item).__name__!r}: return a"
                        " tensor, or a tuple of tensors or 'SHAPE:dtype' strings")


def is_model_spec(text: str) -> bool:
    """`file.py:fn` or `pkg.mod:fn` (and not an existing file such as `model.onnx`)."""
    return ":" in text and not _exists(text) and not text.endswith(".onnx")


def load_model(spec: str) -> nn.Module:
    """Import the callable and build the model on the meta device."""
    target = load_callable(spec)
    with torch.device("meta"):
        return _module(_call(target, spec), spec)


def build_model(spec: str) -> nn.Module:
    """Import the callable and build the model with real weights (to run it, not trace it)."""
    return _module(_call(load_callable(spec), spec), spec)


def _module(model: Any, spec: str) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise GraphmemError(
            f"{spec} returned {type(model).__name__}, not a torch.nn.Module:"
            " name a function or class that builds the model"
        )
    return model


def load_loss(spec: str) -> Any:
    """--loss: a loss graphmem names (`mse`, `cross-entropy`), else `FILE.py:FN`."""
    from graphmem.frontends.torch.train_step import LOSSES

    named = LOSSES.get(spec)  # type: ignore[call-overload]
    return named if named is not None else load_callable(spec)


def load_callable(spec: str) -> Any:
    location, _, name = spec.rpartition(":")
    if not location or not name.isidentifier():
        raise GraphmemError(
            f"'{spec}' is not FILE.py:CALLABLE or package.module:CALLABLE"
            " (e.g. models.py:build_resnet; --loss also takes mse or cross-entropy)"
        )
    module = _import_file(location) if location.endswith(".py") else _import_module(location)
    if not hasattr(module, name):
        defined = ", ".join(n for n in dir(module) if not n.startswith("_"))[:300]
        raise GraphmemError(f"{location} has no '{name}'; it defines: {defined}")
    return getattr(module, name)


def _import_file(location: str) -> ModuleType:
    path = Path(location)
    if not _is_regular_file(path):
        raise GraphmemError(f"no such file '{location}': check the path to the model's .py file")
    module_name = f"graphmem_user_{abs(hash(path.resolve()))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise GraphmemError(f"'{location}' cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))  # so the file's sibling imports work
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 - the user's code: SystemExit included
        raise GraphmemError(f"importing {location} failed: {_describe(error)}") from None
    finally:
        sys.path.pop(0)
    return module


def _import_module(location: str) -> ModuleType:
    try:
        return importlib.import_module(location)
    except ModuleNotFoundError as error:
        raise GraphmemError(
            f"cannot import '{location}' ({error}): install the package or give a .py path"
        ) from None
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 - the package's code: SystemExit included
        raise GraphmemError(f"importing {location} failed: {_describe(error)}") from None


def _call(target: Any, spec: str) -> Any:
    if not callable(target):
        raise GraphmemError(f"{spec} is not callable: name a function or an nn.Module class")
    try:
        if inspect.isclass(target) and not issubclass(target, nn.Module):
            raise GraphmemError(f"{spec} is a class but not a torch.nn.Module")
        return target()
    except (GraphmemError, KeyboardInterrupt):
        raise
    except BaseException as error:  # noqa: BLE001 - the user's code: SystemExit included
        raise GraphmemError(
            f"calling {spec}() failed: {_describe(error)} (it must build the model with no"
            " arguments)"
        ) from None


def _describe(error: BaseException) -> str:
    """`ValueError: first line`; `SystemExit(3)` for what is not an Exception (an exit)."""
    if not isinstance(error, Exception):
        return repr(error)
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _is_regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):  # missing, a name too long, a NUL byte
        return False


def _exists(text: str) -> bool:
    try:
        os.stat(text)
    except (OSError, ValueError):  # Path.exists raises for a name too long
        return False
    return True
