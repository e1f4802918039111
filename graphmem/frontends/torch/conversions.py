"""Python conversions inside a traced forward, left as eager leaves them.

`module.to(...)` that changes nothing:

Switch Transformers' router runs `self.classifier = self.classifier.to(self.dtype)` in its
forward. In eager that converts nothing (each tensor already has the dtype: `Tensor.to`
returns it). Under the trace the module's parameters are the fake tensors functional_call put
there, and `Module._apply` swaps a fake parameter for its converted self
(`torch.utils.swap_tensors`), which fails: "_apply(): Couldn't swap Linear.weight". While
tracing, a `Module.to` whose device, dtype and memory format every tensor of the module
already has returns the module, as eager ends up; any other conversion runs as before.

A 0-dim tensor formatted into a string (`f"expert_{index}"`): `Tensor.__format__` formats
the number (`item()`) only for the exact `Tensor` class and any subclass as `object` does, by
its repr. Under the trace every tensor is a fake tensor (a subclass), so Switch Transformers'
experts, a ModuleDict read with `self[f"expert_{expert_idx[0]}"]`, looked up
"expert_FakeTensor(..., size=(), dtype=torch.int64)" (KeyError). While tracing, a 0-dim
tensor formats its `item()`, as eager does: a value the trace knows (a router's choice,
routing.py) reads back as that number; one it does not know is formatted as before, by its
repr (a log line's f-string must not end the trace).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import DataDependentOutputException


@contextlib.contextmanager
def unchanged_conversions() -> Iterator[None]:
    original = nn.Module.to

    def to(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        if _changes_nothing(self, *args, **kwargs):
            return self
        return original(self, *args, **kwargs)

    nn.Module.to = to  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.to = original  # type: ignore[method-assign]


@contextlib.contextmanager
def scalars_format_as_numbers() -> Iterator[None]:
    original = torch.Tensor.__format__

    def format_(self: torch.Tensor, spec: str) -> str:
        if type(self) is not torch.Tensor and self.dim() == 0 and not self.is_meta:
            try:
                return format(self.item(), spec)
            except DataDependentOutputException:  # a value the trace does not know
                pass
        return original(self, spec)

    torch.Tensor.__format__ = format_  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.__format__ = original  # type: ignore[method-assign]


def _changes_nothing(module: nn.Module, *args: Any, **kwargs: Any) -> bool:
    try:
        device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)
    except (TypeError, RuntimeError):  # not ours to judge: Module.to says what is wrong
        return False
    if memory_format is not None:
        return False
    tensors = [*module.parameters(), *module.buffers()]
    # Module.to converts the dtype of floating and complex tensors only
    return all((device is None or tensor.device == torch.device(device))
               and (dtype is None or tensor.dtype == dtype
                    or not (tensor.is_floating_point() or tensor.is_complex()))
               for tensor in tensors)
