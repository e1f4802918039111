"""Decoders whose caches tests/test_zoo_kv.py and benchmarks/zoo_kv.py check at layer patterns
of their own: Qwen3-Next's gated delta-net layers (3 of 4), Llama-4's chunked attention (3 of 4),
MiniMax's lightning (linear) attention. The zoo (tests/zoo_models.py) builds the same
architectures at 2 layers; the tests' working assumes these patterns, so these come first.
Toy widths, as the zoo's."""

from __future__ import annotations

from tests.zoo_models import MEASURED_ONCE, MOE, ZOO, ZooModel, text

KV_MODELS: list[ZooModel] = [
    # 3 gated delta-net layers (2 key heads, 4 value heads, of 8; kernel 4) and 1 full
    ZooModel("qwen3_next", "moe", text(
        "Qwen3NextConfig", "Qwen3NextForCausalLM", num_hidden_layers=4, num_key_value_heads=2,
        head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=8, linear_conv_kernel_dim=4, full_attention_interval=4,
        num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=32, **MOE)),
    # chunked attention (chunks of 8) on 3 of 4 layers, as Llama-4 Scout's 3 of 4
    ZooModel("llama4", "moe", text(
        "Llama4TextConfig", "Llama4ForCausalLM", num_hidden_layers=4, num_key_value_heads=2,
        head_dim=8, attention_chunk_size=8, num_local_experts=2, intermediate_size_mlp=64,
        **MOE)),
    # a lightning-attention layer (4 heads of 8: a K^T V state per head) and a full one
    ZooModel("minimax", "moe", text(
        "MiniMaxConfig", "MiniMaxForCausalLM", num_key_value_heads=2, head_dim=8,
        num_local_experts=2, layer_types=["linear_attention", "full_attention"], **MOE)),
]


def kv_entry(name: str) -> ZooModel:
    """This file's entry of that name, else the zoo's."""
    return next(z for z in KV_MODELS + ZOO + MEASURED_ONCE if z.name == name)
