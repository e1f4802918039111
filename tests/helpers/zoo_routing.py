"""A real step routed as graphmem routes it: every choice by value (`topk`, `argmax`,
`max.dim` over floats) made by graphmem's routing policy instead of the model's scores.

graphmem cannot know a router's choice (it is data), so it sizes a mixture of experts by a
policy (graphmem/core/routing.py; balanced by default) that graphmem/frontends/torch/
routing.py applies to every such choice of the trace. A zoo MoE row off the real step by
more than 2% is either that data, or a mechanism graphmem gets wrong: running the real model
with the same choices tells which (tests/test_zoo.py). The choices are laid out as the trace
lays them out (`_laid_out`), and the values gathered from the real scores at them."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from graphmem.core.routing import expert_loads, parse_moe_routing
from graphmem.frontends.torch.routing import _laid_out, _selection

aten = torch.ops.aten


class PolicyRouting(TorchDispatchMode):
    def __init__(self, policy: str = "balanced") -> None:
        super().__init__()
        self.routing = parse_moe_routing(policy)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        selection = _selection(func, args, kwargs)
        scores = args[0] if args else None
        if selection is None or selection[0] is None or not scores.is_floating_point():
            return func(*args, **kwargs)
        dim, top_k, _ = selection
        axis = dim % scores.dim()
        experts = scores.shape[axis]
        tokens = scores.numel() // experts
        if not 0 < top_k < experts:
            return func(*args, **kwargs)
        choices = _laid_out(expert_loads(self.routing, tokens, experts, top_k), tokens, top_k)
        others = [size for i, size in enumerate(scores.shape) if i != axis]
        indices = choices.reshape(*others, top_k).movedim(-1, axis).contiguous()
        if func is aten.argmax.default:
            return indices if _keepdim(func, args, kwargs) else indices.squeeze(axis)
        values = scores.gather(axis, indices)
        if func is aten.max.dim and not _keepdim(func, args, kwargs):
            values, indices = values.squeeze(axis), indices.squeeze(axis)
        return torch.return_types.topk((values, indices)) if func is aten.topk.default else (
            values, indices)


def _keepdim(func: Any, args: tuple, kwargs: dict) -> bool:
    # argmax(self, dim, keepdim) and max.dim(self, dim, keepdim): argument 2
    return bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))


class PolicyRouted(nn.Module):
    """The model with its forward under PolicyRouting, where the router is, and nothing else:
    with the mode on through backward too, GPT-OSS's training step measured 48,128 B higher
    (549,456 B in this form, graphmem 549,392 B): a Python dispatch mode changes the
    backward's allocations, not only the routing."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: object) -> object:
        with PolicyRouting():
            return self.model(*args)
