"""Each backward op's FX node tagged with the autograd node it runs for (layer stamping's labels).

Autograd numbers every backward node it creates (`Node._sequence_nr()`), and a forward op's FX
node carries the number of the last node created when it ran (torch.fx's `meta["seq_nr"]`,
kept under `preserve_node_meta`): the op that created a backward node is the first FX node
with its number. While that backward node runs, torch.fx gives the nodes traced the same
number when `fx_traceback.set_grad_fn_seq_nr` says which one is running: AOT autograd does so
with a pre hook and a post hook on every backward node (torch/_functorch/_aot_autograd/
logging_utils.py `setup_stacktrace_preservation_hooks`); `numbered` does only that. What the
engine runs outside a backward node's hooks (the loss's seed, the sums of a tensor's gradients
in the next node's input buffer, accumulation.py) is numbered OUTSIDE. The hooks read no
tensor and keep none: the traced ops and their lifetimes are the same.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.fx import traceback as fx_traceback

OUTSIDE = -1  # `meta["seq_nr"]` of a backward op that no backward node's hooks enclose
_KEYS = ("grad_fn_seq_nr", "in_grad_fn")


@contextlib.contextmanager
def numbered(functions: list[Any]) -> Iterator[None]:
    """Backward over `functions` (backward_functions of the loss) with each op's FX node
    numbered as above."""
    handles = []
    for function in functions:
        number = function._sequence_nr()
        handles.append(function.register_prehook(_entering(number)))
        handles.append(function.register_hook(_leaving))
    saved = {key: fx_traceback.current_meta[key] for key in _KEYS
             if key in fx_traceback.current_meta}
    fx_traceback.set_grad_fn_seq_nr(OUTSIDE)
    try:
        yield
    finally:
        for key in _KEYS:
            fx_traceback.current_meta.pop(key, None)
        fx_traceback.current_meta.update(saved)
        for handle in handles:
            handle.remove()


def backward_functions(loss: torch.Tensor) -> list[Any]:
    """Every backward node `loss`'s backward can run (the list keeps each alive, so that no
    id is reused while walking)."""
    seen: set[int] = set()
    found = []
    pending = [loss.grad_fn]
    while pending:
        function = pending.pop()
        if function is None or id(function) in seen:
            continue
        seen.add(id(function))
        found.append(function)
        pending.extend(next_function for next_function, _ in function.next_functions)
    return found


def _entering(number: int) -> Callable[[Any], None]:
    def hook(_: Any) -> None:
        fx_traceback.set_grad_fn_seq_nr(number)

    return hook


def _leaving(*_: Any) -> None:
    fx_traceback.reset_grad_fn_seq_nr()
