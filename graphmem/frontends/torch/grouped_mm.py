"""`aten._grouped_mm` on fake tensors of any floating dtype, as its kernels run it.

transformers' default experts (`grouped_mm`) call `torch._grouped_mm` in the model's dtype:
the CPU kernel runs fp32 and fp16 as well as bf16, and so does CUDA's (its fallback outside
bf16 on SM90), but torch's meta function (the shapes fake tensors get) checks for bf16 only,
so an fp32 Mixtral fails to trace. `any_dtype_grouped_mm()` gives fake tensors, while a step
is traced, the meta function's answer for the same shapes in bf16 (its shape algebra and
its other checks) with the real dtype: `out_dtype`, else mat_a's. Only then: fake tensors'
dispatch cache (shared by every FakeTensorMode) forgets its `_grouped_mm` answers on the way
out, so nothing outside the trace sees the wider rule.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses import fake_impls
from torch._subclasses.fake_tensor import FakeTensorMode

aten = torch.ops.aten
_CHECKED_DTYPE = torch.bfloat16  # the one dtype the meta function accepts


def _is_grouped_mm(func: Any) -> bool:
    return func is aten._grouped_mm.default


def _fake_grouped_mm(mode: Any, func: Any, mat_a: torch.Tensor, mat_b: torch.Tensor,
                     offs: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                     out_dtype: torch.dtype | None = None) -> Any:
    if mat_a.dtype == _CHECKED_DTYPE and mat_b.dtype == _CHECKED_DTYPE:
        return NotImplemented  # the meta function itself
    meta = [None if t is None else torch.empty_strided(
        t.shape, t.stride(), dtype=_CHECKED_DTYPE if t.is_floating_point() else t.dtype,
        device="meta") for t in (mat_a, mat_b, offs, bias)]
    shaped = func(*meta)
    with mode:
        return torch.empty_strided(shaped.shape, shaped.stride(),
                                   dtype=out_dtype or mat_a.dtype, device=mat_a.device)


@contextlib.contextmanager
def any_dtype_grouped_mm() -> Iterator[None]:
    """While tracing: fake `_grouped_mm` in every floating dtype (module docstring)."""
    entry = (_is_grouped_mm, _fake_grouped_mm)
    fake_impls.op_implementations_checks.append(entry)
    try:
        yield
    finally:
        fake_impls.op_implementations_checks.remove(entry)
        cache = FakeTensorMode.cache
        for key in [key for key in cache if key.key and key.key[0] is aten._grouped_mm.default]:
            del cache[key]
