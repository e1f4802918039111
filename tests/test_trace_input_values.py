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
from graphmem.verify.runners.torch_runner import measure_step

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


class EqualCountRead(nn.Module):
    """A count of equal elements read as a number: 0 on continuous data, the smallest case."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x] * (1 + int((x == 0).sum().item())))


class SplitByRealImages(nn.Module):
    """SmolVLM's: the kept images split per sample by counts of the filter's mask."""

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        images = pixels.view(-1, *pixels.shape[2:])  # [2, 2, 3, 4, 4] -> [4, 3, 4, 4]
        real = (images == 0.0).sum(dim=(-1, -2, -3)) != images.shape[1:].numel()
        per_sample = real.view(pixels.shape[0], -1).sum(dim=1)
        kept = images[real] * 2.0
        return torch.stack([part.mean(0) for part in kept.split(per_sample.tolist())])


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
    # the count of equal elements (0 by the answer) read by .item(): not a selection's size
    (EqualCountRead(), ("4x2",), "DataDependentOutput|data-dependent|local_scalar"),
], ids=["control-flow", "written-input", "shrinking-selection", "count-of-equal"])
def test_unsafe_answers_fail_loudly(model: nn.Module, specs: tuple[str, ...],
                                    message: str) -> None:
    with pytest.raises(GraphmemError, match=message):
        _analyze(model, *specs)



def test_counts_of_a_kept_selection_are_read() -> None:
    # per_sample = [2, 2] (every image real) read by tolist() for the split: the step as
    # eager on random pixels: kept [4, 3, 4, 4] (768 B) and its product (768 B) live, then
    # the means; the peak within 2% of the real step's live tensors
    specs = [parse_tensor_spec("2x2x3x4x4")]
    analysis = _analyze(SplitByRealImages(), "2x2x3x4x4")
    measured = measure_step(SplitByRealImages(), specs, train=False)
    assert int(analysis.liveness.activation_peak_bytes) == pytest.approx(measured.peak_bytes,
                                                                         rel=0.02)
    assert any("input0: 1 selection(s) of 4 element(s)" in w for w in analysis.model.warnings)
