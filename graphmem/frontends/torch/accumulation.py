"""Autograd's sum of a tensor's gradients, in place where eager PyTorch adds in place.

A tensor read by several ops gets one gradient from each reader's backward; autograd's engine
sums them in the input buffer of the tensor's own backward node (torch/csrc/autograd/
input_buffer.cpp, `accumulate`): the first gradient to arrive is held, and each later one is
added to it. With grad mode off (backward without create_graph) the engine steals the held
gradient and adds in place (`old.add_(new)`) when `can_accumulate_inplace(old)`: a plain
dense tensor (not a subclass, zero tensor or nested one; non-overlapping and dense strides)
of which the buffer holds the last reference, of the tensor and of its storage. Otherwise it
allocates the sum (`old + new`).

Under fake tensors every tensor is a subclass, so the traced step always holds the
out-of-place sum: one gradient-sized buffer too many wherever the sum sits at the peak (a
state-space model's scan reads one slice of its state per step: each slice's backward is a
full gradient of the state, summed over the sequence). `EngineAccumulations` notes the
engine's adds as the trace runs them and which of them eager would steal, and `steal` makes
those in-place adds (`aten.add_`) in the traced graph, so their result is the first gradient's
buffer.

An engine add is told from an add inside a backward formula by when it runs: after the
backward node's post hooks (the node's own ops are done) and while the engine still has
that node current (torch/csrc/autograd/engine.cpp: `evaluate_function` adds the node's
outputs to the next nodes' input buffers after `call_function`). The last reference is read
as eager would see it: the held gradient's Python object (a fake tensor, alive exactly as
long as a real one would be: trace.py's lifetimes) dies at the add, so nothing else (another
input buffer, a view of it, the model's code) holds it; a view is never stolen (its base
shares its storage).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot

aten = torch.ops.aten


class EngineAccumulations:
    """The adds autograd's engine makes to sum gradients, as fx node names: (the sum, the
    held gradient) for each add whose held gradient eager could steal but for its last
    reference, which `steal` reads once the trace's lifetimes are known. The trace's dispatch
    mode (observed.py) shows it every op with `seen`, and calls `close` when the trace ends."""

    def __init__(self) -> None:
        self.candidates: list[tuple[str, str]] = []
        self._finished: Any = None  # the backward node whose own ops are done

    def watch(self, functions: list[Any]) -> None:
        """Mark the end of each backward node's own ops (a post hook on every node of
        `functions`, grad_fns.backward_functions: those backward from the loss can run;
        AccumulateGrad's own sum is torch's, not the engine's)."""
        for function in functions:
            if function.next_functions:
                function.register_hook(self._node_done)

    def _node_done(self, *_: Any) -> None:
        self._finished = torch._C._current_autograd_node()

    def close(self) -> None:
        self._finished = None  # no backward node kept alive past the trace

    def seen(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        """`func` has just run on `args` and made `out`."""
        if (func is aten.add.Tensor and not kwargs and self._finished is not None
                and torch._C._current_autograd_node() is self._finished
                and _stealable_layout(args[0], args[1]) and not torch.is_grad_enabled()):
            names = (_fx_name(out), _fx_name(args[0]))
            if names[0] is not None and names[1] is not None:
                self.candidates.append((names[0], names[1]))


def _stealable_layout(held: Any, new: Any) -> bool:
    """`can_accumulate_inplace`'s conditions but the last reference: a plain dense tensor
    that owns its storage (a view shares it with its base; so does the new gradient where it
    is the held one or a view of it, as when one gradient reaches a tensor read twice by one
    op: `h + h`), added to a plain one of its own shape."""
    return (isinstance(held, torch.Tensor) and isinstance(new, torch.Tensor)
            and held.layout is torch.strided and new.layout is torch.strided
            and not held._is_view() and not held._is_zerotensor()
            and held.shape == new.shape and held.dtype == new.dtype
            and held.untyped_storage()._cdata != new.untyped_storage()._cdata
            and bool(is_non_overlapping_and_dense_or_false(held)))


def _fx_name(tensor: Any) -> str | None:
    proxy_mode = get_proxy_mode()
    if proxy_mode is None or not isinstance(tensor, torch.Tensor):
        return None
    slot = get_proxy_slot(tensor, proxy_mode.tracer, None)
    return None if slot is None else str(slot.proxy.node.name)


def steal(graph_module: torch.fx.GraphModule, candidates: list[tuple[str, str]],
          released_after: dict[str, str]) -> int:
    """Make each candidate sum whose held gradient died at the sum (the input buffer held its
    last reference) an in-place add into that gradient, as eager runs it; returns how many."""
    stolen = {total for total, held in candidates if released_after.get(held) == total}
    count = 0
    for node in graph_module.graph.nodes:
        if node.name in stolen and node.target is aten.add.Tensor:
            node.target = aten.add_.Tensor
            count += 1
    if count:
        graph_module.recompile()
    return count
