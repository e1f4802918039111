"""Autograd's sum of a tensor's gradients, in place where eager adds in place.

A tensor read by several ops gets one gradient per reader, summed in autograd's input
buffer (torch/csrc/autograd/input_buffer.cpp `accumulate`): with grad mode off, the first
gradient is stolen and added into (`old.add_(new)`) when it is a dense tensor owning its
storage of which the buffer holds the last reference; else the sum is a new tensor. The
traced step runs on fake tensors, for which the engine always allocates, so graphmem's
front end (graphmem/frontends/torch/accumulation.py) decides as eager would. Each case is
measured on this CPU (torch_runner.measure_step: the allocator's live bytes as each kernel
returns) and graphmem's live-tensor peak must equal it; each would be off by one tensor
under the other decision (the numbers in the comments, measured with the rule turned off
or widened).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graphmem import analyze_torch
from graphmem.core.ir import Phase
from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.verify.runners.torch_runner import measure_step

pytestmark = pytest.mark.torch


def _mean(output: torch.Tensor) -> torch.Tensor:
    return output.mean()  # its backward is a fresh dense tensor (grad.expand(...) / numel)


class Scan(nn.Module):
    """A scan reads one slice of its state per step (Mamba's CPU selective scan): each
    slice's backward (`select_backward`) is a gradient of the whole state, summed over the
    sequence in the state's input buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = torch.tanh(self.fc(x))  # [8, 32, 64]
        return torch.stack([state[t] * 2 for t in range(state.shape[0])]).sum(-1)


class ViewArrivesFirst(nn.Module):
    """`h` is read twice; the first gradient to reach it is a view (`t`'s backward returns
    `grad.t()`, whose base shares its storage): never stolen."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc(x))
        b = h * 3
        a = h.t().exp()  # made last, so its backward runs first
        return a.sum(0) + b.sum(1)


class OneGradientTwice(nn.Module):
    """`y + y`: add's backward hands the same gradient to both reads of `y`, so the buffer
    does not hold its last reference (the new gradient is the held one): a new sum."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 16)
        self.fc2 = nn.Linear(16, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(torch.tanh(self.fc1(x)))  # [1024, 256] from [1024, 16]: the sum is the peak
        return y + y


def _peaks(model_type: type[nn.Module], spec: str) -> tuple[int, int, list[str]]:
    torch.manual_seed(0)
    analysis = analyze_torch(model_type(), [spec], train=True, optimizer="sgd", plan=False,
                             suggest=False, loss=_mean)
    torch.manual_seed(0)
    measured = measure_step(model_type(), [parse_tensor_spec(spec)], True, "sgd", loss=_mean)
    adds = [node.op_type for node in analysis.graph.nodes
            if node.phase is Phase.BACKWARD and node.op_type.startswith("aten.add")]
    return (int(analysis.liveness.activation_peak_bytes),
            measured.kernel_ends_peak_bytes or measured.peak_bytes, adds)


def test_a_scans_slice_gradients_are_summed_in_place() -> None:
    predicted, measured, adds = _peaks(Scan, "8x32x64")
    # 8 slice gradients of the [8, 32, 64] fp32 state (65,536 B each) summed by 7 adds, all
    # in place into the first: 206,856 B; the out-of-place sums gave 264,200 B (+27.7%)
    assert adds.count("aten.add_.Tensor") == 7
    # eager's `state[t] * 2` saves the Python scalar as a 0-dim int64 tensor (8 B) for its
    # backward, which the trace holds as a constant: 6 of the 8 are pending at the peak (the
    # first sum, after two of the multiplies' backwards ran)
    assert measured - predicted == 6 * 8


def test_a_first_gradient_that_is_a_view_is_not_stolen() -> None:
    predicted, measured, adds = _peaks(ViewArrivesFirst, "1024x64")
    # [1024, 64] fp32 = 262,144 B per tensor; stealing the view gave 798,720 B against
    # 1,052,680 B measured: one tensor short
    assert "aten.add_.Tensor" not in adds
    assert predicted == measured


def test_one_gradient_reaching_a_tensor_twice_is_summed_out_of_place() -> None:
    predicted, measured, adds = _peaks(OneGradientTwice, "1024x64")
    # the sum of [1024, 256] fp32 gradients, 1,048,576 B, allocated: stealing gave
    # 2,245,640 B against 3,211,272 B measured
    assert "aten.add_.Tensor" not in adds
    assert predicted == measured
