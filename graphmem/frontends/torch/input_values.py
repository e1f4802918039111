"""Tests of the model's floating inputs against an exact number: no element is equal.

Vision-language models drop the padding images of a batch before their vision encoder: an
image whose every pixel is exactly 0.0 is padding (transformers' Idefics3 and SmolVLM:
`real = (pixel_values == 0.0).sum(dim=(-1, -2, -3)) != values_per_image`, then
`pixel_values[real]`). Eager reads the mask's values (a boolean index is `nonzero`); fake
tensors have none, and the read stops the trace (`DynamicOutputShapeException:
aten.nonzero`). The inputs graphmem analyses are data: continuous values (the random normal
inputs a verified step is measured on, real images), in which a given exact number occurs
with probability zero, so a floating input (or a view of one) compared for equality with a
number is false everywhere (and `!=`, true). Integer and boolean inputs (ids, masks) are not
data of this kind and get no answer, nor does an input (or a view of it) the model wrote
into (`x[0].zero_()`: exact zeros now).

The answer is an assumption, and it is safe only where it gives the most memory, so the
values that follow from it are marked `assumed` (routing.py follows them) and read by
structure: a selection by them (a boolean index, `nonzero`) is answered only when it keeps
every element (SmolVLM's filter: no pixel equal, so every image is real: the largest step),
and a number read from them only when it counts such a mask's elements (its `sum`, or a view
of one: SmolVLM splits its image features by the real images per sample,
`split(counts.tolist())`), the selections' own sizes; a selection that would drop elements,
any other number read from them, and any Python control flow on them (`.any()` in an `if`,
`bool()`, `.item()` of a comparison) fail as fake tensors do, as without the answer. Each
selection answered is said in the analysis's warnings.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils.weak import WeakIdKeyDictionary

aten = torch.ops.aten
# a comparison with a number: its answer on continuous data
_SCALAR_COMPARISONS = {aten.eq.Scalar: False, aten.ne.Scalar: True}
# the count of a boolean mask's true elements
_COUNTS = frozenset({aten.sum.default, aten.sum.dim_IntList, aten.count_nonzero.default,
                     aten.count_nonzero.dim_IntList})


class InputData:
    """The trace's floating inputs and the views of them (the same values), and the values
    that follow from an answer about them (`assumed`)."""

    def __init__(self, names: list[str] | None = None) -> None:
        self._names = names or []
        self._tensors: WeakIdKeyDictionary = WeakIdKeyDictionary()  # tensor -> input name
        self.assumed: WeakIdKeyDictionary = WeakIdKeyDictionary()  # tensor -> input name
        # assumed counts of a mask that keeps every element (and views of them)
        self._full_counts: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._kept: dict[str, list[int]] = {}  # input name -> elements kept, per selection

    def fed(self, inputs: list[Any]) -> None:
        for i, tensor in enumerate(inputs):
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                self._tensors[tensor] = self._names[i] if i < len(self._names) else f"input{i}"

    def follow(self, func: Any, args: tuple, outputs: list[torch.Tensor]) -> None:
        """A view of an input's data is its data too (a reshape, a slice, one image)."""
        if getattr(func, "is_view", False) and args and self.holds(args[0]):
            for tensor in outputs:
                self._tensors[tensor] = self._tensors[args[0]]

    def written(self, tensors: list[torch.Tensor]) -> None:
        """Tensors an op writes into (in place, `out=`): they and every view of their storage
        are no longer the input's data."""
        if not tensors or not self._tensors:
            return
        storages = {_storage_key(tensor) for tensor in tensors}
        for tensor in list(self._tensors.keys()):
            if _storage_key(tensor) in storages:
                del self._tensors[tensor]

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

    def source(self, item: object) -> str | None:
        """The input a value follows from by an answer (None: not assumed)."""
        return self.assumed.get(item) if isinstance(item, torch.Tensor) else None

    def answered(self, args: tuple, output: torch.Tensor) -> None:
        self.assumed[output] = self._tensors[args[0]]

    def counted(self, func: Any, args: tuple, first_value: object,
                outputs: list[torch.Tensor]) -> None:
        """Outputs of an op on assumed values that count a mask keeping every element: its
        sum (`first_value`: the mask's value), a view of such a count."""
        if func in _COUNTS:
            with _disable_current_modes():
                full = (isinstance(first_value, torch.Tensor) and first_value.dtype == torch.bool
                        and bool(first_value.all()))
        else:
            full = bool(getattr(func, "is_view", False) and args
                        and isinstance(args[0], torch.Tensor) and args[0] in self._full_counts)
        for tensor in outputs if full else ():
            self._full_counts[tensor] = True

    def readable(self, items: list[object]) -> bool:
        """Whether a number may be read from these arguments: no assumed value among them
        but counts of masks that keep every element."""
        return all(item in self._full_counts for item in items
                   if isinstance(item, torch.Tensor) and item in self.assumed)

    def kept(self, name: str, elements: int) -> None:
        """A selection by an assumed mask that keeps all its `elements`."""
        self._kept.setdefault(name, []).append(elements)

    def note(self) -> str | None:
        """The answers the trace took, for the analysis's warnings; None when none."""
        if not self._kept:
            return None
        said = "; ".join(f"{name}: {len(sizes)} selection(s) of {', '.join(map(str, sizes))}"
                         " element(s)" for name, sizes in self._kept.items())
        return ("floating input data compared for equality with a number was taken as never"
                f" equal (continuous values), so selections by it kept every element ({said}):"
                " the most memory; an input with exact values there (0.0 padding, a 0/1"
                " mask) would keep fewer")


def _storage_key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata
