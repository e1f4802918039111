"""Tests of finiteness on values the trace does not know: the values are finite numbers.

Encoders and decoders of the DETR family (DETR, Mask2Former, and two dozen transformers
models in all) clamp their hidden states in training only if some are not finite:
`if not torch.isfinite(x).all(): x = x.clamp(...)`. Eager reads the answer (`.item()`); fake
tensors have no values, so the read stops the trace. A step measured or planned is one
whose activations are finite numbers (a step with an inf or a NaN in them has already
failed), so each test of an unknown value gets that answer: `isinf` and `isnan` are false
everywhere, and the two halves `torch.isfinite` is made of, `x == x` (false only for NaN)
and `abs(x) != inf`, are true everywhere. The answer is a known value the routing values
follow (routing.py): `.all()` of it is known, and Python takes the finite branch. A
one-element tensor expanded to the output's shape: no memory per element.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

aten = torch.ops.aten
# tests that are false on every finite number
_FALSE_ON_FINITE = frozenset({aten.isinf.default, aten.isnan.default, aten.isneginf.default,
                              aten.isposinf.default})
_TRUE_ON_FINITE = frozenset({aten.isfinite.default})
# comparisons with a non-finite scalar: not equal to any finite number
_SCALAR_COMPARISONS = {aten.eq.Scalar: False, aten.ne.Scalar: True}
# a tensor compared with itself: equal unless NaN
_SELF_COMPARISONS = {aten.eq.Tensor: True, aten.ne.Tensor: False}


def finite_answer(func: Any, args: tuple) -> bool | None:
    """The answer of a finiteness test on finite values, or None when `func(args)` is none."""
    if func in _FALSE_ON_FINITE:
        return False
    if func in _TRUE_ON_FINITE:
        return True
    if func in _SCALAR_COMPARISONS and len(args) > 1 and isinstance(args[1], float) and (
            not math.isfinite(args[1])):
        return _SCALAR_COMPARISONS[func]
    if func in _SELF_COMPARISONS and len(args) > 1 and args[0] is args[1]:
        return _SELF_COMPARISONS[func]
    return None


def answered(answer: bool, like: torch.Tensor) -> torch.Tensor:
    """`answer` everywhere in a boolean tensor of `like`'s shape (one element, expanded)."""
    with _disable_current_modes():
        return torch.tensor(answer).expand(like.shape)
