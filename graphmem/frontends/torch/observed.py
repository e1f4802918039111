"""graphmem's observers of a trace, behind one dispatch mode.

Three things watch every op make_fx traces: the eager lifetimes of its outputs
(`EagerLifetimes`), autograd's gradient sums (accumulation.py) and the values a mixture of
experts routes by (routing.py). Each was a TorchDispatchMode of its own, stacked (routing
outermost, lifetimes innermost), and each Python mode costs every op a re-dispatch through
PyTorch's dispatcher and a Python handler (wrapped against dynamo): about a fifth of a
Llama training step's trace went to the three layers. `ObservedOps` is one mode that runs
the three in the same order around one call of the op:

- a plain op (the routing has nothing to do before it: routing.py `RoutedValues.plain`) runs
  once; then lifetimes and sums see it (innermost first, as when each was a mode below the
  next), then the routing follows its values;
- any other (a higher-order op such as torch.cond, a data-dependent op, one with a static
  form) goes to the routing as before, with the two inner observers entered as a mode of
  their own (`_Inner`) for the ops it calls: the same ops reach the same observers in the
  same order as with three modes.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from graphmem.frontends.torch.accumulation import EngineAccumulations
from graphmem.frontends.torch.onednn_rnn import distinct_bias_gradients, note_grad_mode
from graphmem.frontends.torch.routing import RoutedValues

# C++ code's device checks on fake tensors (the autograd engine's, foreach's grouping): most
# of the ops the modes see, none of them makes a tensor
_DEVICE_QUERY = torch.ops.prim.device.default


class EagerLifetimes:
    """Notes when the Python object of each op's output dies (when eager frees it)."""

    def __init__(self, cpu: bool = True) -> None:
        self.released_after: dict[str, str] = {}
        self.watched: set[str] = set()
        self.cpu = cpu  # a trace of the CPU's kernels (not one for a GPU: cuda_kernels.py)

    def held_past_step(self, graph: torch.fx.Graph) -> None:
        """A traced tensor still alive when the trace has ended is held by something outside
        the step (a module's cache: transformers' lru_cache'd position embeddings of DETR,
        keyed by the mask they were made from): eager holds it past the step, so it is
        released at the graph's end."""
        last = next(iter(reversed(graph.nodes)), None)
        pending = self.watched - self.released_after.keys()
        if last is None or not pending:
            return
        # one only a reference cycle kept is garbage, which eager frees at a collection, not
        # held: the trace runs no full collection (trace.py), so collect now; what dies here
        # keeps its last use as its release, as a tensor no finalizer saw
        gc.collect()
        for name in pending:
            if self.released_after.pop(name, None) is None:
                self.released_after[name] = last.name

    def seen(self, func: Any, out: Any) -> None:
        """`func` has just made `out`: a finalizer on each traced tensor notes its death."""
        if func is _DEVICE_QUERY:
            return
        proxy_mode = get_proxy_mode()
        if proxy_mode is None:
            return
        if self.cpu:
            note_grad_mode(func, out, proxy_mode.tracer)  # onednn_rnn.py: LSTM's workspace
        for tensor in (out,) if isinstance(out, torch.Tensor) else tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                slot = get_proxy_slot(tensor, proxy_mode.tracer, None)
                if slot is not None:
                    self.watched.add(slot.proxy.node.name)
                    weakref.finalize(tensor, self._released, slot.proxy.node.name,
                                     proxy_mode.tracer.graph)

    def _released(self, name: str, graph: torch.fx.Graph) -> None:
        last = next(iter(reversed(graph.nodes)), None)
        if last is not None:
            self.released_after[name] = last.name


class ObservedOps(TorchDispatchMode):
    """The routing, the gradient sums and the lifetimes, as one mode (module docstring)."""

    # torch.cond (a higher-order op) reaches the mode too: it runs it like any op, so make_fx
    # traces both branches; without this the mode refused every model with a torch.cond
    supports_higher_order_operators = True

    def __init__(self, routed: RoutedValues, sums: EngineAccumulations,
                 lifetimes: EagerLifetimes) -> None:
        super().__init__()
        self.routed = routed
        self.sums = sums
        self.lifetimes = lifetimes

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.routed.plain(func):
            out = self.inner(func, args, kwargs)
            self.routed.follow(func, args, kwargs or {}, out)
            return out
        with _Inner(self):
            return self.routed.dispatch(func, args, kwargs)

    def inner(self, func: Any, args: Any, kwargs: Any) -> Any:
        """`func` run, seen by the observers below the routing: lifetimes, then sums."""
        out = distinct_bias_gradients(func, func(*args, **(kwargs or {})))  # onednn_rnn.py
        self.lifetimes.seen(func, out)
        self.sums.seen(func, args, kwargs, out)
        return out

    def __exit__(self, *args: Any) -> Any:
        self.sums.close()
        return super().__exit__(*args)


class _Inner(TorchDispatchMode):
    """The observers below the routing, for the ops the routing itself calls."""

    supports_higher_order_operators = True

    def __init__(self, observed: ObservedOps) -> None:
        super().__init__()
        self.observed = observed

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self.observed.inner(func, args, kwargs)
