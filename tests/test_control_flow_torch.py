"""torch.cond on the PyTorch path: both branches traced, the node costed as its larger branch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from graphmem.api import analyze  # noqa: E402
from graphmem.ops.control_flow import BODY_SCRATCH_SUFFIX, ControlFlowNode  # noqa: E402
from graphmem.passes.costs import CostStatus  # noqa: E402


class Gate(torch.nn.Module):
    """A wide branch (Linear 16 -> 64, Relu, Linear 64 -> 16) or a narrow one (Linear 16 ->
    16), chosen by the data."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)
        self.skip = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda x: self.down(torch.relu(self.up(x))),
                          lambda x: self.skip(x), (x,))


@pytest.mark.torch
@pytest.mark.slow
def test_torch_cond_counts_the_larger_branch_and_lists_both() -> None:
    result = analyze(Gate(), ["4x16"], plan=False)
    result.graph.check()
    cost = next(c for c in result.costs.nodes if c.op_type == "cond")
    wide, narrow = cost.branches
    # wide: 4 * 16 * 64 + 4 * 64 * 16 = 8,192 MACs; narrow: 4 * 16 * 16 = 1,024 MACs
    assert (wide.name, wide.macs, narrow.name, narrow.macs) == (
        "true_branch", 8192, "false_branch", 1024)
    assert wide.counted and not narrow.counted
    assert cost.status is CostStatus.OK and cost.macs == 8192
    # the wide branch's own intermediates: up's [4, 64] fp32 output and the Relu's, 1,024
    # bytes each, live together at the Relu; narrow has none (its Linear makes the output)
    assert (wide.peak_bytes, narrow.peak_bytes) == (2048, 0)
    node = next(n for n in result.graph.nodes if isinstance(n, ControlFlowNode))
    assert node.outputs[-1].name.endswith(BODY_SCRATCH_SUFFIX)


@pytest.mark.torch
@pytest.mark.slow
def test_torch_cond_macs_match_flop_counter_on_the_branch_that_runs() -> None:
    """PyTorch's FlopCounterMode, running the model on real tensors down the wide branch,
    counts the MACs graphmem gives the node (2 FLOPs per MAC)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = Gate()
    counter = FlopCounterMode(display=False)
    with counter:
        model(torch.ones(4, 16))  # sum > 0: the wide branch
    result = analyze(model, ["4x16"], plan=False)
    cost = next(c for c in result.costs.nodes if c.op_type == "cond")
    assert counter.get_total_flops() == 2 * int(cost.macs)
