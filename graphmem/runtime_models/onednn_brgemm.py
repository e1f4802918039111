"""oneDNN's strided backward-data convolution on an AVX-512 CPU (fp32, NCHW): the scratchpad
of `jit_brgemm_conv_bwd_strided` (what PyTorch's strided dense convolution backward runs for
the input gradient), read from oneDNN's src/cpu/x64/jit_brgemm_conv_bwd_utils.cpp
(`init_conf`, `init_scratchpad`) and checked against every measured kernel.

It books three entries, each per thread and page-aligned (+4,096 B each):
- the brgemm batch elements (40 B each), a page's worth rounded up: 103 = 4,120 B
  (`adjusted_batch_size`, for a GEMM batch of at most 102 kernel taps x channel blocks);
- the output gradient copied with its overflow rows and columns, channels padded to 16:
  ohp x owp x Cout' floats rounded up to 4,096 of them (`inp_buffer_size`), ohp = oh + the
  kernel rows that overflow above and below (`t_ovf`, `b_ovf`: (kh - 1 - padding) / stride);
- a mask of those blocks, a page (`inp_buffer_mask_size`, at most 4,096 blocks).
e.g. 2x8x16x16, 3x3 stride 2 padding 1 -> 8x8: ohp = owp = 8 + 0 + 1 = 9, 81 x 16 = 1,296
floats -> 4,096 = 16,384 B; per thread 4,120 + 16,384 + 4,096 = 24,600, with the three
alignments 12,288 + 24,600 per thread (measured 36,888 at one thread, 61,488 at two).

An input width the stride does not divide (`has_uneven_iw`: 17 at stride 2) runs the
transposing path (`exec_trans`), which books a fourth entry, page-aligned: per thread the
input gradient's row block, iw_block x stride_w x Cin floats rounded up to 4,096 of them
(`out_buffer_size`, `key_conv_brgemm_out_buffer`), iw_block the width rounded up to the
stride (the whole row: every grid measured, up to 129 wide). e.g. 2x16x17x17 -> 16
channels, 3x3 stride 2 padding 1: 18 x 2 x 16 = 576 -> 4,096 floats = 16,384 B: 4,096 +
16,384 more at one thread (measured 57,368 = 36,888 + 20,480).
"""

from __future__ import annotations

PAGE = 4_096
BLOCK = 16
BATCH_BYTES = 103 * 40  # a page of 40 B brgemm batch elements, rounded up
FLOAT = 4


def strided_data_scratchpad(ih: int, iw: int, oh: int, ow: int, kh: int, kw: int,
                            stride: tuple[int, int], padding: tuple[int, int],
                            out_channels: int, threads: int, *, in_channels: int,
                            block: int = BLOCK) -> int:
    """The scratchpad of a strided backward-data (input ih x iw of `in_channels`, output
    gradient oh x ow of `out_channels`, kernel kh x kw, `stride` and `padding` (top, left)
    in (h, w)), in bytes; the gradient's copy keeps its channels padded to `block` (1 for a
    channels-last gradient, copied as it is: measured)."""
    rows = oh + _overflow(kh, ih, oh, stride[0], padding[0])
    cols = ow + _overflow(kw, iw, ow, stride[1], padding[1])
    channels = -(-out_channels // block) * block
    copy = -(-rows * cols * channels // PAGE) * PAGE * FLOAT
    return 3 * PAGE + threads * (BATCH_BYTES + copy + PAGE) + _uneven_rows(
        iw, stride[1], in_channels, threads)


def _uneven_rows(iw: int, stride: int, in_channels: int, threads: int) -> int:
    """The transposing path's row buffer where the stride does not divide the width."""
    if iw % stride == 0:
        return 0
    row = -(-iw // stride) * stride * stride * in_channels
    return PAGE + threads * -(-row // PAGE) * PAGE * FLOAT


def _overflow(kernel: int, size: int, out: int, stride: int, pad: int) -> int:
    """t_ovf + b_ovf: the kernel rows past the padding at either end, over the stride
    (`calculate_end_padding` gives the far end's padding)."""
    end = (out - 1) * stride + kernel - (size + pad)
    return max(0, kernel - 1 - pad) // stride + max(0, kernel - 1 - end) // stride
