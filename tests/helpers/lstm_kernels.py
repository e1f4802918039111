"""One nn.LSTM layer's oneDNN kernels measured under torch.profiler, next to graphmem's rules
for them (graphmem/runtime_models/torch_cpu_recurrent.py) on the node the trace makes:
tests/test_onednn_rnn.py and `python benchmarks/cpu_scratch.py --lstm`."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from graphmem.core.ir import DType, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.ops.onednn_rnn import RnnLayer, workspace_bytes
from graphmem.runtime_models.torch_cpu import scratch_bytes
from graphmem.verify.runners import torch_runner

FORWARD, BACKWARD = "aten::mkldnn_rnn_layer", "aten::mkldnn_rnn_layer_backward"
# (T, B, I, H), none of them among the shapes graphmem/ops/onednn_rnn.py was read from: one
# row (brgemm merges the steps), I = H (the fused GEMM batch), 128 rows and more (no merged
# forward), an ld padded for 4K aliasing (4H = 256), inputs not a multiple of 8
HELD_OUT = [(5, 1, 24, 24), (3, 130, 10, 12), (6, 2, 64, 48), (4, 3, 40, 64), (9, 4, 7, 30)]


@dataclass(frozen=True)
class Measured:
    net_bytes: int  # what the kernel returns
    scratch_bytes: int  # how far its allocations rose above that
    allocations: tuple[int, ...]


def measure(layer: RnnLayer, training: bool) -> dict[str, Measured]:
    """The forward's (and in training the backward's) kernel, one layer, [T, B, I] input;
    the backward's output gradient contiguous, none for the final states."""
    torch.manual_seed(0)
    lstm = nn.LSTM(layer.inputs, layer.hidden)
    x = torch.randn(layer.steps, layer.batch, layer.inputs, requires_grad=training)

    def step() -> None:
        with torch.set_grad_enabled(training):
            y, _ = lstm(x)
            if training:
                y.backward(torch.ones_like(y))

    step()  # warm up: oneDNN's primitive caches
    with torch_runner._quiet_stderr(), torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as profile:
        step()
    return {call.kernel: Measured(call.net_bytes, call.scratch_bytes, call.allocations)
            for call in torch_runner.kernel_scratch(profile) if call.kernel in (FORWARD, BACKWARD)}


def _value(name: str, *shape: int, dtype: DType = DType.FLOAT32) -> Value:
    return Value(name, dtype, tuple(SymInt.const(d) for d in shape), Role.ACTIVATION)


def predicted(layer: RnnLayer, training: bool, threads: int) -> dict[str, int]:
    """graphmem's scratch for the layer's kernels, on nodes as the trace makes them (the
    workspace sized by the front end in training)."""
    steps, batch, inputs, hidden, rows = (layer.steps, layer.batch, layer.inputs,
                                          layer.hidden, layer.gates * layer.hidden)
    x, y = _value("x", steps, batch, inputs), _value("y", steps, batch, hidden)
    weights = [_value("w_ih", rows, inputs), _value("w_hh", rows, hidden),
               _value("b_ih", rows), _value("b_hh", rows)]
    hx, cx, hy, cy = (_value(name, batch, hidden) for name in ("hx", "cx", "hy", "cy"))
    workspace = _value("workspace", workspace_bytes(layer) if training else 0,
                       dtype=DType.UINT8)
    forward = Node("rnn", "aten.mkldnn_rnn_layer.default", [x, *weights, hx, cx], [])
    for made in (y, hy, cy, workspace):
        forward.add_output(made)
    found = {FORWARD: scratch_bytes(forward, {}, threads)}
    if training:
        backward = Node("rnn_backward", "aten.mkldnn_rnn_layer_backward.default",
                        [x, *weights, hx, cx, y, hy, cy, _value("gy", steps, batch, hidden),
                         workspace], [],
                        attributes={"grad_output_copied": 0, "grad_states_zeroed": (1, 1)})
        for made in (_value("gx", steps, batch, inputs), _value("gw_ih", rows, inputs),
                     _value("gw_hh", rows, hidden), _value("gb", rows), _value("gb2", rows),
                     _value("ghx", batch, hidden), _value("gcx", batch, hidden)):
            backward.add_output(made)
        found[BACKWARD] = scratch_bytes(backward, {}, threads)
    return found
