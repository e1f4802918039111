"""A check on tensor values inside a traced forward: assumed to hold.

Vision-language models check that the image placeholders among the ids match the image's
features before splicing them in (transformers' `torch_compilable_check`, which calls
`torch._check_tensor_all` or `torch._check_tensor_all_with` on a boolean tensor). Eager reads
the value (`.item()`) and raises when it is false; under fake tensors there is no value, and
the read stops the trace (`DataDependentOutputException: aten._local_scalar_dense`). A check
makes no tensor the step keeps and either passes or ends the step, so while tracing a check
on a tensor is taken as passing, as it does for the inputs the step is measured on; a check
on a Python bool runs as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

_CHECKS = ("_check_tensor_all", "_check_tensor_all_with")


@contextlib.contextmanager
def assumed_value_checks() -> Iterator[None]:
    originals = {name: getattr(torch, name) for name in _CHECKS}

    def check_all(cond: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(cond, torch.Tensor):
            originals["_check_tensor_all"](cond, *args, **kwargs)

    def check_all_with(error_type: Any, cond: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(cond, torch.Tensor):
            originals["_check_tensor_all_with"](error_type, cond, *args, **kwargs)

    torch._check_tensor_all = check_all
    torch._check_tensor_all_with = check_all_with
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(torch, name, original)
