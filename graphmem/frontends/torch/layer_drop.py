"""A scalar uniform draw a branch reads: LayerDrop keeps every layer in the trace.

LayerDrop (Fan et al., 2019; 91 transformers models, Informer, Wav2Vec2, BART and kin) skips
a layer in training when a fresh draw falls below a probability: `if torch.rand([]) < p`.
Eager reads the draw (`.item()` of the comparison); a fake tensor has no value, so the read
stops the trace. The step planned is the one that holds the most: every layer kept (a step
that drops one holds less, and with `p = 0` every real step keeps them all). So a draw of
one element from `rand` gets a known value, the largest float32 below 1 (the top of
[0, 1)): every `draw < p` with p < 1 is false, and the routing values (routing.py) carry the
answer to the branch. A larger draw (a dropout mask) keeps no value, as before.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

# the largest float32 below 1: a uniform draw's top
TOP_OF_UNIT_INTERVAL = float(torch.nextafter(torch.tensor(1.0), torch.tensor(0.0)))
_UNIFORM_DRAWS = frozenset({torch.ops.aten.rand.default, torch.ops.aten.rand.generator})


def scalar_draw_value(func: Any, outputs: list[torch.Tensor]) -> torch.Tensor | None:
    """The value a one-element uniform draw is given, or None for any other op."""
    if func not in _UNIFORM_DRAWS or len(outputs) != 1 or outputs[0].numel() != 1:
        return None
    with _disable_current_modes():
        return torch.full(outputs[0].shape, TOP_OF_UNIT_INTERVAL, dtype=outputs[0].dtype)
