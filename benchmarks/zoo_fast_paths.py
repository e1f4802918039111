"""torch.nn's fused inference kernels (docs/zoo.md, the fourth round): nn.MultiheadAttention
and nn.TransformerEncoderLayer in eval mode, through graphmem next to the real step.

`python benchmarks/zoo_fast_paths.py [name ...]` prints a markdown row per model: unsupported
ops, MACs over FlopCounterMode's (fast path off, SDPA's math backend), graphmem's live-tensor
peak against the real step's tensors, and its torch-cpu peak against the allocator's
(tests/helpers/zoo.py `check`), inference only (training takes the Python path). Input
2x16x32: b 2, s 16, e 32, 4 heads unless the name says otherwise.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.zoo import check
from tests.test_torch_fast_paths import EncoderLayer, SelfAttention
from tests.zoo_models import ZooModel


class Encoder(nn.Module):
    """nn.TransformerEncoder of 2 layers (no mask: its nested-tensor path is not taken)."""

    def __init__(self, norm_first: bool = False) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                           norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


MODELS: dict[str, Callable[[], nn.Module]] = {
    "mha_weights_averaged": SelfAttention,
    "mha_no_weights": lambda: SelfAttention(need_weights=False),
    "mha_weights_per_head": lambda: SelfAttention(average=False),
    "mha_causal_and_padding": lambda: SelfAttention(causal=True),
    "mha_causal_no_weights": lambda: SelfAttention(need_weights=False, padding=False,
                                                   causal=True),
    "mha_no_mask": lambda: SelfAttention(padding=False),
    "mha_1_head": lambda: SelfAttention(heads=1),  # refused: the Python path, as eager
    "encoder_2_layers": Encoder,
    "encoder_2_layers_pre_norm": lambda: Encoder(norm_first=True),
    "layer_padding_mask": EncoderLayer,
    "layer_gelu_pre_norm": lambda: EncoderLayer(norm_first=True, activation="gelu"),
}
HEADER = ("| model | unsupported | MACs / FlopCounterMode | predicted peak (B) | vs tensors |"
          " torch-cpu peak (B) | vs allocator (scratch incl.) |\n"
          "|---|---|---:|---:|---:|---:|---:|")


def row(name: str) -> str:
    r = check(ZooModel(name, "custom", MODELS[name], ("2x16x32",)), False)
    unsupported = ", ".join(f"{op} x{n}" for op, n in r.unsupported.items()) or "0"
    return (f"| {name} | {unsupported} | {r.macs_ratio:.4f} | {r.predicted_peak_bytes:,} |"
            f" {r.peak_error:+.2%} | {r.predicted_allocator_bytes:,} | {r.allocator_error:+.2%} |")


def main(names: list[str]) -> None:
    warnings.filterwarnings("ignore")
    print(HEADER, flush=True)
    for name in names or list(MODELS):
        print(row(name), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
