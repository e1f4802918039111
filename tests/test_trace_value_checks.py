"""Checks on tensor values inside a traced forward (graphmem/frontends/torch/value_checks.py)
and finiteness tests of values the trace does not know (finite_values.py): the step is
traced as eager runs it on healthy inputs, where it used to stop at the value read."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graphmem import analyze_torch
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.finite_values import finite_answer
from graphmem.frontends.torch.loader import parse_tensor_spec

pytestmark = [pytest.mark.torch]


class Checked(nn.Module):
    """A placeholder count checked against the features, as a vision-language model does."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        torch._check_tensor_all((y.sum(-1) * 0 == 0).all())
        torch._check_tensor_all_with(ValueError, (x.abs() >= 0).all(), lambda: "negative")
        return y


class Clamped(nn.Module):
    """DETR's encoder layer: clamp in training only if some hidden state is not finite."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        if self.training and (not torch.isfinite(y).all() or torch.isnan(y).any()):
            y = y.clamp(-1.0, 1.0)
        return y


def analysis(model: nn.Module, train: bool) -> object:
    return analyze_torch(model, [parse_tensor_spec("2x4")], train=train,
                         optimizer="adamw" if train else None, plan=False, suggest=False)


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_a_value_check_is_taken_as_passing(train: bool) -> None:
    result = analysis(Checked(), train)
    assert not result.costs.unsupported_ops  # type: ignore[attr-defined]
    # the check's own reductions stay in the graph, as eager computes them
    ops = {node.op_type for node in result.graph.nodes}  # type: ignore[attr-defined]
    assert "aten.all.default" in ops


def test_a_check_on_a_python_bool_still_runs() -> None:
    with pytest.raises(TypeError):
        torch._check_tensor_all(True)  # type: ignore[arg-type]


def test_finite_values_take_the_finite_branch() -> None:
    result = analysis(Clamped(), True)
    ops = [node.op_type for node in result.graph.nodes]  # type: ignore[attr-defined]
    # eager on finite values skips the clamp: so does the trace (no clamp forward, nor its
    # backward's mask)
    assert not any("clamp" in op for op in ops)
    assert "aten.isnan.default" in ops


def test_the_answers_of_finiteness_tests() -> None:
    aten = torch.ops.aten
    x = torch.zeros(2)
    assert finite_answer(aten.isinf.default, (x,)) is False
    assert finite_answer(aten.isnan.default, (x,)) is False
    assert finite_answer(aten.ne.Scalar, (x, float("inf"))) is True
    assert finite_answer(aten.eq.Scalar, (x, float("-inf"))) is False
    assert finite_answer(aten.eq.Tensor, (x, x)) is True
    # not a finiteness test: a finite scalar, two tensors, any other op
    assert finite_answer(aten.ne.Scalar, (x, 0.5)) is None
    assert finite_answer(aten.eq.Tensor, (x, torch.zeros(2))) is None
    assert finite_answer(aten.abs.default, (x,)) is None


def test_a_branch_on_other_values_still_stops_the_trace() -> None:
    class Branches(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if (x > 0).all() else x

    with pytest.raises(GraphmemError, match="branches on tensor values"):
        analysis(Branches(), False)


def test_unique_consecutive_of_known_values_is_traced_at_its_size() -> None:
    class Windows(nn.Module):
        # window bounds from a constant grid, deduplicated (Qwen2.5-VL's vision tower):
        # [0, 2, 2, 4] -> [0, 2, 4], three bounds, so x [6, 4] is cut to its first 3 rows
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            bounds = torch.tensor([0, 2, 2, 4])
            return x[: torch.unique_consecutive(bounds).shape[0]] * 2

    result = analyze_torch(Windows(), [parse_tensor_spec("6x4")], plan=False, suggest=False)
    (output,) = result.graph.outputs
    assert [int(d) for d in output.shape] == [3, 4]
