"""Wrap chosen submodules in non-reentrant activation checkpointing, for one trace or run.

`checkpointed(model, paths)` makes each named submodule's forward run under
`torch.utils.checkpoint.checkpoint(..., use_reentrant=False)` and restores the model after.
graphmem re-traces the model this way to measure what a checkpoint plan saves: make_fx records
the recomputation where autograd's saved-tensor hooks run it, inside the backward pass.

graphmem traces with `torch.func.functional_call`, which swaps fake tensors in for the
parameters only during the forward call; the recomputation runs later, in backward. So the
wrapper remembers the tensors the module held during the forward and recomputes with them
again (a plain `module.forward` wrapper would recompute with the meta-device weights, which
then show up as constants). In a real run those are the module's own parameters, so the
wrapper behaves like the snippet graphmem suggests (`checkpoint_snippet`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch import nn
from torch.func import functional_call
from torch.overrides import _get_current_function_mode_stack
from torch.utils.checkpoint import checkpoint

from graphmem.errors import GraphmemError
from graphmem.frontends.torch.recompute import entered_again
from graphmem.frontends.torch.trace import module_scope_guard


@contextlib.contextmanager
def checkpointed(model: nn.Module, paths: Sequence[str]) -> Iterator[nn.Module]:
    """The model with each module in `paths` checkpointed, restored on exit."""
    modules = [_submodule(model, path) for path in paths]
    saved = [module.__dict__.get("forward") for module in modules]
    try:
        for module in modules:
            # an instance attribute shadows the class's forward; removed again below
            module.forward = _checkpointed_forward(module, module.forward)
        yield model
    finally:
        for module, previous in zip(modules, saved, strict=True):
            if previous is None:
                del module.forward
            else:
                module.forward = previous


def _submodule(model: nn.Module, path: str) -> nn.Module:
    try:
        return model.get_submodule(path)
    except AttributeError:
        raise GraphmemError(f"checkpoint: the model has no submodule '{path}'") from None


def _checkpointed_forward(module: nn.Module, forward: Callable[..., Any]) -> Callable[..., Any]:
    recomputing = [False]  # True while functional_call below re-enters module.__call__

    def run(*args: Any, **kwargs: Any) -> Any:
        if recomputing[0]:
            return forward(*args, **kwargs)
        tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
        modes = _get_current_function_mode_stack()

        def body(*inner: Any) -> Any:
            recomputing[0] = True
            try:
                # early stop leaves module annotations open
                with module_scope_guard(), entered_again(modes):
                    return functional_call(module, tensors, inner, kwargs)
            finally:
                recomputing[0] = False

        return checkpoint(body, *args, use_reentrant=False)

    return run
