"""The ops the fourth round's hand-written models (tests/zoo_custom.py) found unpriced, with
the working: EmbeddingBag and its backward (DLRM), Fourier transforms (FNet, the Fourier
Neural Operator), scatter_reduce and leaky_relu_backward (a graph attention), the CPU GRU's
unsafe_split and in-place transpose_; complex tensors' bytes (a GRU's MACs:
tests/test_lstm_costs.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from graphmem.ops.movement import embedding_bag_backward_flops, embedding_bag_flops
from graphmem.ops.signal import nd_fft_flops, transform_flops
from tests.helpers.traced_ops import traced_flops

pytestmark = pytest.mark.torch

# 3 bags of 4 ids from a 128 x 8 table
WEIGHT, IDS, OFFSETS = torch.randn(128, 8), torch.randint(0, 100, (12,)), torch.tensor([0, 4, 8])


def test_the_embedding_bag_formulas_worked_by_hand() -> None:
    # 12 ids x width 8 = 96 adds; mean: 3 bags x 8 divides more = 120; max: 96 compares
    assert [embedding_bag_flops(12, 8, 3, mode) for mode in (0, 1, 2)] == [96, 120, 96]
    # backward: sum 96 adds; mean 96 multiplies by 1 / bag size + 96 adds = 192; max: each
    # of the 3 x 8 bag gradient elements added at its argmax row = 24
    assert [embedding_bag_backward_flops(12, 8, 3, mode) for mode in (0, 1, 2)] == [96, 192, 24]


@pytest.mark.parametrize(("mode", "forward", "backward"),
                         [("sum", 96, 96), ("mean", 120, 192), ("max", 96, 24)])
def test_embedding_bag_and_its_backward_are_priced(mode: str, forward: int, backward: int
                                                   ) -> None:
    def step(weight: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor) -> object:
        return torch.autograd.grad(F.embedding_bag(ids, weight, offsets, mode=mode).sum(),
                                   weight)

    flops = traced_flops(step, WEIGHT.clone().requires_grad_(), IDS, OFFSETS)
    assert flops["_embedding_bag"] == forward
    assert flops["_embedding_bag_backward"] == backward


def test_the_fft_formulas_worked_by_hand() -> None:
    # 5 n ceil(log2 n): 16 points complex 5 x 16 x 4 = 320, real 160; 9 points as 16: 5 x 9 x 4
    assert (transform_flops(16, False), transform_flops(16, True)) == (320, 160)
    assert transform_flops(9, False) == 180
    # fftn of [2, 16, 32] over dims 1, 2: 64 lines of 16 (320) + 32 lines of 32 (5 x 32 x 5)
    assert nd_fft_flops((2, 16, 32), (1, 2)) == 64 * 320 + 32 * 800


def test_fourier_transforms_are_priced() -> None:
    x = torch.randn(2, 3, 16, 16)
    # rfft2 [2, 3, 16, 16] -> [2, 3, 16, 9]: 54 lines of 16 complex points (320) along dim 2
    # of the spectrum, 96 lines of 16 real points (160) along dim 3 = 17,280 + 15,360; its
    # inverse the same lines
    assert traced_flops(lambda t: torch.fft.irfft2(torch.fft.rfft2(t), s=(16, 16)), x) == {
        "_fft_r2c": 32_640, "_fft_c2r": 32_640}
    # FNet's mixing: fftn over (sequence, hidden) of a real [2, 16, 32], the real part:
    # 64 x 320 + 32 x 800 = 46,080 (the real input cast to complex first, a copy)
    flops = traced_flops(lambda t: torch.fft.fftn(t, dim=(1, 2)).real, torch.randn(2, 16, 32))
    assert flops["_fft_c2c"] == 46_080


def test_graph_attention_ops_are_priced() -> None:
    scores = torch.randn(40, 2, requires_grad=True)
    index = torch.randint(0, 10, (40, 2))

    def step(s: torch.Tensor, i: torch.Tensor) -> object:
        top = torch.zeros(10, 2).scatter_reduce(0, i, F.leaky_relu(s, 0.2), "amax")
        return torch.autograd.grad(top.sum(), s)

    flops = traced_flops(step, scores, index)
    # scatter_reduce: each of the 40 x 2 source elements compared into its row: 80;
    # leaky_relu_backward: compare and multiply per element (the ONNX rule's 2): 160
    assert flops["scatter_reduce"] == 80
    assert flops["leaky_relu_backward"] == 160


def test_in_place_views_and_unsafe_splits_cost_nothing() -> None:
    def step(x: torch.Tensor) -> object:
        return [t.sum() for t in torch.ops.aten.unsafe_split(x.clone().transpose_(0, 1), 2)]

    flops = traced_flops(step, torch.randn(4, 6))
    assert flops["transpose_"] == flops["unsafe_split"] == 0


def test_complex_tensors_take_their_dtypes_size() -> None:
    # rfft2 of [2, 3, 16, 16] float32 is [2, 3, 16, 9] complex64: 864 elements x 8 bytes =
    # 6,912 B (a complex64 is two float32s)
    from graphmem import analyze_torch
    from graphmem.core.ir import DType
    from graphmem.frontends.torch.loader import parse_tensor_spec

    class Spectrum(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.fft.rfft2(x).abs()

    analysis = analyze_torch(Spectrum(), [parse_tensor_spec("2x3x16x16")], plan=False,
                             suggest=False)
    spectra = [v for v in analysis.graph.values.values() if v.dtype is DType.COMPLEX64]
    assert [int(v.nbytes) for v in spectra] == [6_912]
    assert DType.COMPLEX128.bits // 8 == 16


class _SigmoidHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).sigmoid()


def test_an_mse_step_holds_the_unreduced_loss() -> None:
    # eager's mse_loss returns a scalar whose storage is its unreduced elementwise loss, the
    # input's size (graphmem/frontends/torch/loss_storage.py). [2, 8, 16, 16] fp32 output,
    # 16,384 B: at the sigmoid's backward the held output, the unreduced loss, the loss's
    # gradient and the sigmoid's, 4 x 16,384 + the 4-byte loss's gradient = 65,540 B (49,160
    # without the unreduced loss)
    from graphmem import analyze_torch
    from graphmem.frontends.torch.loader import parse_tensor_spec
    from graphmem.frontends.torch.train_step import mse_loss
    from graphmem.verify.runners.torch_runner import measure_step

    specs = [parse_tensor_spec("2x3x16x16")]
    measured = measure_step(_SigmoidHead(), specs, True, "adamw", loss=mse_loss)
    analysis = analyze_torch(_SigmoidHead(), specs, train=True, optimizer="adamw", plan=False,
                             suggest=False, loss="mse")
    assert analysis.liveness.activation_peak_bytes == measured.kernel_ends_peak_bytes == 65_540


@pytest.mark.parametrize(("loss", "storage"), [
    ("mse_loss", 16_384), ("smooth_l1_loss", 16_384), ("soft_margin_loss", 16_384),
    ("l1_loss", 4), ("huber_loss", 4), ("binary_cross_entropy_with_logits", 4)])
def test_which_losses_keep_their_unreduced_storage(loss: str, storage: int) -> None:
    # the kernels' own behaviour loss_storage.py models: [2, 8, 16, 16] fp32, 16,384 B
    x = torch.randn(2, 8, 16, 16)
    reduced = getattr(F, loss)(x, torch.zeros_like(x))
    assert reduced.untyped_storage().nbytes() == storage
