"""A reduced loss whose storage is its unreduced elementwise loss, as PyTorch's kernels make it.

`F.mse_loss`, `F.smooth_l1_loss` and `F.soft_margin_loss` with a reduction (mean, sum)
compute the elementwise loss into a buffer of the input's shape and write the reduction into
it: the 0-dim loss they return keeps that whole buffer as its storage for as long as the
loss lives (measured on the CPU, [2, 8, 16, 16] fp32: `loss.untyped_storage().nbytes()` is
16,384, and `del loss` frees 16,384 B besides; l1, Huber, BCE-with-logits, KL divergence and
Poisson NLL return a 4-byte storage). A fake tensor's storage is the 0-dim one, so the trace
held only the scalar: the IR gives such a node an output of the input's shape, the loss as
its alias, and liveness keeps that storage while the loss or a view of it (`loss.detach()`,
which the traced step returns: held to the step's end, as verify's measured step holds it)
is read or held.
"""

from __future__ import annotations

from typing import Any

import torch

# aten packet -> the position of its `reduction` argument (0: none, 1: mean, 2: sum)
_UNREDUCED_STORAGE = {"mse_loss": 2, "smooth_l1_loss": 2, "soft_margin_loss": 2}


def unreduced_storage(fx_node: torch.fx.Node) -> torch.Tensor | None:
    """The input (its shape and dtype) whose size a reduced loss's storage has, or None."""
    packet = getattr(fx_node.target, "overloadpacket", None)
    position = _UNREDUCED_STORAGE.get(getattr(packet, "__name__", ""))
    if position is None:
        return None
    reduction = _argument(fx_node, position, "reduction", 1)
    source = fx_node.args[0] if fx_node.args else None
    meta = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if reduction == 0 or not isinstance(meta, torch.Tensor):
        return None
    return meta


def _argument(fx_node: torch.fx.Node, position: int, name: str, default: Any) -> Any:
    if position < len(fx_node.args):
        return fx_node.args[position]
    return fx_node.kwargs.get(name, default)
