"""`module.to(...)` inside a forward (Switch Transformers' router converts its classifier to
its own dtype each call): a conversion that changes nothing traces as eager runs it
(graphmem/frontends/torch/conversions.py); one that changes something still converts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graphmem import analyze_torch
from graphmem.frontends.torch.loader import parse_tensor_spec

pytestmark = [pytest.mark.torch]


class Converting(nn.Module):
    def __init__(self, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dtype is not None:
            self.linear = self.linear.to(self.dtype)
        return self.linear(x)


def peak(model: nn.Module, train: bool = False) -> tuple[int, int]:
    analysis = analyze_torch(model, [parse_tensor_spec("2x4")], train=train,
                             optimizer="adamw" if train else None, plan=False, suggest=False)
    return analysis.params.count, int(analysis.liveness.activation_peak_bytes)


@pytest.mark.parametrize("train", [False, True])
def test_a_conversion_to_the_same_dtype_traces_as_none(train: bool) -> None:
    # failed before: "_apply(): Couldn't swap Linear.weight" (a fake parameter swapped for
    # itself); now the same graph as the module that does not convert: 4 x 4 + 4 = 20
    # parameters, the same peak
    converting = peak(Converting(torch.float32), train)
    assert converting == peak(Converting(None), train)
    assert converting[0] == 20


def test_a_conversion_that_changes_the_dtype_is_not_skipped() -> None:
    # to(float64) on fp32 weights changes them: Module.to runs (and fails under the trace as
    # before, one clear line), never silently left in fp32
    from graphmem.errors import GraphmemError

    with pytest.raises(GraphmemError, match="tracing the model failed"):
        peak(Converting(torch.float64))
