"""Signal processing: DFT, STFT, the window functions and MelWeightMatrix.

Convention for a Fourier transform of length n (FFTW's yardstick, the one FFT benchmarks
quote: "mflops = 5 N log2(N) / time"): a complex transform costs 5 * n * ceil(log2 n) FLOPs
(n/2 * log2 n radix-2 butterflies of one complex multiply, 6, and two complex adds, 4), a
transform of real input (or to real output, the inverse of a one-sided one) half of that.
log2 is rounded up: a length that is not a power of two is counted as the next one (what a
radix-2 FFT pads to; Bluestein's and mixed-radix algorithms cost otherwise, the yardstick
stays). A normalisation by 1/n (inverse) is O(outputs) and not counted. No MACs.

DFT's length is `dft_length` (an input: its value is data, so read from the output's shape)
or the input's size on the axis; the axis is an attribute (opset 17, 19) or an input (opset
20, default -2): where its value is not in the graph every possible axis is tried and the
largest cost counted, and the node says so.
Windows (Hann, Hamming, Blackman) are formulas of the index: per output element Hann and
Hamming a0 - a1 cos(2 pi k / N): 4 (multiply, cos, multiply, subtract); Blackman adds
a2 cos(4 pi k / N): 8. MelWeightMatrix [n_bins, n_mel] is a triangle per mel band: each
element is a ramp, (f - lower) / (center - lower) against the falling side and a min, 4.
"""

from __future__ import annotations

import math

from graphmem.core.conventions import PROBE_DIM_VALUE
from graphmem.core.ir import Node
from graphmem.core.symbolic import SymInt, product
from graphmem.ops.registry import (
    OpCost,
    ShapeUnknownError,
    known_dim,
    known_rank,
    known_shape,
    output_numel,
    register,
)

COMPLEX_FFT_FLOPS = 5  # per n * log2(n)
HANN_FLOPS = 4
BLACKMAN_FLOPS = 8
MEL_RAMP_FLOPS = 4  # subtract, divide, the other side's ramp, min


def fft_flops(length: SymInt, real: bool, node: Node) -> SymInt:
    """FLOPs of one transform of `length` points (module docstring)."""
    if not length.is_constant:
        raise ShapeUnknownError(f"{node.describe()}: transform length {length} is not a constant")
    return SymInt.const(transform_flops(int(length), real))


def transform_flops(n: int, real: bool) -> int:
    """5 n ceil(log2 n), half for a real transform: n = 16, complex: 5 * 16 * 4 = 320."""
    stages = max((n - 1).bit_length(), 0)  # ceil(log2 n)
    return COMPLEX_FFT_FLOPS * n * stages // (2 if real else 1)


def nd_fft_flops(complex_shape: tuple[int, ...], dims: tuple[int, ...],
                 real_length: int | None = None) -> int:
    """An n-dimensional FFT as 1-D transforms, one per line along each of `dims`:
    `complex_shape` is the complex side's shape; with `real_length` the last of `dims` is
    the real one (a one-sided spectrum of real input, or its inverse), transforms of
    `real_length` points at half cost on as many lines as the complex side has there.
    rfft2 of [2, 3, 16, 16] (complex side [2, 3, 16, 9], real length 16): 864 / 16 = 54
    lines of 16 complex points (320 each) + 864 / 9 = 96 lines of 16 real points (160 each)
    = 17,280 + 15,360 = 32,640."""
    numel = math.prod(complex_shape)
    flops = 0
    for i, dim in enumerate(dims):
        lines = numel // complex_shape[dim]
        if real_length is not None and i == len(dims) - 1:
            flops += lines * transform_flops(real_length, real=True)
        else:
            flops += lines * transform_flops(complex_shape[dim], real=False)
    return flops


def dft_axes(node: Node, rank: int) -> list[int]:
    """The transformed axis, or every axis it could be when its value is data."""
    if "axis" in node.attributes:
        return [node.attr_int("axis", 1) % rank]
    if node.input(2) is None:
        return sorted({1, rank - 2})  # opset 17-19's default attribute is 1, opset 20's -2
    return list(range(rank - 1))


def dft_length_on(node: Node, axis: int) -> SymInt:
    """n: the input's size on the axis, or dft_length (data: read from the output's shape);
    a one-sided spectrum of b bins is taken as n = 2 (b - 1), the even length."""
    inverse, onesided = node.attr_int("inverse", 0), node.attr_int("onesided", 0)
    if node.input(1) is None:
        size = known_dim(node.input(0), axis, node)
        return (size - 1) * 2 if inverse and onesided else size
    out = known_dim(node.outputs[0], axis, node)
    return (out - 1) * 2 if onesided and not inverse else out


@register("DFT")
def dft(node: Node) -> OpCost:
    # input [..., n on axis, ..., 1 (real) or 2 (complex)]; one transform per other element
    shape = known_shape(node.input(0), node)
    rank = len(shape)
    real = bool(shape[-1] == 1) or bool(node.attr_int("inverse", 0)
                                        and node.attr_int("onesided", 0))
    costs = []
    for axis in dft_axes(node, rank):
        transforms = product(d for i, d in enumerate(shape[:-1]) if i != axis)
        costs.append(transforms * fft_flops(dft_length_on(node, axis), real, node))
    flops = max(costs, key=lambda c: c.evaluate({n: PROBE_DIM_VALUE for n in c.free_symbols()}))
    cost = OpCost.from_flops(flops)
    if len({str(c) for c in costs}) > 1:
        cost = cost.noted("the axis is an input: the largest cost over the axes it could be")
    return cost


@register("STFT")
def stft(node: Node) -> OpCost:
    # signal [b, length, 1 or 2] -> [b, frames, bins, 2]: per frame, the window's multiply
    # (1 per sample and component) and one transform of frame_length points
    signal = node.input(0)
    real = bool(known_dim(signal, 2, node) == 1)
    components = 1 if real else 2
    frames = known_dim(node.outputs[0], 1, node)
    window = node.input(2)
    if window is not None:
        frame_length = known_dim(window, 0, node)
    else:  # frame_length is data: the bins say it (one-sided: n/2 + 1)
        bins = known_dim(node.outputs[0], 2, node)
        frame_length = (bins - 1) * 2 if node.attr_int("onesided", 1) else bins
    batch = known_dim(signal, 0, node)
    windowing = frame_length * components if window is not None else SymInt()
    per_frame = windowing + fft_flops(frame_length, real, node)
    return OpCost.from_flops(batch * frames * per_frame)


@register("HannWindow", "HammingWindow")
def cosine_window(node: Node) -> OpCost:
    return OpCost.from_flops(output_numel(node) * HANN_FLOPS)


@register("BlackmanWindow")
def blackman_window(node: Node) -> OpCost:
    return OpCost.from_flops(output_numel(node) * BLACKMAN_FLOPS)


@register("MelWeightMatrix")
def mel_weight_matrix(node: Node) -> OpCost:
    # [floor(dft_length / 2) + 1, num_mel_bins]: the bin and band edges are O(rows + columns)
    if known_rank(node.outputs[0], node) != 2:
        raise ShapeUnknownError(f"{node.describe()}: the output is not a matrix")
    return OpCost.from_flops(output_numel(node) * MEL_RAMP_FLOPS)

