"""nn.MultiheadAttention's fused inference kernel on the CPU, for the torch-cpu runtime model.

`_native_multi_head_attention` (the module's fast path: graphmem/frontends/torch/fast_paths.py)
makes its projections, scores and weights inside itself and frees them before it returns:
eager's live tensors after it are its output and the weights, while the allocator holds the
rest while it runs. Its sequence of allocations (+) and frees (-), as measured with
torch.profiler (torch 2.13, fp32; x [b, s, e], h heads, every size in bytes):

    +QKV   x @ W_in^T, [b*s, 3e]
    +Q'    _transform_bias_rescale_qkv: Q, K, V with their biases, Q scaled, [3, b, h, s, e/h]
    -QKV
    +S     Q @ K^T, the scores [b*h, s, s]
    with a mask: +M, the mask as bool (a key padding mask [b, s]: b*s B; any other, expanded
               to the scores: b*h*s*s B); +P, the masked softmax (out of place); -S; -M
               (without one the softmax runs in place: P is S)
    without the weights asked for: -P
    +C     the context P @ V (into Q's place), made contiguous [b, s, e]
    +Y     C @ W_out^T + b_out, the output [b, s, e]
    -C
    with the weights averaged over heads: +W [b, s, s], -P (not averaged: P is returned)
    -Q'

e.g. b 2, s 16, e 32, 4 heads, a key padding mask, the averaged weights (the zoo's
`nn_mha`): QKV = Q' = 2*16*96*4 = 12,288, S = P = 8*16*16*4 = 8,192, M = 32, C = Y = 4,096,
W = 2,048: the running peak 12,288 + 8,192 + 32 + 8,192 = 28,704 over Q' ... -> 28,704 -
6,144 returned = 22,560 B of scratch (measured 22,560); without the weights 24,608
(measured 24,608). Other dtypes (bf16's path converts through fp32) are not modelled.
"""

from __future__ import annotations

from graphmem.core.ir import Node
from graphmem.runtime_models.torch_cpu_native import Allocations, Dims, is_fp32, sizes_at

KEY_PADDING_MASK = 1  # mask_type: [b, s]; 0 (attn_mask [s, s]) and 2 (both) cover every score
STATISTICS_BYTES = 4  # layer norm's fp32 mean and rstd, one per token each


def native_multi_head_attention(node: Node, dims: Dims, threads: int) -> Allocations:
    """The kernel's allocations (module docstring) from the query [b, s, e] and the
    attributes the front end kept (frontends/torch/kernel_args.py)."""
    sizes = _sizes(node, dims)
    if sizes is None:
        return []
    need_weights = bool(node.attr_int("need_weights", 1))
    return _attention(sizes, node.attr_int("num_head", 1), node.attr_int("mask_type", -1),
                      need_weights,
                      need_weights and bool(node.attr_int("average_attn_weights", 1)))


def transformer_encoder_layer(node: Node, dims: Dims, threads: int) -> Allocations:
    """nn.TransformerEncoderLayer's fused kernel (`_transformer_encoder_layer_fwd`): the
    attention above without its weights (its output A), then, with N(x) a layer norm's
    output [b, s, e] and its mean and rstd (+N, +4bs, +4bs, -4bs, -4bs), H the first linear's
    output [b, s, f] (the activation in place) and O the second's [b, s, e] (each residual
    added in place):
        post-norm: attention, +N1, -A, +H, +O, -H, +N2, -O, -N1
        pre-norm:  +N1, attention on N1, -N1, +N2, +H, +O, -H, -N2, -A
    e.g. b 2, s 16, e 32, f 64, 4 heads, a key padding mask, post-norm: the attention's
    peak 28,704 B is the layer's (measured 24,608 B over the 4,096 returned: 28,704)."""
    sizes = _sizes(node, dims)
    if sizes is None:
        return []
    b, s, e, item = sizes
    hidden = b * s * node.attr_int("ffn_width", 0) * item
    attention = _attention(sizes, node.attr_int("num_head", 1),
                           node.attr_int("mask_type", -1), False, False)
    tokens, stats = b * s * e * item, b * s * STATISTICS_BYTES
    norm = [tokens, stats, stats, -stats, -stats]
    if node.attr_int("norm_first", 0):
        return [*norm, *attention, -tokens, *norm, hidden, tokens, -hidden, -tokens, -tokens]
    return [*attention, *norm, -tokens, hidden, tokens, -hidden, *norm, -tokens, -tokens]


def _sizes(node: Node, dims: Dims) -> tuple[int, int, int, int] | None:
    """b, s, e and the element's bytes of the query [b, s, e] (fp32 only: module docstring)."""
    query = node.inputs[0] if node.inputs else None
    if query is None or query.shape is None or len(query.shape) != 3 or not is_fp32(query):
        return None
    b, s, e = sizes_at(query, dims)
    return b, s, e, query.dtype.bits // 8


def _attention(sizes: tuple[int, int, int, int], heads: int, mask_type: int,
               need_weights: bool, averaged: bool) -> Allocations:
    b, s, e, item = sizes
    projected = b * s * 3 * e * item  # QKV, and Q' alike
    scores = b * heads * s * s * item
    context = b * s * e * item  # C, and Y alike
    steps = [projected, projected, -projected, scores]
    if mask_type >= 0:
        mask = b * s if mask_type == KEY_PADDING_MASK else b * heads * s * s
        steps += [mask, scores, -scores, -mask]
    steps += [] if need_weights else [-scores]
    steps += [context, context, -context]
    steps += [b * s * s * item, -scores] if averaged else []
    return [*steps, -projected]
