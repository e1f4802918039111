"""Hooks on every call of a model's modules, which the modules themselves do not see.

graphmem's trace notes the module running when each op is traced, and enters its function
modes again around each call (trace.py, recompute.py). Hooks registered on each module
(`register_forward_pre_hook`) would sit in the module's own hook dicts, and
`nn.TransformerEncoderLayer.forward` refuses its fused fast path for a module that has any
("forward pre-/hooks are attached to the module"): the trace would take the Python path where
eager, with no hooks, runs `_transformer_encoder_layer_fwd`. torch's global module hooks
(`register_module_forward_pre_hook`) run for every module call without being any module's,
so each fast path decides as in eager; a call of a module outside the model is let through.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

ModuleHook = Callable[[nn.Module], None]


@contextlib.contextmanager
def module_calls(modules: list[nn.Module], enter: ModuleHook, leave: ModuleHook,
                 always_call: bool = False) -> Iterator[None]:
    """`enter(module)` before and `leave(module)` after each call of one of `modules` (after
    a call that raised too, with `always_call`), until the block ends."""
    ours = {id(module) for module in modules}

    def before(module: nn.Module, *_: Any) -> None:
        if id(module) in ours:
            enter(module)

    def after(module: nn.Module, *_: Any) -> None:
        if id(module) in ours:
            leave(module)

    handles = [register_module_forward_pre_hook(before),
               register_module_forward_hook(after, always_call=always_call)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
