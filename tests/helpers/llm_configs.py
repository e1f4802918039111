"""Published Hugging Face config.json values, as dicts (no hub, no download).

Copied from each model's config.json on the Hugging Face hub (the keys that shape the model;
token ids and initializer ranges do not change a parameter or a byte). Tests build them on the
meta device (graphmem/frontends/torch/hf_config.py) and shrink them with `layers(config, n)`:
the real widths, fewer layers.
"""

from __future__ import annotations

from typing import Any

# meta-llama/Meta-Llama-3-8B: 8,030,261,248 parameters
LLAMA3_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_scaling": None, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 128256,
}
# meta-llama/Meta-Llama-3-70B: the same architecture, wider and deeper
LLAMA3_70B: dict[str, Any] = {
    **LLAMA3_8B, "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
    "num_hidden_layers": 80,
}
# mistralai/Mistral-7B-v0.1: 7,241,732,096 parameters
MISTRAL_7B: dict[str, Any] = {
    "architectures": ["MistralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 32000,
}
# mistralai/Mixtral-8x7B-v0.1: 46,702,792,704 parameters, 2 of 8 experts per token
MIXTRAL_8X7B: dict[str, Any] = {
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
    "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02, "sliding_window": None, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 32000,
}
# Qwen/Qwen2-0.5B: 494,032,768 parameters, the output head tied to the embedding
QWEN2_0_5B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu",
    "hidden_size": 896, "intermediate_size": 4864, "max_position_embeddings": 131072,
    "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
    "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 151936,
}
# google/gemma-2-9b: 42 layers, local (sliding 4096) and global attention alternating
GEMMA2_9B: dict[str, Any] = {
    "architectures": ["Gemma2ForCausalLM"], "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 3584, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "model_type": "gemma2", "num_attention_heads": 16, "num_hidden_layers": 42,
    "num_key_value_heads": 8, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0, "sliding_window": 4096, "torch_dtype": "float32",
    "vocab_size": 256000,
}
# deepseek-ai/DeepSeek-V2-Lite's attention (MLA: kv_lora_rank 512, qk_rope_head_dim 64) with
# every layer's MLP dense (first_k_dense_replace = the layers), as the issue shapes it
DEEPSEEK_V2_LITE_DENSE: dict[str, Any] = {
    "architectures": ["DeepseekV2ForCausalLM"], "first_k_dense_replace": 27,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 10944, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v2",
    "moe_intermediate_size": 1408, "n_routed_experts": 64, "num_attention_heads": 16,
    "num_hidden_layers": 27, "num_key_value_heads": 16, "q_lora_rank": None,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "torch_dtype": "bfloat16",
    "v_head_dim": 128, "vocab_size": 102400,
}
# a Jamba at toy widths: 8 layers, attention at layer 4 (period 8, offset 4), Mamba elsewhere
TINY_JAMBA: dict[str, Any] = {
    "architectures": ["JambaForCausalLM"], "attn_layer_offset": 4, "attn_layer_period": 8,
    "hidden_size": 64, "intermediate_size": 128, "mamba_d_conv": 4, "mamba_d_state": 16,
    "mamba_expand": 2, "max_position_embeddings": 4096, "model_type": "jamba",
    "num_attention_heads": 4, "num_experts": 1, "num_hidden_layers": 8,
    "num_key_value_heads": 2, "torch_dtype": "float32", "use_mamba_kernels": False,
    "vocab_size": 1000,
}
# a Llama of the same code at toy widths: fast enough to trace a training step in a test
TINY_LLAMA: dict[str, Any] = {
    **LLAMA3_8B, "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
    "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
    "max_position_embeddings": 512,
}


def layers(config: dict[str, Any], count: int) -> dict[str, Any]:
    """`config` with `count` decoder layers: the per-layer structure at the real widths."""
    return {**config, "num_hidden_layers": count}
