"""Fused attention: ONNX Attention (opset 23) and ORT's com.microsoft fusions.

One formula for all of them, as FlopCounterMode's scaled-dot-product-attention formula:
    Q [b, h, s, dq] @ K^T [b, h, dq, l] -> scores [b, h, s, l]: b*h*s*l*dq MACs = l * numel(Q)
    P [b, h, s, l] @ V [b, h, l, dv]    -> out [b, h, s, dv]:   b*h*s*l*dv MACs = l * numel(out)
FLOPs = 2 * MACs + the softmax and the 1/sqrt(d) scale on each of the b*h*s*l scores
(FlopCounterMode counts only the two matmuls). Masking and causality are not subtracted: the
kernels that skip masked blocks are an optimisation, the arithmetic defined is the full one.
com.microsoft Attention also projects its input to Q, K, V with one weight: + those MACs.

The backward of attention (PyTorch's fused kernels' `*_backward` ops: graphmem/ops/aten.py
maps them) is the gradient arithmetic, the four matmuls of the math backend's backward:
    dP = dO @ V^T and dV = P^T @ dO: b*h*s*l*dv MACs each = l * numel(out)
    dQ = dS @ K   and dK = dS^T @ Q: b*h*s*l*dq MACs each = l * numel(Q)
so twice the forward's MACs, + the softmax backward and the scale on each score. The fused
kernels also recompute P from Q, K and the saved logsumexp (FlopCounterMode's
sdpa_backward_flop_count counts that fifth matmul); like skipping masked blocks, that is how
a kernel computes, not what it computes: the same step costs the same on every backend.
"""

from __future__ import annotations

from graphmem.core.ir import Node, Value
from graphmem.core.symbolic import SymInt, product
from graphmem.ops.normalization import (
    AFFINE_FLOPS,
    NORMALIZE_FLOPS,
    SOFTMAX_BACKWARD_FLOPS,
    SOFTMAX_FLOPS_PER_ELEMENT,
)
from graphmem.ops.registry import (
    OpCost,
    ShapeUnknownError,
    input_numel,
    known_dim,
    known_rank,
    output_numel,
    register,
)

MS_DOMAIN = "com.microsoft"
SCORE_FLOPS = SOFTMAX_FLOPS_PER_ELEMENT + 1  # softmax, and the scale by 1/sqrt(d)
SCORE_BACKWARD_FLOPS = SOFTMAX_BACKWARD_FLOPS + 1  # softmax's backward, and the scale


def attention_cost(
    query_numel: SymInt, output_numel: SymInt, query_rows: SymInt, key_length: SymInt
) -> OpCost:
    """query_rows = b*h*s, the rows of the score matrix; key_length = l (past included)."""
    macs = key_length * (query_numel + output_numel)
    return OpCost.from_macs(macs) + OpCost.from_flops(query_rows * key_length * SCORE_FLOPS)


def attention_backward_cost(
    query_numel: SymInt, output_numel: SymInt, query_rows: SymInt, key_length: SymInt
) -> OpCost:
    """The gradients of Q, K and V (module docstring): 2 * l * (numel(Q) + numel(out)) MACs,
    and SCORE_BACKWARD_FLOPS per score of the b*h*s x l score matrix."""
    macs = key_length * (query_numel + output_numel) * 2
    return (OpCost.from_macs(macs)
            + OpCost.from_flops(query_rows * key_length * SCORE_BACKWARD_FLOPS))


def self_attention_layer_cost(tokens: SymInt, width: SymInt, heads: SymInt,
                              key_length: SymInt) -> OpCost:
    """PyTorch's fused self-attention (`_native_multi_head_attention`, nn.MultiheadAttention's
    fast path): x [b, s, e] projected by one packed weight to Q, K, V, attention over l = s
    keys in h heads, the context projected out:
        x [b*s, e] @ W_in^T [e, 3e]  -> QKV: b*s*e*3e MACs
        attention: l * (numel(Q) + numel(out)) = l * 2*b*s*e MACs, softmax and scale per score
        ctx [b*s, e] @ W_out^T [e, e] -> out: b*s*e*e MACs
    the matmuls of its Python path, which FlopCounterMode counts (the biases' adds aside, as
    FlopCounterMode's addmm)."""
    projections = OpCost.from_macs(tokens * width * width * 4)
    return projections + attention_cost(tokens * width, tokens * width, tokens * heads,
                                        key_length)


# a post- or pre-norm encoder layer's per-token elementwise work: two layer norms (statistics,
# apply, gamma and beta) and two residual adds
LAYER_NORM_FLOPS = NORMALIZE_FLOPS + 2 * AFFINE_FLOPS
ENCODER_LAYER_FLOPS_PER_ELEMENT = 2 * LAYER_NORM_FLOPS + 2


def encoder_layer_cost(tokens: SymInt, width: SymInt, heads: SymInt, key_length: SymInt,
                       ffn_width: SymInt, activation_flops: int) -> OpCost:
    """PyTorch's fused encoder layer (`_transformer_encoder_layer_fwd`,
    nn.TransformerEncoderLayer's fast path): self-attention over its s keys
    (self_attention_layer_cost), then the feed-forward block
        h [b*s, e] @ W_1^T [e, f] -> [b*s, f]: b*s*e*f MACs; the activation on each
        [b*s, f] @ W_2^T [f, e] -> [b*s, e]: b*s*f*e MACs
    and per [b*s, e] element two layer norms and two residual adds."""
    attention = self_attention_layer_cost(tokens, width, heads, key_length)
    return (attention + OpCost.from_macs(tokens * width * ffn_width * 2)
            + OpCost.from_flops(tokens * ffn_width * activation_flops
                                + tokens * width * ENCODER_LAYER_FLOPS_PER_ELEMENT))


def heads_attr(node: Node, name: str) -> SymInt:
    return SymInt.const(node.attr_int(name, 1))


def past_length(past: Value | None, axis: int, node: Node) -> SymInt:
    return SymInt() if past is None else known_dim(past, axis, node)


@register("Attention")
def onnx_attention(node: Node) -> OpCost:
    # Q [b, hq, s, dq] or [b, s, hq*dq]; K [b, hkv, l, dq] or [b, l, hkv*dq]; past_key (input
    # 4) [b, hkv, p, dq]. Grouped KV heads (hkv < hq) change the bytes, not the MACs.
    query = node.input(0)
    if known_rank(query, node) == 4:
        query_rows = product(known_dim(query, axis, node) for axis in (0, 1, 2))
    else:
        query_rows = known_dim(query, 0, node) * known_dim(query, 1, node)
        query_rows = query_rows * heads_attr(node, "q_num_heads")
    key = node.input(1)
    key_length = known_dim(key, 2 if known_rank(key, node) == 4 else 1, node)
    key_length = key_length + past_length(node.input(4), 2, node)
    return attention_cost(input_numel(node, 0), output_numel(node), query_rows, key_length)


def multi_head_key_length(node: Node) -> SymInt:
    # key [b, l, d], [b, h, l, dh] (BNSH), packed KV [b, l, h, 2, dh], or absent when the
    # query packs Q, K and V [b, s, h, 3, dh]; past_key (input 6) is [b, h, p, dh]
    key = node.input(1)
    if key is None:
        length = known_dim(node.input(0), 1, node)
    else:
        length = known_dim(key, 2 if known_rank(key, node) == 4 else 1, node)
    return length + past_length(node.input(6), 2, node)


@register("MultiHeadAttention", domain=MS_DOMAIN)
def multi_head_attention(node: Node) -> OpCost:
    # query [b, s, h*dq] or packed QKV [b, s, h, 3, dh] (its Q third); out [b, s, h*dv]
    query = node.input(0)
    query_numel = input_numel(node, 0)
    if known_rank(query, node) == 5:
        query_numel = query_numel.scaled(1, 3)
    tokens = known_dim(query, 0, node) * known_dim(query, 1, node)
    query_rows = tokens * heads_attr(node, "num_heads")
    key_length = multi_head_key_length(node)
    return attention_cost(query_numel, output_numel(node), query_rows, key_length)


@register("Attention", domain=MS_DOMAIN)
def microsoft_attention(node: Node) -> OpCost:
    # input [b, s, d_in] @ weights [d_in, dq + dk + dv] -> QKV: numel(input) * (dq+dk+dv) MACs
    # then attention over l = s + p keys, past (input 4) [2, b, h, p, dh]; out [b, s, dv]
    weights_width = known_dim(node.input(1), 1, node)
    projection = OpCost.from_macs(input_numel(node, 0) * weights_width)
    hidden_sizes = node.attr_ints("qkv_hidden_sizes")
    query_width = SymInt.const(hidden_sizes[0]) if hidden_sizes else weights_width.scaled(1, 3)
    tokens = known_dim(node.input(0), 0, node) * known_dim(node.input(0), 1, node)
    key_length = known_dim(node.input(0), 1, node) + past_length(node.input(4), 3, node)
    query_rows = tokens * heads_attr(node, "num_heads")
    attention = attention_cost(tokens * query_width, output_numel(node), query_rows, key_length)
    return projection + attention


@register("GroupQueryAttention", domain=MS_DOMAIN)
def group_query_attention(node: Node) -> OpCost:
    # query [b, s, h*dh] (or packed [b, s, (h + 2*hkv)*dh] with no key); out [b, s, h*dh]:
    # numel(Q) = numel(out). Keys: key [b, l, hkv*dh] (or s when packed) + past_key (input 3)
    # [b, hkv, p, dh]. A past buffer shared with present is sized to the maximum length: then
    # this is an upper bound (the kernel attends to total_sequence_length, a runtime value).
    query = node.input(0)
    key = node.input(1)
    tokens = known_dim(query, 0, node) * known_dim(query, 1, node)
    new_keys = known_dim(query if key is None else key, 1, node)
    key_length = new_keys + past_length(node.input(3), 2, node)
    query_rows = tokens * heads_attr(node, "num_heads")
    return attention_cost(output_numel(node), output_numel(node), query_rows, key_length)


@register("FlexAttention", domain="ai.onnx.preview")
def flex_attention(node: Node) -> OpCost:
    # Q [b, hq, s, d] @ K^T [b, hkv, d, l] -> softmax -> @ V [b, hkv, l, dv] -> [b, hq, s, dv]:
    # grouped KV heads change the bytes, not the MACs. A score_mod or prob_mod body makes the
    # node a flagged subgraph (graphmem/passes/costs.py): its body is not priced per score.
    query = node.input(0)
    query_rows = product(known_dim(query, axis, node) for axis in (0, 1, 2))
    key_length = known_dim(node.input(1), 2, node)
    return attention_cost(input_numel(node, 0), output_numel(node), query_rows, key_length)


# LinearAttention (opset 27): q [B, T, Hq*dk], k [B, T, Hkv*dk], v [B, T, Hkv*dv], the
# recurrent state S [B, Hkv, dk, dv] (present_state, output 1). Per token:
#   every KV head: S += k (x) v, an outer product added in: dk*dv MACs;
#   "delta" rules first read S^T k (dk*dv MACs), then v - that and beta * (.) (2 per dv);
#   "gated" rules decay the state, exp(g) * S: dk*dv multiplies, and one exp per decay value;
#   every query head: o = scale * q^T S: dk*dv MACs, and the scale, 1 per output element.
DELTA_FLOPS_PER_VALUE = 2  # v - S^T k, times beta


@register("LinearAttention")
def linear_attention(node: Node) -> OpCost:
    state = node.outputs[1] if len(node.outputs) > 1 else None
    query = node.input(0)
    tokens = known_dim(query, 0, node) * known_dim(query, 1, node)
    q_heads = heads_attr(node, "q_num_heads")
    kv_heads = heads_attr(node, "kv_num_heads")
    if int(kv_heads) <= 0 or int(q_heads) <= 0:
        raise ShapeUnknownError(f"{node.describe()}: q_num_heads and kv_num_heads must be > 0")
    if state is not None and state.shape_known:
        state_size = known_dim(state, 2, node) * known_dim(state, 3, node)  # dk * dv
        value_width = known_dim(state, 3, node)
    else:
        value_width = known_dim(node.input(2), 2, node).scaled(1, node.attr_int("kv_num_heads", 1))
        key_width = known_dim(node.input(1), 2, node).scaled(1, node.attr_int("kv_num_heads", 1))
        state_size = key_width * value_width
    rule = node.attr_str("update_rule", "gated_delta")
    delta = rule in ("delta", "gated_delta")
    gated = rule in ("gated", "gated_delta")
    macs = tokens * state_size * (kv_heads * (1 + delta) + q_heads)
    flops = output_numel(node)  # the scale
    if delta:
        flops = flops + tokens * kv_heads * value_width * DELTA_FLOPS_PER_VALUE
    if gated:
        decay = input_numel(node, 4) if node.input(4) is not None else tokens * kv_heads
        flops = flops + tokens * kv_heads * state_size + decay
    return OpCost.from_macs(macs) + OpCost.from_flops(flops)
