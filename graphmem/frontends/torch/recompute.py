"""A checkpointed layer's recomputation in backward, traced as the forward ran.

`torch.utils.checkpoint` (non-reentrant) recomputes a layer inside autograd's engine, when
backward unpacks a saved tensor. Two things the forward had are gone there:

- graphmem's fake parameters: `functional_call` swaps them in for the forward call only, so a
  recomputation run later would read the module's own parameters (meta-device tensors where
  the model was built on meta, which fake tensors refuse to mix with: "found at least two
  devices, cpu and meta"; real ones elsewhere, traced as constants). `parameters_held`
  keeps the swap for the whole step, forward and backward, as a real step keeps its weights.
- function modes: autograd's engine runs backward without them (unlike dispatch modes), and
  graphmem's CUDA kernel choices are one (cuda_kernels.py); without them a recomputed
  dropout saves a float mask where the forward saved a bool one and checkpoint refuses the
  step ("different metadata"). `modes_follow_modules` enters the forward's modes again
  around each module call that runs without them, which is where a recomputation runs
  (a Hugging Face layer or `checkpoint(block, x)` recomputes by calling the module).
graphmem's own checkpointing (checkpoint.py) uses `entered_again` the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

import torch
from torch import nn
from torch.nn.utils.stateless import _reparametrize_module
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

from graphmem.frontends.torch.module_hooks import module_calls


@contextlib.contextmanager
def parameters_held(model: nn.Module, tensors: Mapping[str, torch.Tensor]) -> Iterator[None]:
    """`model` reads `tensors` (by name) instead of its own parameters and buffers until the
    block ends; tied weights follow, as `torch.func.functional_call` ties them."""
    with _reparametrize_module(model, dict(tensors), tie_weights=True):
        yield


@contextlib.contextmanager
def entered_again(modes: Sequence[TorchFunctionMode]) -> Iterator[None]:
    """The function modes among `modes` that are not active, entered for the block."""
    active = _get_current_function_mode_stack()
    with contextlib.ExitStack() as stack:
        for mode in modes:
            if mode not in active:
                stack.enter_context(mode)
        yield


@contextlib.contextmanager
def modes_follow_modules(model: nn.Module) -> Iterator[None]:
    """Each call of a module of `model` runs under the function modes the model's own
    forward began under (read at its first call), entered again where they are missing
    (torch's global module hooks: module_hooks.py)."""
    forward_modes: list[TorchFunctionMode] = []
    scopes: list[contextlib.ExitStack] = []

    def enter(module: nn.Module) -> None:
        if module is model and not forward_modes:
            forward_modes.extend(_get_current_function_mode_stack())
        scope = contextlib.ExitStack()
        scope.enter_context(entered_again(forward_modes))
        scopes.append(scope)

    def leave(_: nn.Module) -> None:
        if scopes:
            scopes.pop().close()

    try:
        with module_calls(list(model.modules()), enter, leave, always_call=True):
            yield
    finally:
        while scopes:
            scopes.pop().close()
