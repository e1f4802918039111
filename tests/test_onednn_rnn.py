"""An LSTM layer on the CPU runs as one oneDNN kernel per layer and direction
(aten.mkldnn_rnn_layer, and its backward in training). Its workspace (saved for the
backward), scratchpad and weight copies, read from oneDNN's sources
(graphmem/ops/onednn_rnn.py), are checked here with the working, then against the real
kernels' allocations under torch.profiler on shapes the rules were not read from (the
torch-cpu rules: graphmem/runtime_models/torch_cpu_recurrent.py), and the trace's workspace
and the backward's flags (graphmem/frontends/torch/onednn_rnn.py)."""

from __future__ import annotations

import pytest
import torch

from graphmem.ops.onednn_rnn import (
    RnnLayer,
    good_ld,
    inference_scratchpad_bytes,
    training_scratchpad_bytes,
    workspace_bytes,
)
from tests.helpers.lstm_kernels import FORWARD, HELD_OUT, measure, predicted

pytestmark = pytest.mark.torch


def test_good_leading_dimensions() -> None:
    # rounded up to 16 floats (64 B), 16 more at a multiple of 256 (4K aliasing)
    assert [good_ld(n) for n in (16, 20, 64, 200, 256, 512)] == [16, 32, 64, 208, 272, 528]


def test_the_workspace_with_the_working() -> None:
    # T 10, B 2, I = H = 16: gates 10 x 2 x 64 x 4 = 5,120 -> 8,192; ht 10 x 2 x 16 x 4 =
    # 1,280 -> 4,096; states, cells, diff states (two), diff cells 2 x 11 x 2 x 16 x 4 =
    # 2,816 -> 4,096 each: 8,192 + 6 x 4,096 = 32,768 (measured 32,768)
    assert workspace_bytes(RnnLayer(10, 2, 16, 16)) == 32_768
    # T 30, B 8, I 100, H 50: gates 30 x 8 x 208 x 4 = 199,680 -> 200,704; ht 30 x 8 x 64 x 4
    # = 61,440; states 2 x 31 x 8 x 112 x 4 = 222,208 -> 225,280 (three times); cells 2 x 31
    # x 8 x 50 x 4 = 99,200 -> 102,400 (twice): 1,142,784 (measured 1,142,784)
    assert workspace_bytes(RnnLayer(30, 8, 100, 50)) == 1_142_784


def test_the_scratchpads_with_the_working() -> None:
    # training, T 10, B 2, I = H = 16: gates merged over the steps 10 x 2 x 64 x 4 = 5,120 ->
    # 8,192, ht and diff ht 2 x 16 x 4 -> 4,096 each; + 4,096 of alignment + 568 of
    # pointers = 21,048 (measured 21,048, forward and backward)
    assert training_scratchpad_bytes(RnnLayer(10, 2, 16, 16), backward=False) == 21_048
    # B 128 and more: the forward computes the input GEMM step by step, one step's gates
    # 128 x 64 x 4 = 32,768, ht and diff ht 8,192 each: 49,152 + 4,664 = 53,816
    assert training_scratchpad_bytes(RnnLayer(3, 128, 16, 16), backward=False) == 53_816
    # inference (brgemm) at two threads: states and cells 2 x 11 x 2 x 16 x 4 -> 4,096 each,
    # gates one step 2 x 64 x 4 -> 4,096, ht 4,096: 16,384 + 4,664; the GEMM batch 2 threads
    # x 2 x 2 (I = H: fused) x 40 B + 128 = 448: 21,496 (measured 21,496)
    assert inference_scratchpad_bytes(RnnLayer(10, 2, 16, 16), threads=2) == 21_496


# three of the held-out shapes (tests/helpers/lstm_kernels.py HELD_OUT: all five in
# `python benchmarks/cpu_scratch.py --lstm`, exact): one row (brgemm merges the steps), 130
# rows (no merged forward), an ld padded for 4K aliasing (4H = 256)
IN_THE_SUITE = [HELD_OUT[0], HELD_OUT[1], HELD_OUT[3]]


@pytest.mark.parametrize("shape", IN_THE_SUITE, ids=lambda s: "x".join(map(str, s)))
def test_the_rules_match_the_kernels_allocations(shape: tuple[int, int, int, int]) -> None:
    # inference (the brgemm kernel), then training (the reference kernel, its backward)
    layer = RnnLayer(*shape)
    outputs = 4 * layer.batch * layer.hidden * (layer.steps + 2)  # Y, Hy, Cy
    for training in (False, True):
        measured = measure(layer, training)
        rules = predicted(layer, training, torch.get_num_threads())
        assert {kernel: m.scratch_bytes for kernel, m in measured.items()} == rules
        workspace = workspace_bytes(layer) if training else 0
        assert measured[FORWARD].net_bytes == outputs + workspace


def test_the_trace_sizes_the_saved_workspace_and_flags_the_gradients() -> None:
    # hy and cy unused: the kernel makes zeros for their gradients; the output's gradient
    # is read as it is (contiguous here: the batch_first training rows measured exact)
    from graphmem import analyze_torch
    from graphmem.frontends.torch.loader import parse_tensor_spec

    model = torch.nn.LSTM(12, 20, batch_first=True)
    analysis = analyze_torch(model, [parse_tensor_spec("3x7x12")], train=True,
                             optimizer="sgd", plan=False, suggest=False, loss="mse")
    forward, backward = (next(n for n in analysis.graph.nodes if n.op_type == op)
                         for op in ("aten.mkldnn_rnn_layer.default",
                                    "aten.mkldnn_rnn_layer_backward.default"))
    # T 7, B 3, I 12, H 20 (the layer sees [T, B, I])
    assert forward.outputs[3].nbytes == workspace_bytes(RnnLayer(7, 3, 12, 20))
    assert forward.outputs[3] in backward.inputs
    assert backward.attributes["grad_output_copied"] == 0
    assert backward.attributes["grad_states_zeroed"] == (1, 1)
    # b_ih's and b_hh's gradients two tensors, as eager returns them (the meta kernel
    # returns one twice): b_hh's a clone traced after the kernel
    clone = next(n for n in analysis.graph.nodes if n.op_type == "aten.clone.default"
                 and backward.outputs[4] in n.inputs)
    assert clone.outputs[0].nbytes == backward.outputs[4].nbytes == 4 * 4 * 20
