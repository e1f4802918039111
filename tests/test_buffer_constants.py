"""One-element buffers read as numbers (graphmem/frontends/torch/buffer_constants.py): the
trace keeps their values as constants, so a model that pads by amounts computed from its
kernel-size buffers (EnCodec, Mimi) traces; the graph is otherwise unchanged."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import graphmem.frontends.torch.trace as trace
from graphmem import analyze_torch
from graphmem.frontends.torch.buffer_constants import valued_scalars
from graphmem.frontends.torch.loader import parse_tensor_spec
from tests.helpers.traced_ops import traced_flops

pytestmark = [pytest.mark.torch]


class PaddedConv(nn.Module):
    """EnCodec's padding: the amounts from 0-dim int64 buffers, as numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 7, stride=2)
        self.kernel_size = nn.Buffer(torch.tensor(7), persistent=False)
        self.stride = nn.Buffer(torch.tensor(2), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = self.kernel_size - self.stride  # 5
        frames = torch.ceil((x.shape[-1] - self.kernel_size + total) / self.stride)
        extra = frames.to(torch.int64) * self.stride + self.kernel_size - total - x.shape[-1]
        return self.conv(F.pad(x, (int(total), int(extra)), mode="reflect"))


def test_padding_from_buffers_traces_at_the_eager_shape() -> None:
    # x 2x1x21: total 5, frames ceil((21 - 7 + 5) / 2) = 10, extra 10*2 + 7 - 5 - 21 = 1:
    # padded to 27, the convolution's output (27 - 7) / 2 + 1 = 11 frames
    model = PaddedConv()
    analysis = analyze_torch(model, [parse_tensor_spec("2x1x21")], plan=False, suggest=False)
    conv = next(n for n in analysis.graph.nodes if n.op_type == "aten.convolution.default")
    assert conv.outputs[0].shape is not None
    assert [int(d) for d in conv.outputs[0].shape] == [2, 4, 11]
    assert list(model(torch.randn(2, 1, 21)).shape) == [2, 4, 11]
    assert analysis.costs.unsupported_ops == {}


def test_only_valued_one_element_buffers_are_constants() -> None:
    with torch.device("meta"):
        meta = torch.tensor(3)
    buffers = {"k": torch.tensor(7), "table": torch.zeros(4), "meta": meta,
               "flag": torch.ones(1)}
    found = valued_scalars(buffers)
    assert sorted(found) == [0, 3]
    assert found[0] is not buffers["k"] and int(found[0]) == 7  # a copy


def test_batch_norm_graphs_are_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    # num_batches_tracked is a one-element buffer too: its step (add_ in training) is still
    # traced, and the graph and peak are those of a trace without constants
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    specs = [parse_tensor_spec("1x3x8x8")]

    def graph() -> tuple[list[str], int]:
        analysis = analyze_torch(model, specs, train=True, plan=False, suggest=False)
        return ([n.op_type for n in analysis.graph.nodes],
                int(analysis.liveness.activation_peak_bytes))

    with_constants = graph()
    monkeypatch.setattr(trace, "valued_scalars", lambda buffers: {})
    assert with_constants == graph()
    assert "aten.add_.Tensor" in with_constants[0]


def test_momentum_none_batch_norm_reads_its_count() -> None:
    # BatchNorm with momentum=None averages with 1 / float(num_batches_tracked): the count
    # read as a number (a fake tensor without a value stopped the trace)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, momentum=None))
    analysis = analyze_torch(model, [parse_tensor_spec("1x3x8x8")], train=True, plan=False,
                             suggest=False)
    assert analysis.costs.unsupported_ops == {}


def test_reflect_padding_and_elu_backward_costs() -> None:
    # reflection_pad1d copies (0 FLOPs); its backward adds each of the 2x1x9 = 18 gradient
    # elements into its source: 18; elu_backward: 3 FLOPs per gradient element (the ONNX Elu
    # backward's), 2x1x6 = 12 elements: 36
    x = torch.randn(2, 1, 6, requires_grad=True)
    flops = traced_flops(lambda t: torch.autograd.grad(
        F.pad(F.elu(t), (2, 1), mode="reflect").sum(), t), x)
    assert flops["reflection_pad1d"] == 0
    assert flops["reflection_pad1d_backward"] == 18
    assert flops["elu_backward"] == 36
