"""Trainable parameters the loss does not reach: no gradient, no optimizer state.

A real training step leaves such a parameter's .grad at None (a Hugging Face base model's
pooler, when the loss is over the hidden states; a head the forward never calls), and
torch.optim skips a parameter whose .grad is None, so its state is never created. The traced
step (trace.py) finds them by walking the loss's autograd graph before backward, as
`loss.backward()` walks it, and leaves them out of the backward and the update.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot

from graphmem.core.ir import Role
from graphmem.errors import GraphmemError


def reached_leaves(loss: torch.Tensor) -> set[int]:
    """The ids of the leaf tensors that backward from `loss` writes a gradient to: autograd's
    AccumulateGrad nodes reachable from loss.grad_fn, as `loss.backward()` walks them. A
    parameter the loss does not reach keeps .grad None in a real step."""
    leaves: set[int] = set()
    seen: dict[int, Any] = {}  # holds each node, so that no id is reused while walking
    pending = [loss.grad_fn]
    while pending:
        function = pending.pop()
        if function is None or id(function) in seen:
            continue
        seen[id(function)] = function
        variable = getattr(function, "variable", None)  # AccumulateGrad: the leaf it fills
        if isinstance(variable, torch.Tensor):
            leaves.add(id(variable))
        pending.extend(next_function for next_function, _ in function.next_functions)
    return leaves


@dataclass
class NoGradient:
    """The trainable parameters the loss does not reach, as the traced step finds them.

    The trace made their optimizer state up front (placeholders), and with --grad-accum a
    zeros tensor for their earlier micro-batches' gradient sum; both are dropped, so such a
    parameter costs what a frozen one does: its weights."""

    trained: list[str]  # the trainable parameters' names, in the order the step sees them
    slots: tuple[str, ...]  # the optimizer's state slots
    names: list[str] = field(default_factory=list)
    grad_sums: list[str] = field(default_factory=list)  # fx nodes of their zeros .grad

    def found(self, trainable: list[torch.Tensor], reached: set[int]) -> list[bool]:
        """Which of `trainable` the loss reaches; the others are noted and, with
        --grad-accum, lose the .grad the step gave them."""
        used = [id(t) in reached for t in trainable]
        if not any(used):
            raise GraphmemError("--train: the loss reaches no trainable parameter, so a"
                                " training step computes no gradient; check the loss")
        tracer = get_proxy_mode().tracer  # type: ignore[union-attr]
        for name, tensor, reaches in zip(self.trained, trainable, used, strict=True):
            if reaches:
                continue
            self.names.append(name)
            if tensor.grad is not None:
                self.grad_sums.append(get_proxy_slot(tensor.grad, tracer).proxy.node.name)
                tensor.grad = None
        return used

    def pruned(self, graph: torch.fx.Graph,
               roles: list[tuple[Role, str]]) -> list[tuple[Role, str]]:
        """`roles` without the optimizer state of the parameters without gradient, whose
        placeholders (never read) and zeros .grad nodes (never used) leave `graph`. The
        graph is converted, never run, so its code is not regenerated."""
        dropped = {f"{slot}[{name}]" for slot in self.slots for name in self.names}
        kept = []
        placeholders = [node for node in graph.nodes if node.op == "placeholder"]
        for node, (role, label) in zip(placeholders, roles, strict=True):
            if role is Role.OPTIMIZER_STATE and label in dropped:
                graph.erase_node(node)
            else:
                kept.append((role, label))
        sums = set(self.grad_sums)
        for node in [node for node in graph.nodes if node.name in sums]:
            graph.erase_node(node)
        return kept

    def notes(self, params: dict[str, nn.Parameter]) -> list[str]:
        if not self.names:
            return []
        count = sum(params[name].numel() for name in self.names)
        shown = ", ".join(self.names[:3]) + (", ..." if len(self.names) > 3 else "")
        return [f"{len(self.names)} trainable parameter tensors ({count:,} parameters: {shown})"
                " get no gradient: the loss does not reach them, so a training step leaves"
                " their .grad at None and the optimizer keeps no state for them"]
