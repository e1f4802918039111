"""Fake tensors laid out as eager's CPU kernels lay out their outputs where the layout is a
tie (a size-1 dim's stride).

A tensor whose only non-1 dims are N and C ([2, 16, 1, 1]) is contiguous both as NCHW and as
channels-last: strides (16, 1, 1, 1) and (16, 1, 16, 16) describe the same bytes. The next
kernel that picks a memory format by the strides (`suggest_memory_format`: a bilinear
upsampling, a convolution) reads them, and eager and the fake tensors break the tie apart:
- eager's elementwise kernels (TensorIterator) give their output NCHW strides whenever every
  operand has the output's shape and is NCHW-contiguous (`compute_fast_setup_type`: "this
  leads to ambiguous cases (NC11) to be always treated as contiguous"); torch's Python
  elementwise rules, which fake tensors run, order the output's dims by the input's strides
  and keep (16, 1, 16, 16);
- eager's CPU batch norm makes its output NCHW when its input is NCHW-contiguous
  (`suggest_memory_format_contig`); its Python decomposition follows the input's strides.
UperNet's pyramid pooling (a 1x1 convolution on a pooled [2, C, 1, 1] channels-last tensor,
batch norm, ReLU, then a bilinear upsampling) upsampled channels-last in the trace and NCHW
in eager, and the convolution after it took oneDNN's other path (docs/zoo.md).

Which kernels do so is each kernel's own affair (hardtanh allocates `empty_like` its input
and keeps the tie; `t * 2` has a 0-dim operand and keeps it too), so graphmem asks the
kernel: while tracing for the CPU, an elementwise op or a batch norm whose fresh output is
such a tie is run for real on miniatures of its tensor arguments (each dim above 1 made 2,
size-1 dims kept, the same order of strides: tensors of a few elements), and where eager's
kernel gives the miniature NCHW strides, the fake output gets NCHW strides too: the same
shape, dtype and bytes, only the tie broken as eager breaks it. Every other output is the
fake tensor's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch._ops import HigherOrderOperator
from torch._prims_common import make_contiguous_strides_for
from torch._subclasses.fake_tensor import FakeTensorMode

aten = torch.ops.aten
# eager's CPU batch norm forward (Normalization.cpp `batch_norm_cpu`): NCHW output for an
# NCHW-contiguous input
BATCH_NORMS = frozenset({
    aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
    aten._native_batch_norm_legit.no_stats, aten._native_batch_norm_legit_no_training.default,
})


class EagerLayoutFakeTensorMode(FakeTensorMode):
    """FakeTensorMode whose elementwise and batch-norm outputs break a stride tie as eager's
    CPU kernels do (module docstring); `eager_layout=False`: the plain FakeTensorMode."""

    # torch finds a higher-order operator's rule (torch.cond's, say) by the mode's exact type
    # (torch/_ops.py HigherOrderOperator.dispatch), so a subclass has none of FakeTensorMode's
    # unless it takes them itself: they come through __torch_dispatch__ below
    supports_higher_order_operators = True

    def __init__(self, *, eager_layout: bool = True, **options: Any) -> None:
        super().__init__(**options)
        self.eager_layout = eager_layout

    def __torch_dispatch__(self, func: Any, types: Sequence[type], args: Sequence[object] = (),
                           kwargs: Mapping[str, object] | None = None) -> object:
        if isinstance(func, HigherOrderOperator):  # FakeTensorMode's own rule for it
            rule = func.python_key_table.get(FakeTensorMode)
            if rule is None:
                raise NotImplementedError(f"no fake-tensor rule for {func.name()}")
            return rule(self, *args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs or {})

    def dispatch(self, func: Any, types: Sequence[type], args: Sequence[object] = (),
                 kwargs: Mapping[str, object] | None = None) -> object:
        out = super().dispatch(func, types, args, kwargs or {})
        if not self.eager_layout or not _makes_fresh_output(func):
            return out
        first = out[0] if isinstance(out, tuple | list) and out else out
        if not isinstance(first, torch.Tensor) or not _tie(first):
            return out
        if not _eager_makes_nchw(func, args, kwargs or {}, first):
            return out
        with self:
            fresh = torch.empty_strided(first.shape, make_contiguous_strides_for(first.shape),
                                        dtype=first.dtype, device=first.device)
        return (fresh, *out[1:]) if isinstance(out, tuple) else (
            [fresh, *out[1:]] if isinstance(out, list) else fresh)


def _makes_fresh_output(func: Any) -> bool:
    """An elementwise op or a batch norm whose first return is a new tensor (not a view, not
    written in place)."""
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.returns or schema.returns[0].alias_info is not None:
        return False
    return func in BATCH_NORMS or torch.Tag.pointwise in getattr(func, "tags", ())


def _tie(tensor: torch.Tensor) -> bool:
    """NCHW-contiguous, but not with NCHW's strides: a size-1 dim's stride breaks the tie."""
    return (tensor.is_contiguous()
            and tuple(tensor.stride()) != tuple(make_contiguous_strides_for(tensor.shape)))


def _eager_makes_nchw(func: Any, args: Sequence[object], kwargs: Mapping[str, object],
                      out: torch.Tensor) -> bool:
    """Whether eager's CPU kernel gives this output NCHW strides: asked of the kernel itself,
    run on miniatures of the tensor arguments (every dim above 1 made 2, size-1 dims kept,
    the same order of strides), whose layout choice depends only on those (TensorIterator's
    fast setup: every operand of the output's shape and NCHW-contiguous, a number given for
    a tensor argument a 0-dim operand; a kernel that allocates its output `empty_like` its
    input keeps the input's strides; batch norm's `suggest_memory_format_contig`)."""
    try:
        with _real_kernels():
            made = func(*_miniatures(args), **dict(zip(kwargs, _miniatures(kwargs.values()),
                                                         strict=True)))
    except Exception:  # noqa: BLE001 (a kernel refusing a miniature: the fake's layout stays)
        return False
    first = made[0] if isinstance(made, tuple | list) else made
    return isinstance(first, torch.Tensor) and tuple(first.stride()) == tuple(
        make_contiguous_strides_for(first.shape))


def _miniatures(values: Any) -> list[object]:
    return [_miniature(v) for v in values]


def _miniature(value: object) -> object:
    if isinstance(value, list | tuple):
        return type(value)(_miniature(v) for v in value)
    if not isinstance(value, torch.Tensor):
        return value
    sizes = [min(int(n), 2) for n in value.shape]
    order = sorted(range(value.dim()), key=lambda d: (-int(value.stride()[d]), d))
    strides = [0] * value.dim()
    step = 1
    for dim in reversed(order):  # innermost first
        strides[dim] = step
        step *= sizes[dim]
    # ones, not zeros: an integer remainder or floor_divide by a zero miniature raises
    return torch.ones(sizes, dtype=value.dtype).as_strided(sizes, strides)


@contextlib.contextmanager
def _real_kernels() -> Iterator[None]:
    """Every dispatch mode off (the fake mode, the tracer's) and no gradient: a real CPU
    kernel on real miniatures, recorded nowhere."""
    with torch.utils._python_dispatch._disable_current_modes(), torch.no_grad():
        yield
