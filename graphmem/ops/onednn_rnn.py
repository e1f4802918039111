"""oneDNN's LSTM primitive as PyTorch runs it on an AVX-512 CPU (fp32): the sizes of its
workspace, its scratchpad and its copies of the weights, one layer and direction at a time
(aten.mkldnn_rnn_layer and its backward: aten/src/ATen/native/mkldnn/RNN.cpp, ideep's
operators/lstm.hpp). Read from oneDNN 3.12's sources (src/cpu/rnn/rnn_utils.hpp
`init_conf`, `set_workspace_sizes`; rnn_utils.cpp `set_offsets`, `get_good_ld`;
ref_rnn.cpp `init_scratchpad`; x64/rnn/rnn_brgemm_utils.cpp `configure_brgemm`,
`init_scratchpad`; common/memory_tracking.hpp `registry_t::book`) and checked against every
measured kernel (tests/test_onednn_rnn.py; `python benchmarks/cpu_scratch.py --lstm`).

One primitive is one layer (n_layer 1) and one direction (n_dir 1): T steps of a batch of B
rows, I inputs, H hidden units, G gates (4). Its buffers are regions of [rows x ld] floats,
each page-aligned (4,096 B), with ld a "good" leading dimension: rounded up to 16 floats (a
cache line), 16 more where that is a multiple of 256 (`get_good_ld`: no 4K aliasing).

Workspace (training only; the forward's output, saved for the backward), seven regions:
    gates           T x B x ld(G*H)
    ht              T x B x ld(H)
    states          2 x (T+1) x B x ld(max(I, H))      (the layer's input and output rows)
    cell states     2 x (T+1) x B x H
    diff states     2 x (T+1) x B x ld(max(I, H)), twice (layer and iteration)
    diff cells      2 x (T+1) x B x H
Scratchpad (the kernel's own, freed before it returns): the regions below, page-aligned as
one entry (+4,096 B of alignment), and four arrays of pointers (the weights' and the bias's:
3 x (8 + 128) + (32 + 128) = 568 B: 128 B of alignment each):
    training (PyTorch's reference kernel: oneDNN's brgemm one refuses fp32 training):
        gates   [T if merged else 1] x B x ld(G*H)   (merged: a backward, or B < 128)
        ht      B x ld(H);  diff ht  B x ld(H)
    inference (the brgemm kernel): the states and cell states above, the gates (merged
        when B is 1 and T > 1), ht; and its batch elements, 40 B each, per thread
        2 x (2 where I == H and not merged, else 1), + 128 B of alignment.
Weights: PyTorch holds them [G*H, I] (oneDNN's ldgoi); the forward reorders them to ldigo,
[I, ld(G*H)] (training) or brgemm's blocks of 32 outputs per gate, [I, G x H rounded up to
32] (inference); the backward to ldgoi with a good ld, [G*H, ld(I)] (a copy only where ld(I)
is not I), and makes its weight gradients [I, ld(G*H)] and its bias gradient [G*H] zeroed
apart. e.g. T 10, B 2, I = H = 16: workspace 8,192 + 6 x 4,096 = 32,768 B (measured 32,768);
training scratchpad gates 10 x 2 x 64 x 4 = 5,120 -> 8,192, ht 4,096, diff ht 4,096, + 4,096
+ 568 = 21,048 (measured 21,048).
"""

from __future__ import annotations

from dataclasses import dataclass

PAGE_BYTES = 4_096
FLOAT_BYTES = 4
CACHE_LINE_FLOATS = 16  # 64 B of fp32
ALIASING_FLOATS = 256  # a leading dimension of a multiple of 1 KiB floats aliases 4K pages
REGISTRY_ALIGNMENT_BYTES = 128  # memory_tracking's least alignment, added to every entry
# the weights' pointers (layer, iteration, projection: one 8 B pointer each) and the bias's
# (4 pointers' worth for an fp32 bias): each entry + 128 B of alignment
POINTER_ARRAYS_BYTES = 3 * (8 + REGISTRY_ALIGNMENT_BYTES) + (4 * 8 + REGISTRY_ALIGNMENT_BYTES)
BRGEMM_BATCH_ELEMENT_BYTES = 40  # brgemm_batch_element_t: two pointers, vpad, compensation
BRGEMM_OUTPUT_BLOCK = 32  # AVX-512 fp32: n_block = 2 x 16 floats (ldgOi32o)
MERGED_BATCH_LIMIT = 128  # the reference forward merges the input GEMM over steps below it


@dataclass(frozen=True)
class RnnLayer:
    """One layer and direction: T steps of B rows, I inputs, H hidden units, G gates."""

    steps: int
    batch: int
    inputs: int
    hidden: int
    gates: int = 4


def good_ld(floats: int) -> int:
    """oneDNN's leading dimension for `floats` fp32 columns (`get_good_ld`)."""
    ld = -(-floats // CACHE_LINE_FLOATS) * CACHE_LINE_FLOATS
    return ld + CACHE_LINE_FLOATS if ld % ALIASING_FLOATS == 0 else ld


def _pages(*region_bytes: int) -> int:
    """Regions laid out one after another, each starting on a page (`set_offsets`)."""
    return sum(-(-size // PAGE_BYTES) * PAGE_BYTES for size in region_bytes)


def _state_rows(layer: RnnLayer) -> int:
    return 2 * (layer.steps + 1) * layer.batch  # (n_layer + 1) x (n_iter + 1) x mb


def _states_bytes(layer: RnnLayer) -> tuple[int, int]:
    """The states (ld(max(I, H))) and the cell states (H) of every step, input and output."""
    rows = _state_rows(layer)
    return (rows * good_ld(max(layer.inputs, layer.hidden)) * FLOAT_BYTES,
            rows * layer.hidden * FLOAT_BYTES)


def workspace_bytes(layer: RnnLayer) -> int:
    """The training forward's workspace, saved for the backward (module docstring)."""
    steps, batch, hidden = layer.steps, layer.batch, layer.hidden
    gates = steps * batch * good_ld(layer.gates * hidden) * FLOAT_BYTES
    ht = steps * batch * good_ld(hidden) * FLOAT_BYTES
    states, cells = _states_bytes(layer)
    return _pages(gates, ht, states, cells, states, states, cells)


def _scratchpad(region_bytes: int) -> int:
    """The regions as one page-aligned entry, and the pointer arrays."""
    return region_bytes + PAGE_BYTES + POINTER_ARRAYS_BYTES


def training_scratchpad_bytes(layer: RnnLayer, backward: bool) -> int:
    """The reference kernel's scratchpad, forward (training) or backward."""
    merged = backward or layer.batch < MERGED_BATCH_LIMIT
    rows = (layer.steps if merged else 1) * layer.batch
    gates = rows * good_ld(layer.gates * layer.hidden) * FLOAT_BYTES
    ht = layer.batch * good_ld(layer.hidden) * FLOAT_BYTES
    return _scratchpad(_pages(gates, ht, ht))


def inference_scratchpad_bytes(layer: RnnLayer, threads: int) -> int:
    """The brgemm kernel's scratchpad (inference): the states live in it, not in a
    workspace, and each thread has its GEMM batch."""
    merged = layer.batch == 1 and layer.steps > 1
    states, cells = _states_bytes(layer)
    rows = (layer.steps if merged else 1) * layer.batch
    gates = rows * good_ld(layer.gates * layer.hidden) * FLOAT_BYTES
    ht = layer.batch * good_ld(layer.hidden) * FLOAT_BYTES
    fused = layer.inputs == layer.hidden and not merged
    batch_elements = threads * 2 * (2 if fused else 1)  # max(K blocks + 1) = 2 per GEMM
    return (_scratchpad(_pages(states, cells, gates, ht))
            + batch_elements * BRGEMM_BATCH_ELEMENT_BYTES + REGISTRY_ALIGNMENT_BYTES)


def forward_weight_bytes(layer: RnnLayer, training: bool) -> tuple[int, int]:
    """The forward's copies of the input and recurrent weights (module docstring)."""
    if training:
        columns = good_ld(layer.gates * layer.hidden)
    else:
        block = BRGEMM_OUTPUT_BLOCK
        columns = layer.gates * (-(-layer.hidden // block) * block)
    return (layer.inputs * columns * FLOAT_BYTES, layer.hidden * columns * FLOAT_BYTES)


def backward_weight_bytes(layer: RnnLayer) -> tuple[int, int]:
    """The backward's copies of the input and recurrent weights in ldgoi with a good ld,
    [G*H, ld(K)] (0 where ld(K) is K: the weights' own layout)."""
    rows = layer.gates * layer.hidden

    def copy(columns: int) -> int:
        return 0 if good_ld(columns) == columns else rows * good_ld(columns) * FLOAT_BYTES

    return copy(layer.inputs), copy(layer.hidden)


def weight_gradient_bytes(layer: RnnLayer) -> tuple[int, int, int]:
    """The backward's zeroed gradients of the input and recurrent weights, [K, ld(G*H)],
    and of the bias, [G*H], before they are copied into PyTorch's."""
    columns = good_ld(layer.gates * layer.hidden)
    return (layer.inputs * columns * FLOAT_BYTES, layer.hidden * columns * FLOAT_BYTES,
            layer.gates * layer.hidden * FLOAT_BYTES)
