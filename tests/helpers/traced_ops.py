"""The torch path's FLOPs per aten op of a function traced with fake tensors (the cost-rule
tests of tests/test_ops_aten.py, tests/test_moe.py and tests/test_zoo_ops.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from graphmem.frontends.torch.costs import imported_cost


def traced_flops(fn: Callable[..., object], *args: torch.Tensor) -> dict[str, int]:
    """aten packet -> the torch path's FLOPs, for each op of `fn` traced with fake tensors;
    every op must be priced."""
    return _traced(fn, args, "flops")


def traced_macs(fn: Callable[..., object], *args: torch.Tensor) -> dict[str, int]:
    """traced_flops' multiply-accumulates."""
    return _traced(fn, args, "macs")


def traced_rnn_macs(rnn: torch.nn.RNNBase, x: torch.Tensor, train: bool) -> dict[str, int]:
    """traced_macs of a recurrent module's forward on `x` (and with `train`, the gradients
    of its output's sum for the input and every weight)."""
    names = [name for name, _ in rnn.named_parameters()]

    def step(inputs: torch.Tensor, *weights: torch.Tensor) -> object:
        y, _ = torch.func.functional_call(rnn, dict(zip(names, weights, strict=True)), inputs)
        return torch.autograd.grad(y.sum(), [inputs, *weights]) if train else y

    return traced_macs(step, x, *(p.detach().requires_grad_(train) for p in rnn.parameters()))


def _traced(fn: Callable[..., object], args: tuple[torch.Tensor, ...], field: str
            ) -> dict[str, int]:
    found: dict[str, int] = {}
    for fx_node in make_fx(fn, tracing_mode="fake")(*args).graph.nodes:
        packet = getattr(fx_node.target, "overloadpacket", None)
        if fx_node.op == "call_function" and packet is not None:
            cost = imported_cost(fx_node)
            assert cost is not None, f"{fx_node.target} is not priced"
            found[packet.__name__] = found.get(packet.__name__, 0) + int(getattr(cost, field))
    return found
