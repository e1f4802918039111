"""Hugging Face transformers built from small configs with random weights (no hub download).

Used by tests/test_hf_models.py and benchmarks/torch_accuracy.py when transformers is
installed; `attn_implementation` is left to transformers' default (SDPA) unless named.
"""

from __future__ import annotations

from torch import nn


def gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000,
                                      n_positions=256))


def llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=128,
                                        num_attention_heads=4, num_key_value_heads=2,
                                        intermediate_size=256, vocab_size=1000))


def bert() -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    return BertForSequenceClassification(BertConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
        vocab_size=1000, attn_implementation="eager"))


def vit() -> nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    return ViTForImageClassification(ViTConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
        image_size=64, patch_size=8, attn_implementation="eager"))
