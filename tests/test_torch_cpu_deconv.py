"""A transposed convolution's scratch on the CPU (graphmem/runtime_models/torch_cpu.py
`transposed_convolution`): oneDNN runs it as the reverse convolution's backward-data, whose
scratchpad graphmem/runtime_models/onednn_brgemm.py reads from oneDNN's source, with the row
buffer of a width the stride does not divide (the 73,984 B docs/zoo.md left unexplained);
PyTorch runs one small image itself (slow_conv_transpose2d's columns). The unit tests give
the working; the slow one measures every kernel of a grid to the byte (torch 2.13, oneDNN
3.12, AVX-512, fp32, one and two threads)."""

from __future__ import annotations

import pytest

from graphmem.runtime_models.onednn_brgemm import strided_data_scratchpad
from graphmem.runtime_models.torch_cpu import scratch_bytes
from tests.helpers.deconv import BIASED, CHANNELS_LAST, GRID, deconv


def test_an_uneven_width_books_the_row_buffer() -> None:
    # the reverse convolution 2x16x17x17 -> 8x8 (3x3 stride 2, padding 0): 12,288 + 4,120 +
    # 4,096 + the copy (8 + 1 + 1)^2 x 16 = 1,600 -> 4,096 floats = 16,384: 36,888; 17 is
    # odd: the row buffer 18 x 2 x 16 = 576 -> 4,096 floats, 16,384 + 4,096 = 20,480
    assert strided_data_scratchpad(17, 17, 8, 8, 3, 3, (2, 2), (0, 0), 16, 1,
                                   in_channels=16) == 36_888 + 20_480
    # at two threads a row buffer each: 61,488 + 4,096 + 2 x 16,384 = 98,352
    assert strided_data_scratchpad(17, 17, 8, 8, 3, 3, (2, 2), (0, 0), 16, 2,
                                   in_channels=16) == 61_488 + 36_864
    # 64 channels, 65 wide: 66 x 2 x 64 = 8,448 -> 12,288 floats = 49,152 B
    assert strided_data_scratchpad(17, 65, 8, 32, 3, 3, (2, 2), (0, 0), 16, 1,
                                   in_channels=64) - strided_data_scratchpad(
        16, 64, 8, 32, 3, 3, (2, 2), (1, 1), 16, 1, in_channels=64) == 4_096 + 49_152


@pytest.mark.parametrize(("shape", "expected"), [
    # a Conv2d's own strided backward-data over an odd input width books the same row
    # buffer (measured, one thread; the scratchpad is the allocation beside the gradient):
    # 2x16x17x17 -> 16, 3x3 s2 p1 (9x9): 36,888 + 4,096 + 18 x 2 x 16 -> 16,384 = 57,368
    ((17, 9, 3, 1, 16, 16), 57_368),
    # 2x64x33x33 -> 16 (17x17): 53,272 + 4,096 + 34 x 2 x 64 = 4,352 -> 8,192 floats 32,768
    ((33, 17, 3, 1, 16, 64), 90_136),
    # 2x16x17x17 -> 64, 2x2 s2 p0 (8x8): 53,272 + 20,480; 2x32x15x15 -> 32, 3x3 s2 p0 (7x7):
    # 36,888 + 4,096 + 16 x 2 x 32 -> 16,384
    ((17, 8, 2, 0, 64, 16), 73_752),
    ((15, 7, 3, 0, 32, 32), 57_368),
])
def test_a_convolutions_backward_over_an_odd_width_books_it_too(
        shape: tuple[int, ...], expected: int) -> None:
    size, out, kernel, padding, c_out, c_in = shape
    assert strided_data_scratchpad(size, size, out, out, kernel, kernel, (2, 2),
                                   (padding, padding), c_out, 1, in_channels=c_in) == expected


def test_a_strided_transposed_convolution_holds_the_reverse_scratchpad() -> None:
    # 2x16x8x8 -> 16, 3x3 s2: 17x17. S = 36,888 + 20,480 + 128 = 57,496; X 8,192, W' 9,216,
    # Y = 2 x 16 x 17 x 17 x 4 = 36,992: S + X + W' + Y = 111,896 over 3Y = 110,976, less Y:
    # 74,904 (measured 74,904); even output (16x16, padding 1, output_padding 1): S = 37,016,
    # 37,016 + 8,192 + 9,216 + 32,768 = 87,192 < 3 x 32,768 = 98,304: 65,536 (measured)
    assert scratch_bytes(deconv((2, 16, 16, 8, 8, 3, 2, 0, 0)), {}, 1) == 74_904
    assert scratch_bytes(deconv((2, 16, 16, 8, 8, 3, 2, 1, 1)), {}, 1) == 65_536


def test_a_bias_makes_the_output_apart_where_the_kernel_cannot_add_it() -> None:
    # 17 wide (stride 2): S holds the output made apart too, 36,992 + 128: 57,496 + 37,120 =
    # 94,616; the peak 94,616 + 8,192 + 9,216 + 36,992 less Y: 112,024 (measured 112,024).
    # 16 wide: no change (65,536). Unstrided 3x3 (8x8): [+8,320, +8,192, +9,216, +8,192,
    # ...]: 33,920 - 8,192 = 25,728 (measured)
    assert scratch_bytes(deconv((2, 16, 16, 8, 8, 3, 2, 0, 0), bias=True), {}, 1) == 112_024
    assert scratch_bytes(deconv((2, 16, 16, 8, 8, 3, 2, 1, 1), bias=True), {}, 1) == 65_536
    assert scratch_bytes(deconv((2, 16, 16, 8, 8, 3, 1, 1, 0), bias=True), {}, 1) == 25_728


def test_the_weights_are_padded_to_onednns_block() -> None:
    # 2x64x4x4 -> 40 channels, 4x4 s2 (10x10): W' pads Cout to oneDNN's block of 32 (above 16
    # channels): 64 x 64 x 16 x 4 = 262,144 (measured; to 16 it would be 48: 196,608).
    # S = 12,288 + 4,120 + 4,096 + (4 + 1 + 1)^2 x 64 -> 4,096 floats 16,384 + 128 = 37,016,
    # X = 8,192, Y = 2 x 40 x 100 x 4 = 32,000: 339,352 - Y = 307,352 (measured); 80
    # channels pad to 96: 64 x 96 x 16 x 4 = 393,216, Y = 2 x 80 x 8 x 8 x 4 = 40,960:
    # 37,016 + 8,192 + 393,216 + 40,960 - 40,960 = 438,424 (measured)
    assert scratch_bytes(deconv((2, 64, 40, 4, 4, 4, 2, 0, 0)), {}, 1) == 307_352
    assert scratch_bytes(deconv((2, 64, 80, 4, 4, 4, 2, 1, 0)), {}, 1) == 438_424


def test_one_small_image_is_unfolded_by_pytorch() -> None:
    # batch 1, a 3x3 kernel, 1,024 input elements: slow_conv_transpose2d, columns of
    # Cout x 3 x 3 by 8 x 8: 16 x 9 x 64 x 4 = 36,864 (measured)
    assert scratch_bytes(deconv((1, 16, 16, 8, 8, 3, 2, 1, 1)), {}, 1) == 36_864


def test_a_channels_last_input_copies_and_pads_the_weights_only() -> None:
    # SAM's 2x16x4x4 -> 4, 2x2 stride 2, at two threads: [+Wc, +Y, +S, +W', ...], no reorder
    # of x or y: Wc = 16 x 4 x 2 x 2 x 4 = 1,024, S = 12,288 + 2 x 24,600 + 128 = 61,616,
    # W' = 16 x 16 (Cout padded) x 4 x 4 = 4,096: 66,736 (measured); at one thread S =
    # 37,016: 42,136 (measured)
    row = (2, 16, 4, 4, 4, 2, 2, 0, 0)
    assert scratch_bytes(deconv(row, bias=True, channels_last=True), {}, 2) == 66_736
    assert scratch_bytes(deconv(row, bias=True, channels_last=True), {}, 1) == 42_136
    # unstrided, 1x1: the weights are channels-last already (no Wc); S the channels-last
    # forward's 4,096 + 2 x 4,120 + 128 = 12,464, W' = 16 x 16 x 4 = 1,024: 13,488 (measured)
    assert scratch_bytes(deconv((2, 16, 16, 8, 8, 1, 1, 0, 0), channels_last=True),
                         {}, 2) == 13_488


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("threads", [1, 2])
def test_transposed_convolutions_as_run(threads: int) -> None:
    # every row's measured scratch (how far the kernel's allocations rose above its output),
    # channels-last ones too, is graphmem's, to the byte
    pytest.importorskip("torch")
    from tests.helpers.deconv import measured
    from tests.helpers.torch_nets import torch_threads

    with torch_threads(threads):
        for row, bias, layout in [*((row, False, False) for row in GRID),
                                  *((row, True, False) for row in BIASED),
                                  *((row, bias, True) for row, bias in CHANNELS_LAST)]:
            call = measured(row, bias, layout)
            assert scratch_bytes(deconv(row, bias, layout), {}, threads) == (
                call.scratch_bytes), (row, bias, layout, threads, call.allocations)
