"""An LSTM on the CPU runs as one oneDNN kernel per layer and direction
(aten.mkldnn_rnn_layer, and its backward in training): priced as the ONNX LSTM op is
(graphmem/ops/recurrent.py), its MACs checked against PyTorch's FlopCounterMode on the same
LSTM written out step by step (F.linear per gate block: FlopCounterMode has no formula for
the fused kernel). A GRU on the CPU is matmuls per step, checked the same way."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from graphmem.ops.recurrent import lstm_layer_backward_costs, lstm_layer_costs
from tests.helpers.traced_ops import traced_rnn_macs


def test_the_formulas_worked_by_hand() -> None:
    # rows 64 (seq 16 x batch 4), input 32, hidden 64, two biases: MACs 64 x 4 x 64 x (32 +
    # 64) = 1,572,864; per unit-step 4 gates x (1 sum + 2 biases) + 3 sigmoids x 4 + 2 tanh x 1
    # + 4 (the cell) = 30 FLOPs: 2 x 1,572,864 + 64 x 64 x 30 = 3,268,608
    assert lstm_layer_costs(64, 32, 64, True) == (1_572_864, 3_268_608)
    # without biases: 4 x 2 = 8 FLOPs less per unit-step: 3,268,608 - 4,096 x 8
    assert lstm_layer_costs(64, 32, 64, False) == (1_572_864, 3_268_608 - 32_768)
    # backward: twice the MACs (the input's and state's gradients, the weights' gradients);
    # per unit-step 7 + 2 tanh' x 3 + 3 sigmoid' x 3 + 4 x 2 bias sums = 30:
    # 2 x 3,145,728 + 4,096 x 30 = 6,414,336
    assert lstm_layer_backward_costs(64, 32, 64, True) == (3_145_728, 6_414_336)


Weights = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _lstm_cell(x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, weights: Weights
               ) -> tuple[torch.Tensor, torch.Tensor]:
    w_ih, w_hh, b_ih, b_hh = weights
    i, f, g, o = (F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)).chunk(4, dim=1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def _gru_cell(x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, weights: Weights
              ) -> tuple[torch.Tensor, torch.Tensor]:
    # PyTorch's gate order r, z, n; n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
    w_ih, w_hh, b_ih, b_hh = weights
    i_r, i_z, i_n = F.linear(x, w_ih, b_ih).chunk(3, dim=1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, dim=1)
    r, z = (i_r + h_r).sigmoid(), (i_z + h_z).sigmoid()
    return (1 - z) * (i_n + r * h_n).tanh() + z * h, c


CELLS = {"LSTM": _lstm_cell, "GRU": _gru_cell}


def _written_out(rnn: nn.RNNBase, x: torch.Tensor, initial_grad: bool
                 ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """nn.LSTM's or nn.GRU's arithmetic step by step (batch_first), every direction and
    layer; and the initial hidden states (asking for a gradient with `initial_grad`)."""
    layer_input, initial = x, []
    for layer in range(rnn.num_layers):
        outputs = []
        for direction in range(2 if rnn.bidirectional else 1):
            suffix = f"_l{layer}" + ("_reverse" if direction else "")
            weights = tuple(getattr(rnn, name + suffix)
                            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
            h = c = x.new_zeros(x.shape[0], rnn.hidden_size).requires_grad_(initial_grad)
            initial.append(h)
            steps = range(x.shape[1])[::-1] if direction else range(x.shape[1])
            hs = {}
            for t in steps:
                h, c = CELLS[rnn.mode](layer_input[:, t], h, c, weights)  # type: ignore[arg-type]
                hs[t] = h
            outputs.append(torch.stack([hs[t] for t in range(x.shape[1])], dim=1))
        layer_input = torch.cat(outputs, dim=2)
    return layer_input, initial


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_macs_are_flop_counters_on_the_rnn_written_out(kind: str, bidirectional: bool,
                                                       train: bool) -> None:
    # 2 layers, input 8, hidden 16, batch 3, seq 5: layer 0 reads 8 inputs, layer 1 reads
    # 16 x directions; training adds the backward (twice the forward's matmuls). An LSTM
    # runs as the fused oneDNN kernel, whose backward gives the initial states' gradients
    # too; a GRU as matmuls per step (PyTorch runs only LSTMs on oneDNN), its initial states
    # zeros asking for no gradient
    torch.manual_seed(0)
    rnn = getattr(nn, kind)(8, 16, num_layers=2, batch_first=True, bidirectional=bidirectional)
    x = torch.randn(3, 5, 8, requires_grad=train)
    macs = traced_rnn_macs(rnn, x, train)
    kernels = {k: v for k, v in macs.items() if k.startswith("mkldnn_rnn_layer")}
    assert bool(kernels) == (kind == "LSTM"), macs
    initial_grad = train and kind == "LSTM"
    with FlopCounterMode(display=False) as counter:
        y, initial = _written_out(rnn, x, initial_grad)
        if train:
            torch.autograd.grad(y.sum(), [x, *rnn.parameters(),
                                          *(initial if initial_grad else [])])
    assert sum((kernels or macs).values()) * 2 == counter.get_total_flops()
