"""An LSTM on the CPU runs as one oneDNN kernel per layer and direction
(aten.mkldnn_rnn_layer, and its backward in training): priced as the ONNX LSTM op is
(graphmem/ops/recurrent.py), its MACs checked against PyTorch's FlopCounterMode on the same
LSTM written out step by step (F.linear per gate block: FlopCounterMode has no formula for
the fused kernel)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from graphmem.ops.recurrent import lstm_layer_backward_costs, lstm_layer_costs
from tests.helpers.traced_ops import traced_macs


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


def _written_out(lstm: nn.LSTM, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """nn.LSTM's arithmetic step by step (batch_first), every direction and layer; and the
    initial hidden states."""
    layer_input, initial = x, []
    for layer in range(lstm.num_layers):
        outputs = []
        for direction in range(2 if lstm.bidirectional else 1):
            suffix = f"_l{layer}" + ("_reverse" if direction else "")
            w_ih, w_hh = getattr(lstm, "weight_ih" + suffix), getattr(lstm, "weight_hh" + suffix)
            b_ih, b_hh = getattr(lstm, "bias_ih" + suffix), getattr(lstm, "bias_hh" + suffix)
            h = c = x.new_zeros(x.shape[0], lstm.hidden_size).requires_grad_(x.requires_grad)
            initial.append(h)
            steps = range(x.shape[1])[::-1] if direction else range(x.shape[1])
            hs = {}
            for t in steps:
                gates = F.linear(layer_input[:, t], w_ih, b_ih) + F.linear(h, w_hh, b_hh)
                i, f, g, o = gates.chunk(4, dim=1)
                c = f.sigmoid() * c + i.sigmoid() * g.tanh()
                h = o.sigmoid() * c.tanh()
                hs[t] = h
            outputs.append(torch.stack([hs[t] for t in range(x.shape[1])], dim=1))
        layer_input = torch.cat(outputs, dim=2)
    return layer_input, initial


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("train", [False, True])
def test_macs_are_flop_counters_on_the_lstm_written_out(bidirectional: bool,
                                                        train: bool) -> None:
    # 2 layers, input 8, hidden 16, batch 3, seq 5: layer 0 reads 8 inputs, layer 1 reads
    # 16 x directions; training adds the backward (twice the forward's matmuls)
    torch.manual_seed(0)
    lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True, bidirectional=bidirectional)
    x = torch.randn(3, 5, 8, requires_grad=train)

    names = [name for name, _ in lstm.named_parameters()]

    def step(inputs: torch.Tensor, *weights: torch.Tensor) -> object:
        y, _ = torch.func.functional_call(lstm, dict(zip(names, weights, strict=True)), inputs)
        return torch.autograd.grad(y.sum(), [inputs, *weights]) if train else y

    macs = traced_macs(step, x, *(p.detach().requires_grad_(train) for p in lstm.parameters()))
    kernels = {k: v for k, v in macs.items() if k.startswith("mkldnn_rnn_layer")}
    assert kernels, macs  # the fused CPU kernel, not a decomposition
    with FlopCounterMode(display=False) as counter:
        y, initial = _written_out(lstm, x)
        if train:  # the kernel's backward gives the initial states' gradients too
            torch.autograd.grad(y.sum(), [x, *lstm.parameters(), *initial])
    assert sum(kernels.values()) * 2 == counter.get_total_flops()
