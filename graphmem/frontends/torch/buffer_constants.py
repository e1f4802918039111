"""Buffers whose values the model reads as numbers, kept as constants of the trace.

A model may compute with a one-element buffer as a number: EnCodec pads each convolution by
amounts computed from its kernel-size and stride buffers (0-dim int64, `int(padding_total)`).
graphmem traces with fake tensors, which hold no values, so reading one stops the trace
(`DataDependentOutputException: aten._local_scalar_dense`). make_fx already keeps the value of
a small tensor made in the forward (`torch.tensor(3)`: lift_fresh_copy) as a constant beside
its proxy, propagates it through ops whose inputs are all constants, and answers `.item()`
from it; it does so for no input. Here each one-element buffer that holds a value (a real
module's, not one built on the meta device) gets its value as that constant, so the same
propagation reaches it. The graph is unchanged: every op is still recorded; only reading
the value as a number no longer fails.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import (
    _ProxyTensor,
    get_proxy_mode,
    get_proxy_slot,
    set_proxy_slot,
)


def valued_scalars(buffers: Mapping[str, torch.Tensor]) -> dict[int, torch.Tensor]:
    """{position among the buffers: a copy of its value} for each one-element buffer that
    holds one (not on the meta device)."""
    return {i: b.detach().clone() for i, b in enumerate(buffers.values())
            if b.numel() == 1 and not b.is_meta}


def with_buffer_constants(step: Callable[..., Any], values: Mapping[int, torch.Tensor]
                          ) -> Callable[..., Any]:
    """`step(params, buffers, ...)` with the buffers at `values`' positions made constants of
    the trace (their proxies' constant, as make_fx keeps for a `torch.tensor` it lifts)."""
    if not values:
        return step

    def run(params: list, buffers: list, *rest: Any) -> Any:
        mode = get_proxy_mode()
        if mode is not None:
            for position, value in values.items():
                # the copy valued_scalars made (a write in the trace changes it, not the
                # module's buffer); copying here would be traced as a clone
                slot = get_proxy_slot(buffers[position], mode.tracer)
                set_proxy_slot(buffers[position], mode.tracer, _ProxyTensor(slot.proxy, value))
        return step(params, buffers, *rest)

    return run
