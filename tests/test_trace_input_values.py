"""A model input's floating data compared with a number (graphmem/frontends/torch/
input_values.py): answered "never equal" only where a selection by it keeps every element
(the most memory), said in the analysis's warnings (tests/test_zoo_custom3_ops.py); Python
control flow on the answer, a selection it would shrink, and an input the model wrote into
fail loudly, as fake tensors do."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graphmem import analyze_torch
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.loader import parse_tensor_spec

pytestmark = pytest.mark.torch


class PaddedIfAnyZero(nn.Module):
    """The reviewer's float 0/1 mask: the branch is Python control flow on the mask's values."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if (mask == 0).any():
            return torch.cat([x] * 4)
        return x * 1.0


class ZeroedRowFiltered(nn.Module):
    """The model writes exact zeros into its input, then filters by them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x[0].zero_()
        return x[(x == 0).sum(1) != x.shape[1]] * 1.0


class EqualRowsKept(nn.Module):
    """A selection by `x == 0` keeps no element on continuous data: the smallest case."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x == 0] * 1.0


def _analyze(model: nn.Module, *specs: str):  # type: ignore[no-untyped-def]
    return analyze_torch(model, [parse_tensor_spec(s) for s in specs], plan=False,
                         suggest=False)


@pytest.mark.parametrize("model, specs, message", [
    # (mask == 0).any() read by `if`: aten.is_nonzero / _local_scalar_dense on the answer
    (PaddedIfAnyZero(), ("4x2", "4"), "DataDependentOutput|data-dependent|local_scalar"),
    # x[0] written: 3 rows kept eagerly, not the 4 of "never equal"; x no longer data
    (ZeroedRowFiltered(), ("4x2",), "nonzero"),
    # every element dropped by the answer: not the largest case, so not answered
    (EqualRowsKept(), ("4x2",), "nonzero"),
], ids=["control-flow", "written-input", "shrinking-selection"])
def test_unsafe_answers_fail_loudly(model: nn.Module, specs: tuple[str, ...],
                                    message: str) -> None:
    with pytest.raises(GraphmemError, match=message):
        _analyze(model, *specs)

