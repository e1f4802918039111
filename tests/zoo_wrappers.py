"""The zoo's model wrapper, shared by tests/zoo_models.py (transformers) and
tests/zoo_diffusers.py (diffusers): positional inputs in, the one tensor the loss reads out."""

from __future__ import annotations

from torch import nn


class Logits(nn.Module):
    """A model called with keyword inputs, returning the one tensor the loss reads (`logits`,
    a diffusers model's `sample`, or another named output)."""

    def __init__(self, model: nn.Module, names: tuple[str, ...], output: str = "logits"
                 ) -> None:
        super().__init__()
        self.model = model
        self.names = names
        self.output = output

    def forward(self, *args: object) -> object:
        return getattr(self.model(**dict(zip(self.names, args, strict=True))), self.output)
