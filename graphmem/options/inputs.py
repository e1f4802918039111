"""A model's example inputs as one tuple, however Python or the command line gave them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from graphmem.errors import GraphmemError
from graphmem.frontends.torch.spec import KeywordInput


def example_tuple(inputs: object) -> tuple[object, ...]:
    """The example inputs as one tuple, however they were given: None, one tensor (or a
    `"4x1024:int64"` string, or a shape tuple of ints), a list/tuple of them (--input's list),
    or a dict of keyword inputs (`model(**inputs)`, as Hugging Face models take them). A bare
    tensor is one input, never split into its rows."""
    if inputs is None:
        return ()
    if isinstance(inputs, Mapping):
        return tuple(KeywordInput(_input_name(name), value) for name, value in inputs.items())
    if isinstance(inputs, str) or hasattr(inputs, "shape") or not isinstance(inputs, Iterable):
        return (inputs,)
    items: tuple[object, ...] = tuple(inputs)
    if items and all(isinstance(item, int) for item in items):
        return (items,)  # one shape: (8, 3, 224, 224)
    return items


def _input_name(name: object) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise GraphmemError(f"inputs: the key {name!r} is not a keyword of forward(): give"
                            " the dict's keys as parameter names, e.g. {'attention_mask': m}")
    return name
