"""PyTorch's own recurrent cells on the CPU (a GRU, an RNN, an LSTM with projections: nn.LSTM
runs oneDNN's kernel only without them, tests/test_onednn_rnn.py) chunk each step's gates
with `unsafe_chunk` / `unsafe_split`, whose schema declares fresh tensors though they are
views of the gates (frontends/torch/fx_convert.py VIEW_LIST_OPS). Counted as made, a
one-layer GRU's training step was 1,024 B short of the real step's tensors (-4.98%: the
gradient sums autograd makes in place into a view's base were new tensors) and an LSTM with
projections 512 B a step over its inference (+11.11%)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytestmark = pytest.mark.torch


class Gru(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(16, 16)
        self.head = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0])


def test_a_grus_step_matches_the_real_one() -> None:
    from graphmem import analyze_torch
    from graphmem.frontends.torch.loader import parse_tensor_spec
    from graphmem.verify.runners.torch_runner import measure_step

    specs = [parse_tensor_spec("10x2x16")]  # [T, B, I]
    torch.manual_seed(0)
    analysis = analyze_torch(Gru(), specs, train=True, optimizer="adamw", plan=False,
                             suggest=False)
    chunks = [v for n in analysis.graph.nodes if n.op_type.startswith("aten.unsafe_")
              for v in n.outputs]
    assert chunks and all(v.alias_of is not None for v in chunks)
    torch.manual_seed(0)
    measured = measure_step(Gru(), specs, True, "adamw")
    # 20,580 B both (19,556 B predicted before)
    assert int(analysis.liveness.activation_peak_bytes) == pytest.approx(
        measured.kernel_ends_peak_bytes or measured.peak_bytes, rel=0.001)
