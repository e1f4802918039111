"""`--loss mse`: a training step whose loss is the mean squared error (a diffusion model's
noise prediction, a regression), priced and checked against a real step."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from graphmem import analyze_torch
from graphmem.frontends.torch.loader import load_loss, parse_tensor_spec
from graphmem.frontends.torch.train_step import cross_entropy_loss, mse_loss
from graphmem.verify.runners.torch_runner import measure_step
from tests.helpers.cli import run_cli
from tests.helpers.traced_ops import traced_flops

pytestmark = [pytest.mark.torch]


def test_mse_loss_and_its_backward_cost_three_flops_per_element() -> None:
    # mse_loss([4, 6], zeros): 24 x (subtract, square, add into the sum) = 72;
    # mse_loss_backward: 24 x (subtract, x 2/N, x grad) = 72
    x = torch.randn(4, 6, requires_grad=True)
    flops = traced_flops(lambda t: torch.autograd.grad(mse_loss(t), t), x)
    assert flops["mse_loss"] == 72
    assert flops["mse_loss_backward"] == 72


def test_loss_names_resolve_to_the_functions() -> None:
    assert load_loss("mse") is mse_loss
    assert load_loss("cross-entropy") is cross_entropy_loss
    assert mse_loss(torch.ones(2, 3)).item() == pytest.approx(1.0)
    # the mean of the squares, as F.mse_loss against a zero target
    x = torch.randn(3, 5)
    assert mse_loss(x).item() == pytest.approx(F.mse_loss(x, torch.zeros(3, 5)).item())


class Denoiser(nn.Module):
    """A convolution stack predicting noise of its input's shape (no class dim to take a
    cross-entropy over)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.SiLU(),
                                  nn.Conv2d(8, 4, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


@functools.cache
def predicted_and_real() -> tuple[int, int, int, int]:
    """(live-tensor peak, torch-cpu peak) predicted and (live tensors, allocator) measured."""
    torch.manual_seed(0)
    specs = [parse_tensor_spec("2x4x8x8")]
    analysis = analyze_torch(Denoiser(), specs, train=True, optimizer="adamw", loss="mse",
                             runtime="torch-cpu", plan=False, suggest=False)
    assert analysis.costs.unsupported_ops == {}
    assert "aten.mse_loss.default" in {n.op_type for n in analysis.graph.nodes}
    assert analysis.runtime is not None
    measured = measure_step(Denoiser(), specs, True, "adamw", loss=mse_loss)
    real = measured.kernel_ends_peak_bytes or measured.peak_bytes
    allocator = measured.allocator_peak_bytes or measured.peak_bytes
    return (int(analysis.liveness.activation_peak_bytes), int(analysis.runtime.runtime_peak_bytes),
            real, allocator)


def test_the_reduced_loss_keeps_a_storage_the_size_of_the_unreduced_one() -> None:
    # eager: F.mse_loss(x [2, 4, 8, 8] fp32, t) reduced is a 0-dim view of the elementwise
    # loss's storage, 2 x 4 x 8 x 8 x 4 B = 2,048 B, held while the loss is; the traced node
    # gets that storage as a second output (fx_convert.py REDUCED_LOSS_STORAGE) which the
    # 0-dim loss (4 B of its own) is an alias of
    x = torch.randn(2, 4, 8, 8)
    assert F.mse_loss(x, torch.zeros_like(x)).untyped_storage().nbytes() == 2_048
    specs = [parse_tensor_spec("2x4x8x8")]
    analysis = analyze_torch(Denoiser(), specs, train=True, optimizer="adamw", loss="mse",
                             plan=False, suggest=False)
    node = next(n for n in analysis.graph.nodes if n.op_type == "aten.mse_loss.default")
    loss, storage = node.outputs  # the loss, then the storage it views
    assert int(storage.nbytes) == 2_048 and int(loss.nbytes) == 4
    assert loss.alias_of is storage and storage.alias_of is None


@pytest.mark.slow
def test_mse_training_step_matches_a_real_one() -> None:
    # the traced step with the MSE loss against the same step run and measured (the output
    # and the loss held through the optimizer's update by both): the peak is at the
    # backward's start. Eager's mse_loss returns a 0-dim loss whose storage is the unreduced
    # loss, 2x4x8x8 fp32 = 2,048 B, where its fake tensor's is 4 B: the front end gives the
    # node that storage (graphmem/frontends/torch/loss_storage.py). Live tensors to the byte
    # (17,560 B predicted without it, 19,604 B real), and torch-cpu's peak, mse_loss's
    # elementwise temporary as its scratch, within 2% of the allocator's
    predicted, runtime, real, allocator = predicted_and_real()
    assert predicted == real == 19_604
    assert abs(runtime - allocator) <= 0.02 * allocator


def test_cli_takes_mse_and_refuses_an_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["analyze", "tests/test_mse_loss.py:Denoiser", "--input",
                            "2x4x8x8", "--train", "--loss", "l2", "--no-html"], capsys)
    assert code == 2
    assert "'l2' is not FILE.py:CALLABLE" in err and "mse" in err
    assert len(err.strip().splitlines()) == 1
