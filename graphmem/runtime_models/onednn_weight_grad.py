"""oneDNN's weight-gradient convolution on an AVX-512 CPU (fp32, NCHW, groups == 1): which
kernel it picks, the layouts it copies the operands to, and the scratchpad it books.

Read from oneDNN's sources (src/cpu/cpu_convolution_list.cpp and src/cpu/x64: the f32
backward-weights list tries, in order, jit_avx512_common_1x1_convolution_bwd_weights_t,
jit_avx512_common_convolution_bwd_weights_t, jit_avx2_convolution_bwd_weights_t):
- a 1x1 kernel without padding: `jit_1x1:avx512_core`, channels padded to 16 in both dims;
- 1 to 3 input channels (`is_1stconv`: fewer than 16 on AVX-512, and only 1, 2 or 3
  accepted): `jit:avx512_core` reading the source plain, weights padded in the output
  channels (Ohwi16o);
- 4 to 15 input channels: refused there, taken by `jit:avx2`, blocks of 8 (nChw8c source and
  output gradient, weights 8 x 8);
- 16 or more: `jit:avx512_core`, both padded to 16;
- a kernel wider than 14 (but 4 to 15 input channels, avx2's, not measured): the avx512
  kernel refuses it, `gemm:jit` runs it on the plain tensors (`_gemm`).
The scratchpad is the sum of what each kernel books in oneDNN's scratchpad registry
(src/common/memory_tracking.hpp `registry_t::book`: each entry takes its size plus its
alignment, at least 128 B): its per-thread reduction buffers over the minibatch (as many as
the threads the kernel's own `balance` gives the minibatch, less one), the reducers'
(src/cpu/x64/cpu_reducer.cpp `reduce_balancer_t`: one page-aligned buffer per extra thread
in a group), a barrier context per reduction (`simple_barrier::ctx_t`, page-aligned: 4,096 B
plus its alignment), a padded bias, and a strided 1x1's reduce-to-unit-stride copy.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

AVX512_BLOCK = 16  # floats per zmm register: the avx512 kernels' channel block
AVX2_BLOCK = 8
REGISTRY_ALIGNMENT = 128  # memory_tracking.hpp default_alignment
PAGE = 4096  # PAGE_4K: the reducers' buffers' alignment
BARRIER = 4096  # sizeof(simple_barrier::ctx_t): aligned to a page (cpu_barrier.hpp)
FLOAT = 4
MAX_JIT_KW = 14  # the avx512 kernel's widest kernel (wider: gemm:jit)
GEMM_OUTER_AREA = 256  # gemm:jit threads over the batch below this output area per thread
MIN_OH_REDUCE = 9  # jit_avx512_common_conv_bwd_weights_kernel_f32::min_oh_reduce
AVX2_MAX_BUFFER = 1 << 21  # jit_avx2_convolution.hpp init_balancers' heuristic


@dataclass(frozen=True)
class ConvShape:
    """A dense 2-D convolution's weight gradient as oneDNN sees it."""

    mb: int
    ic: int
    oc: int
    ih: int
    iw: int
    oh: int
    ow: int
    kh: int
    kw: int
    stride_h: int
    stride_w: int
    bias: bool  # the bias gradient is asked for
    threads: int  # dnnl_get_max_threads(): PyTorch's intra-op threads


@dataclass(frozen=True)
class WeightGradPlan:
    """The buffers a weight-gradient kernel holds while it runs, in bytes."""

    kernel: str  # oneDNN's implementation name, as ONEDNN_VERBOSE prints it
    source_bytes: int  # the source's blocked copy (0: read as it is)
    output_grad_bytes: int  # the output gradient's blocked copy
    weight_bytes: int  # the weight gradient as computed, blocked
    scratchpad_bytes: int


def _up(value: int, block: int) -> int:
    return -(-value // block) * block


def _div_up(value: int, block: int) -> int:
    return -(-value // block)


def _book(nbytes: int, alignment: int = REGISTRY_ALIGNMENT) -> int:
    """What registry_t::book adds for an entry: its size and its alignment (none if empty)."""
    return nbytes + max(alignment, REGISTRY_ALIGNMENT) if nbytes else 0


def _barriers(count: int) -> int:
    return _book(count * BARRIER, BARRIER)


@functools.lru_cache(maxsize=4096)  # a model repeats its shapes; a batch search its models
def plan(shape: ConvShape) -> WeightGradPlan:
    """The kernel oneDNN picks for `shape` and what it holds (see the module's docstring)."""
    if shape.kh == shape.kw == 1 and _unit_stride_reducible(shape):
        return _pointwise(shape)
    if shape.ic < AVX512_BLOCK and shape.ic > 3:
        return _avx2(shape)
    if shape.kw > MAX_JIT_KW:
        return _gemm(shape)
    return _avx512(shape)


def _gemm(shape: ConvShape) -> WeightGradPlan:
    """gemm_convolution_bwd_weights_t (`gemm:jit`), where the avx512 kernel refuses a kernel
    wider than 14 (jit_avx512_common_conv_kernel.cpp: `jcp.kw > 14`; M5's 1 x 80): the
    operands read plain (the weight gradient made in place: its bytes), a scratchpad of the
    weights' reduction buffers, booked as threads x the weights' bytes floats
    (gemm_convolution_utils.cpp `key_conv_wei_reduction`: `book<float>(nthr *
    weights_d.size())`, bytes counted as floats), and the source unfolded,
    threads x Cin x kernel x output area floats (`key_conv_gemm_col`), + 128 B each. Threads:
    every one where the output area per thread is under 256 and the batch is not 1
    (`outer_threading`), else one. e.g. 2x1x8000 -> 16 channels, 1 x 80 at stride 4, 2
    threads: 1,981 outputs (990 a thread: one thread), 16 x 80 x 4 = 5,120 B of weights ->
    20,480 + 128, columns 80 x 1,981 x 4 = 633,920 + 128: 654,656 (measured 654,656)."""
    area = shape.oh * shape.ow
    outer = area // shape.threads < GEMM_OUTER_AREA and shape.mb != 1
    nthr = shape.threads if outer else 1
    weights = shape.oc * shape.ic * shape.kh * shape.kw * FLOAT
    columns = nthr * shape.ic * shape.kh * shape.kw * area * FLOAT
    return WeightGradPlan("gemm:jit", 0, 0, weights,
                          _book(nthr * weights * FLOAT) + _book(columns))


def _unit_stride_reducible(shape: ConvShape) -> bool:
    """The 1x1 kernel's conditions: no padding, and a strided source whose every
    stride-th pixel makes the output (rtus_prepare: the output's size times the stride is the
    input's), copied to unit stride."""
    if (shape.stride_h, shape.stride_w) == (1, 1):
        return (shape.oh, shape.ow) == (shape.ih, shape.iw)
    return shape.oh * shape.stride_h == shape.ih and shape.ow * shape.stride_w == shape.iw


def reducer_bytes(nthr: int, job_size: int, njobs: int, reduction: int,
                  max_buffer: int) -> int:
    """cpu_reducer_t's scratchpad: reduce_balancer_t splits `njobs` jobs of `job_size`
    floats, each a sum over `reduction` items, into groups of threads; each thread but the
    first of a group sums into its own page-aligned buffer of the group's jobs, and each group
    has a barrier."""
    groups, per_group, jobs_per_group = _reduce_balance(nthr, job_size, njobs, reduction,
                                                        max_buffer)
    if per_group == 1:
        return 0
    space = groups * (per_group - 1) * jobs_per_group * job_size * FLOAT
    return _book(space, PAGE) + _barriers(groups)


def _reduce_balance(nthr: int, job_size: int, njobs: int, reduction: int,
                    max_buffer: int) -> tuple[int, int, int]:
    """reduce_balancer_t::balance (lock-free): (groups, threads per group, jobs per group),
    the split of least per-thread work, threads in a group only where their buffers fit."""
    least_jobs = max(1, njobs // nthr)
    most_jobs = max(1, max_buffer // (nthr * job_size))
    groups = min(njobs // least_jobs, nthr)
    per_group = min(nthr // groups, reduction)
    jobs_ub = _div_up(njobs, groups)
    best = njobs * job_size * reduction
    for jobs in range(least_jobs, njobs):
        c_groups = min(njobs // jobs, nthr)
        c_per_group = min(nthr // c_groups, reduction)
        c_jobs_ub = _div_up(njobs, c_groups)
        if c_per_group > 1 and c_jobs_ub > most_jobs:
            continue
        cost = job_size * c_jobs_ub * (_div_up(reduction, c_per_group) + (c_per_group != 1))
        if cost < best:
            groups, per_group, jobs_ub, best = c_groups, c_per_group, c_jobs_ub, cost
    return groups, per_group, jobs_ub


def _avx2(shape: ConvShape) -> WeightGradPlan:
    """jit_avx2_convolution_bwd_weights_t: channels padded to 8; a reducer over the minibatch
    for the weights (jobs: 8 x 8 blocks of kh x kw) and one for the bias (jobs: 8 channels),
    balanced over every thread; the bias padded where the channels are not a multiple of 8."""
    ic, oc = _up(shape.ic, AVX2_BLOCK), _up(shape.oc, AVX2_BLOCK)
    nb_ic, nb_oc = ic // AVX2_BLOCK, oc // AVX2_BLOCK
    block = shape.kh * shape.kw * AVX2_BLOCK * AVX2_BLOCK
    pad = reducer_bytes(shape.threads, block, nb_ic * nb_oc, shape.mb, AVX2_MAX_BUFFER)
    if shape.bias:
        pad += reducer_bytes(shape.threads, AVX2_BLOCK, nb_oc, shape.mb, AVX2_MAX_BUFFER)
        pad += _book(oc * FLOAT) if shape.oc % AVX2_BLOCK else 0
    return WeightGradPlan(
        "jit:avx2", shape.mb * ic * shape.ih * shape.iw * FLOAT,
        shape.mb * oc * shape.oh * shape.ow * FLOAT, oc * ic * shape.kh * shape.kw * FLOAT, pad)


def _avx512(shape: ConvShape) -> WeightGradPlan:
    """jit_avx512_common_convolution_bwd_weights_t: output channels padded to 16, input
    channels too unless there are 1 to 3 (read plain); the minibatch's threads each sum the
    weights and bias into a buffer of their own but the first; the bias reducer over the
    kernel's threads; the bias padded where the channels are not a multiple of 16."""
    first = shape.ic < AVX512_BLOCK
    ic = shape.ic if first else _up(shape.ic, AVX512_BLOCK)
    oc = _up(shape.oc, AVX512_BLOCK)
    nb_ic, nb_oc = (1 if first else ic // AVX512_BLOCK), oc // AVX512_BLOCK
    ic_block = shape.ic if first else AVX512_BLOCK
    nthr_mb, nthr = _avx512_balance(shape, nb_ic, nb_oc, ic_block)
    weights = oc * ic * shape.kh * shape.kw
    pad = 0
    if nthr_mb > 1:
        pad += _book((weights + oc) * (nthr_mb - 1) * FLOAT) + _barriers(1)
    if shape.bias:
        pad += _book(oc * FLOAT) if shape.oc % AVX512_BLOCK else 0
        pad += reducer_bytes(nthr, AVX512_BLOCK, nb_oc, shape.mb,
                             nthr * 3 * 5 * 5 * AVX512_BLOCK * AVX512_BLOCK)
    source = 0 if first else shape.mb * ic * shape.ih * shape.iw * FLOAT
    return WeightGradPlan("jit:avx512_core", source,
                          shape.mb * oc * shape.oh * shape.ow * FLOAT, weights * FLOAT, pad)


def _avx512_balance(shape: ConvShape, nb_ic: int, nb_oc: int,
                    ic_block: int) -> tuple[int, int]:
    """jit_avx512_common_conv_bwd_weights_kernel_f32::balance (one group, NCHW): the split
    of the threads over the minibatch (with rows of the output where it has more than 9: the
    2-D reduction harness), output and input channel blocks of least memory traffic, then of
    less compute within 110% of that traffic. Returns (threads on the minibatch, threads)."""
    two_d = shape.oh > MIN_OH_REDUCE
    ih_reduce, oh_reduce = (shape.ih, shape.oh) if two_d else (1, 1)
    ih_rest, oh_rest = (1, 1) if two_d else (shape.ih, shape.oh)
    oh_threads = max(1, oh_reduce // MIN_OH_REDUCE)
    kernel = shape.kh * shape.kw

    def memory(mb: int, ocb: int, icb: int) -> int:
        source = (_div_up(shape.mb * ih_reduce, mb) * _div_up(nb_ic, icb) * ic_block * ih_rest
                  * shape.iw // shape.stride_h // shape.stride_w)
        output = (_div_up(shape.mb * oh_reduce, mb) * _div_up(nb_oc, ocb) * AVX512_BLOCK
                  * oh_rest * shape.ow)
        weights = _div_up(nb_oc, ocb) * _div_up(nb_ic, icb) * kernel * ic_block * AVX512_BLOCK
        return source + output + 8 * weights

    def compute(mb: int, ocb: int, icb: int) -> int:
        return _div_up(shape.mb * oh_reduce, mb) * _div_up(nb_oc, ocb) * _div_up(nb_ic, icb)

    splits = []
    for mb in range(1, min(shape.threads, shape.mb * oh_threads) + 1):
        rest = shape.threads // mb
        for ocb in range(1, min(rest, nb_oc) + 1):
            splits.append((mb, ocb, min(rest // ocb, nb_ic)))
    best = (1, 1, 1)
    least = memory(*best)
    for split in splits:  # step 1: least memory traffic (the last of equals)
        if memory(*split) <= least:
            best, least = split, memory(*split)
    cheapest = compute(*best)
    for split in splits:  # step 2: less compute, traffic under 110%, or 3/4 of the compute
        cost = compute(*split)
        if (cost <= cheapest and memory(*split) < 1.1 * least) or 4 * cost <= 3 * cheapest:
            best, cheapest = split, cost
    mb = best[0]
    if shape.threads // 2 < mb < shape.threads:
        mb = min(shape.mb * oh_threads, shape.threads)
    return mb, mb * best[1] * best[2]


def _pointwise(shape: ConvShape) -> WeightGradPlan:
    """jit_avx512_common_1x1_convolution_bwd_weights_t: both channel dims padded to 16; the
    minibatch's threads but the first sum into weight buffers of their own; the bias reducer
    over the kernel's threads; a strided one first copies the subsampled source, one blocked
    slice per thread (reduce-to-unit-stride)."""
    ic, oc = _up(shape.ic, AVX512_BLOCK), _up(shape.oc, AVX512_BLOCK)
    nb_ic, nb_oc = ic // AVX512_BLOCK, oc // AVX512_BLOCK
    spatial = shape.oh * shape.ow  # the source as the kernel reads it: strides reduced to 1
    step = _best_divider(spatial, 7, 16, True)
    if spatial % step:
        step = _best_divider(shape.ow, 4, shape.ow, False)
    step = 1 if step > 256 else step
    nthr_mb, nthr = _pointwise_balance(shape, nb_ic, nb_oc, _div_up(spatial, step), step)
    pad = 0
    if nthr_mb > 1:
        pad += _book(oc * ic * (nthr_mb - 1) * FLOAT) + _barriers(1)
    if shape.bias:
        pad += _book(oc * FLOAT) if shape.oc % AVX512_BLOCK else 0
        pad += reducer_bytes(nthr, AVX512_BLOCK, nb_oc, shape.mb,
                             nthr * 3 * 5 * 5 * AVX512_BLOCK * AVX512_BLOCK)
    if shape.stride_h > 1 or shape.stride_w > 1:
        slices = _best_divider(nb_ic, 5, nb_ic, False)  # nb_bcast_blocking
        pad += _book(nthr * slices * spatial * AVX512_BLOCK * FLOAT)
    return WeightGradPlan("jit_1x1:avx512_core", shape.mb * ic * shape.ih * shape.iw * FLOAT,
                          shape.mb * oc * spatial * FLOAT, oc * ic * FLOAT, pad)


def _pointwise_balance(shape: ConvShape, nb_ic: int, nb_oc: int, nb_reduce: int,
                       step: int) -> tuple[int, int]:
    """jit_avx512_common_1x1_conv_kernel::balance (one group): the split of least memory
    traffic over the minibatch's spatial steps and the channel blocks (the last of equals).
    Returns (threads on the minibatch, threads)."""
    def memory(mb: int, ocb: int, icb: int) -> int:
        reads = _div_up(shape.mb * nb_reduce, mb) * step * AVX512_BLOCK
        weights = _div_up(nb_oc, ocb) * _div_up(nb_ic, icb) * AVX512_BLOCK * AVX512_BLOCK
        # (the source's strides already reduced to 1)
        return reads * _div_up(nb_ic, icb) + reads * _div_up(nb_oc, ocb) + 12 * weights

    best, least = (1, 1, 1), memory(1, 1, 1)
    for mb in range(1, min(shape.threads, shape.mb * nb_reduce) + 1):
        rest = shape.threads // mb
        for ocb in range(1, min(rest, nb_oc) + 1):
            split = (mb, ocb, min(rest // ocb, nb_ic))
            if memory(*split) <= least:
                best, least = split, memory(*split)
    mb = best[0]
    if shape.threads // 2 < mb < shape.threads:
        mb = min(shape.mb, shape.threads)
    return mb, mb * best[1] * best[2]


def _best_divider(value: int, least: int, most: int, find_max: bool) -> int:
    """jit_uni_1x1_conv_utils.hpp best_divider: the divider in [least, most] that leaves the
    smallest share of `value` rounded up to it (the largest of equals if `find_max`, else the
    smallest)."""
    most = max(1, min(most, value))
    least = max(1, min(least, most))
    best, chosen = float("inf"), most
    for divider in range(most, least - 1, -1):
        padded = _up(value, divider)
        loss = (padded - value) / padded
        if (find_max and loss < best) or (not find_max and loss <= best):
            best, chosen = loss, divider
    return chosen
