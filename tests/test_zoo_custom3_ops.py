"""What the sixth round (tests/zoo_custom3.py, the transformers rows of tests/zoo_models.py
`SIXTH_ROUND_MEASURED_ONCE`) found, with the working: a memoized function the trace called
first kept a fake tensor, and every later eager call computed on it (DINOv3's patch
coordinates); a model input's pixels compared with 0.0 to drop padding images (SmolVLM);
bucketize's binary search (Idefics3's patch positions)."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

from graphmem import analyze_torch
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.frontends.torch.memo_caches import caches_of
from graphmem.verify.runners.torch_runner import measure_step
from tests.helpers.traced_ops import traced_flops

pytestmark = pytest.mark.torch


def closure_cached(function):  # type: ignore[no-untyped-def]
    """transformers' `compile_compatible_method_lru_cache`: the lru_cache in a closure."""
    cached = functools.lru_cache(maxsize=8)(function)

    @functools.wraps(function)
    def wrapper(*args: object) -> torch.Tensor:
        return cached(*args)

    return wrapper


@closure_cached
def centres(patches: int) -> torch.Tensor:
    # DINOv3's patch centres in [-1, 1]: [patches, 1]
    return (torch.arange(0.5, patches) / patches * 2 - 1).unsqueeze(1)


@functools.cache
def scales(width: int) -> torch.Tensor:
    return torch.linspace(1.0, 2.0, width)


class CachedCoordinates(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    @staticmethod
    @closure_cached
    def offsets(width: int) -> torch.Tensor:  # BEiT's relative position index is one
        return torch.arange(width) / width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [2, 64, 16] + [64, 1] * [16] + [16] -> [2, 64, 16]
        return self.linear(x + centres(x.shape[1]) * scales(x.shape[2])
                           + self.offsets(x.shape[2]))


def test_the_traces_memoized_tensors_do_not_outlive_it() -> None:
    model = CachedCoordinates()
    found = caches_of(model)
    assert any(cache.__wrapped__ is centres.__wrapped__ for cache in found)
    assert scales in found
    assert any(cache.__wrapped__ is CachedCoordinates.offsets.__wrapped__ for cache in found)
    specs = [parse_tensor_spec("2x64x16")]
    analysis = analyze_torch(model, specs, plan=False, suggest=False)
    # a real eager call after the analysis: real tensors throughout (fake before: centres'
    # and scales' caches kept the trace's FakeTensors, and the output was a FakeTensor)
    assert not isinstance(centres(64), FakeTensor)
    assert not isinstance(CachedCoordinates.offsets(16), FakeTensor)
    assert not isinstance(model(torch.randn(2, 64, 16)), FakeTensor)
    # and the profiled step sees its memory: live, a sum x + c * s [2, 64, 16] (8,192 B) and
    # the next or the output (8,192 B). The three tensors the caches keep (centres [64, 1],
    # scales [16], offsets [16]: 384 B) were made by measure_step's warm-up step, so the
    # measured step finds them resident; the trace made them and holds them past the step
    # (observed.py held_past_step), as a process's first step does: 16,384 + 384 B
    measured = measure_step(model, specs, train=False)
    assert measured.peak_bytes == 16_384
    assert int(analysis.liveness.activation_peak_bytes) == measured.peak_bytes + 384


class PaddingImagesDropped(nn.Module):
    """Idefics3's and SmolVLM's filter: an image whose every pixel is 0.0 is padding."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        images = pixels.view(-1, *pixels.shape[2:])  # [2, 2, 3, 8, 8] -> [4, 3, 8, 8]
        real = (images == 0.0).sum(dim=(-1, -2, -3)) != images.shape[1:].numel()
        real[0] |= ~torch.any(real)
        return self.conv(images[real].contiguous())


def test_an_inputs_padding_filter_keeps_every_image() -> None:
    # nonzero on the mask stopped the trace (DynamicOutputShapeException); continuous data has
    # no exact 0.0, so all 4 images are real: [4, 3, 8, 8] indexed (3,072 B, as the input)
    # and the convolution's [4, 8, 8, 8] (8,192 B), as the real step on random pixels
    specs = [parse_tensor_spec("2x2x3x8x8")]
    analysis = analyze_torch(PaddingImagesDropped(), specs, plan=False, suggest=False)
    measured = measure_step(PaddingImagesDropped(), specs, train=False)
    assert measured.peak_bytes >= 8_192 + 3_072
    assert int(analysis.liveness.activation_peak_bytes) == pytest.approx(measured.peak_bytes,
                                                                         rel=0.02)
    # the answer is said: one selection by it, of the 4 images, every one kept
    warnings = [w for w in analysis.model.warnings if "never equal" in w]
    assert len(warnings) == 1 and "input0: 1 selection(s) of 4 element(s)" in warnings[0]


def test_integer_inputs_are_not_data() -> None:
    # ids compared with a number are read as before: a boolean index by them stops the trace
    class PaddingIdsDropped(nn.Module):
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return ids[ids != 0].float()

    with pytest.raises(GraphmemError, match="nonzero"):
        analyze_torch(PaddingIdsDropped(), [parse_tensor_spec("2x8:int64")], plan=False,
                      suggest=False)


def test_sorted_searches_are_priced() -> None:
    # Idefics3's patch positions: bucketize(coords [2, 16], boundaries [7]), a binary search
    # of 8 slots per value: 3 compares, 32 * 3 = 96; searchsorted(rows [3, 8], values [3, 5]):
    # 9 slots, 4 compares, 15 * 4 = 60
    coords, boundaries = torch.rand(2, 16), torch.linspace(0, 1, 7)
    assert traced_flops(torch.bucketize, coords, boundaries) == {"bucketize": 96}
    rows, values = torch.rand(3, 8).sort(dim=-1).values, torch.rand(3, 5)
    assert traced_flops(torch.searchsorted, rows, values) == {"searchsorted": 60}
