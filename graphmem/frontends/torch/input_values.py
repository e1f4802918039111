"""Tests of the model's floating inputs against an exact number: no element is equal.

Vision-language models drop the padding images of a batch before their vision encoder: an
image whose every pixel is exactly 0.0 is padding (transformers' Idefics3 and SmolVLM:
`real = (pixel_values == 0.0).sum(dim=(-1, -2, -3)) != values_per_image`, then
`pixel_values[real]`). Eager reads the mask's values (a boolean index is `nonzero`); fake
tensors have none, and the read stops the trace (`DynamicOutputShapeException:
aten.nonzero`). The inputs graphmem analyses are data: continuous values (the random normal
inputs a verified step is measured on, real images), in which a given exact number occurs
with probability zero, so a floating input (or a view of one) compared for equality with a
number is false everywhere (and `!=`, true): every image is a real image, which is also the
most memory the step can take. The answer is a known value the routing values follow
(routing.py): the mask's sums, the index by its true positions. Integer and boolean inputs
(ids, masks) are not data of this kind and get no answer.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

aten = torch.ops.aten
# a comparison with a number: its answer on continuous data
_SCALAR_COMPARISONS = {aten.eq.Scalar: False, aten.ne.Scalar: True}


class InputData:
    """The trace's floating inputs and the views of them (the same values)."""

    def __init__(self) -> None:
        self._tensors: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def fed(self, inputs: list[Any]) -> None:
        for tensor in inputs:
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                self._tensors[tensor] = True

    def follow(self, func: Any, args: tuple, outputs: list[torch.Tensor]) -> None:
        """A view of an input's data is its data too (a reshape, a slice, one image)."""
        if getattr(func, "is_view", False) and args and self.holds(args[0]):
            for tensor in outputs:
                self._tensors[tensor] = True

    def holds(self, item: object) -> bool:
        return isinstance(item, torch.Tensor) and item in self._tensors

    def answer(self, func: Any, args: tuple) -> bool | None:
        """The answer of `input == number` (`!=`) on continuous data, else None."""
        if func not in _SCALAR_COMPARISONS or len(args) < 2 or not self.holds(args[0]):
            return None
        number = args[1]
        if isinstance(number, bool) or not isinstance(number, int | float):
            return None
        return _SCALAR_COMPARISONS[func] if math.isfinite(number) else None
