"""Conv3d forwards' scratch on the CPU (graphmem/runtime_models/torch_cpu.py): the 2-D
rules carried over to a third spatial dim, checked to the byte against PyTorch's kernels on
shapes the rule was not read from (tests/helpers/conv3d.py; torch 2.13, oneDNN 3.12, AVX-512).
"""

from __future__ import annotations

import pytest

from graphmem.runtime_models.torch_cpu import scratch_bytes
from tests.helpers.conv3d import (
    BACKWARD,
    BF16,
    FITTED,
    HELD_OUT,
    conv3d,
    conv3d_backward,
    measured,
    measured_backward,
)


def test_tubelet_embedding_copies_its_weight_blocked() -> None:
    # VideoMAE's tubelet embedding: 1x3x4x32x32 -> 16 channels, kernel = stride 2x8x8 ->
    # 1x16x2x4x4. 3 input channels, a kernel larger than 1: x read plain (no Xb); the
    # weights blocked with Cout padded to 16: Wb = W = 16*3*2*8*8*4 = 24,576; Yb = Y = 2,048.
    # [+Wb, +Yb, -Wb, +Y, -Yb]: peak Wb + Yb = 26,624, less Y = 24,576 (measured 24,576, at
    # 1 and 2 threads; 32 channels on 2x3x8x32x32: 49,152)
    assert scratch_bytes(conv3d(FITTED[0]), {}, 1) == 24_576
    assert scratch_bytes(conv3d(FITTED[1]), {}, 2) == 49_152


def test_output_channels_off_the_block_pad_the_weights_and_bias() -> None:
    # 1x3x4x32x32 -> 20 channels, 2x8x8 stride 2x8x8 -> 1x20x2x4x4: Y = 2,560; 20 -> 32:
    # bias 32*4 + 128 = 256, Wb = 30,720 * 32/20 = 49,152, Yb = 2,560 * 32/20 = 4,096.
    # [+256, +Wb, +Yb, -Wb, -256, +Y, -Yb]: peak 53,504 - Y = 50,944 (measured 50,944)
    assert scratch_bytes(conv3d(FITTED[2]), {}) == 50_944


def test_one_small_clip_runs_pytorchs_own_columns() -> None:
    # 1x16x4x16x16 -> 16, 3x3x3 padding 1: PyTorch's use_mkldnn counts input.size(0..3) =
    # N*C*T*H = 1,024 <= 20,480 elements, a kernel of at most 3 wide, one clip: slow_conv3d
    # unfolds the input to columns Cin*27 x T*H*W: 16*27*1,024*4 = 1,769,472 B (measured)
    assert scratch_bytes(conv3d(FITTED[4]), {}) == 1_769_472


def test_depthwise_runs_channels_last() -> None:
    # 1x32x4x16x16 depthwise 3x3x3: Xc = Yc = Y = 131,072 (ndhwc, unpadded), W' = 32*27*4
    # = 3,456. [+Xc, +W', +Yc, -W', -Xc, +Y, +Y, -Y, -Yc]: peak Yc + 2Y = 393,216 - Y =
    # 262,144 (measured 262,144)
    assert scratch_bytes(conv3d(FITTED[8]), {}) == 262_144


def test_a_permuted_clip_is_made_contiguous_first() -> None:
    # VideoMAE hands its Conv3d the clip permuted (B, T, C, H, W) -> (B, C, T, H, W): PyTorch
    # copies it contiguous first (`input.contiguous()`), held to the kernel's end. 2x3x4x32x32
    # fp32: C = 98,304; 32 channels, 2x8x8 stride 2x8x8: Wb = 49,152, Yb = Y = 8,192.
    # [+C, +Wb, +Yb, -Wb, +Y, -Yb, -C]: peak 155,648 - Y = 147,456 (measured 147,456)
    made = conv3d((2, 3, 32, 4, 32, (2, 8, 8), (2, 8, 8), (0, 0, 0), 1))
    made.attributes["layout_copies"] = 1  # what the front end records for a view's input
    assert scratch_bytes(made, {}) == 147_456


@pytest.mark.slow
@pytest.mark.torch
def test_traced_view_inputs_match_the_measured_kernels() -> None:
    # a permuted clip into a Conv3d and a channel slice into a Conv2d: the front end marks
    # both inputs as copied (layout_copies 1), and each convolution's scratch is measured's
    torch = pytest.importorskip("torch")
    from graphmem import analyze_torch
    from graphmem.frontends.torch.loader import parse_tensor_spec
    from tests.helpers.torch_nets import convolution_calls

    class Views(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.tubelet = torch.nn.Conv3d(3, 32, (2, 8, 8), (2, 8, 8))
            self.conv = torch.nn.Conv2d(16, 16, 3, padding=1)

        def forward(self, clip: torch.Tensor) -> torch.Tensor:
            y = self.tubelet(clip.permute(0, 2, 1, 3, 4))  # 2x32x2x4x4
            return self.conv(y.flatten(1, 2)[:, :16])  # a slice of 64 channels

    class Ndhwc(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv3d(16, 16, 3, padding=1)

        def forward(self, clip: torch.Tensor) -> torch.Tensor:
            return self.conv(clip.permute(0, 4, 1, 2, 3))  # channels-last-3d: no reorders

    threads = torch.get_num_threads()
    analysis = analyze_torch(Views(), [parse_tensor_spec("2x4x3x32x32")], plan=False,
                             suggest=False)
    convs = [n for n in analysis.graph.nodes if n.op_type == "aten.convolution.default"]
    assert [n.attr_int("layout_copies", 0) for n in convs] == [1, 1]
    calls = convolution_calls(Views(), torch.randn(2, 4, 3, 32, 32))
    measured = [k.scratch_bytes for k in calls]
    assert [scratch_bytes(n, {}, threads) for n in convs] == measured
    # an NDHWC clip runs the channels-last forward: its 3x3x3 NCDHW weight copied (27,648),
    # Y, the scratchpad, the weight padded: at 2 threads 67,632 (measured)
    analysis = analyze_torch(Ndhwc(), [parse_tensor_spec("2x4x8x8x16")], plan=False,
                             suggest=False)
    (conv,) = [n for n in analysis.graph.nodes if n.op_type == "aten.convolution.default"]
    assert (conv.attr_int("channels_last", 0), conv.attr_int("layout_copies", 0)) == (1, 2)
    (call,) = convolution_calls(Ndhwc(), torch.randn(2, 4, 8, 8, 16))
    assert scratch_bytes(conv, {}, threads) == call.scratch_bytes


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("threads", [1, 2])
def test_conv3d_forwards_as_run(threads: int) -> None:
    # every row's measured scratch (how far the kernel's allocations rose above its output)
    # is graphmem's, to the byte: the rows the rule was read from and the held-out ones
    pytest.importorskip("torch")
    from tests.helpers.torch_nets import torch_threads

    with torch_threads(threads):
        rows = [*((row, False) for row in FITTED + HELD_OUT), *((row, True) for row in BF16)]
        for row, bf16 in rows:
            call = measured(row, bf16)
            assert scratch_bytes(conv3d(row, bf16), {}, threads) == call.scratch_bytes, (
                row, bf16, threads, call.allocations)


def test_one_small_clips_backward_unfolds_twice() -> None:
    # slow_conv3d's backward, 1x20x4x16x16 -> 24, 3x3x3 padding 1: [+GX, +C, -C, +GB, +GW,
    # +C', -C'], C = C' = 20*27*1,024*4 = 2,211,840: peak at the outputs + C', less them:
    # 2,211,840 (measured). An unstrided 1x1x1 on 1x32x4x16x16: C = 32*1*1,024*4 = 131,072
    # (the input gradient's, taken all the same), no C': peak GX + C = 262,144, less the
    # outputs 131,072 + 4,096 + 128: 126,848 (measured)
    assert scratch_bytes(conv3d_backward(BACKWARD[0]), {}) == 2_211_840
    assert scratch_bytes(conv3d_backward(BACKWARD[4]), {}) == 126_848


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("threads", [1, 2])
def test_conv3d_backwards_as_run(threads: int) -> None:
    pytest.importorskip("torch")
    from tests.helpers.torch_nets import torch_threads

    with torch_threads(threads):
        for row in BACKWARD:
            call = measured_backward(row)
            assert scratch_bytes(conv3d_backward(row), {}, threads) == call.scratch_bytes, (
                row, threads, call.allocations)
