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


# ----- with transformers' default attention (SDPA), and two encoder-decoders ------------------
def bert_sdpa() -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    return BertForSequenceClassification(BertConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
        vocab_size=1000))


def vit_sdpa() -> nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    return ViTForImageClassification(ViTConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
        image_size=64, patch_size=8))


class EncoderDecoder(nn.Module):
    """A transformers encoder-decoder called with positional (encoder input, decoder ids),
    returning the logits: how graphmem passes example inputs."""

    def __init__(self, model: nn.Module, encoder_input: str) -> None:
        super().__init__()
        self.model = model
        self.encoder_input = encoder_input

    def forward(self, source: object, decoder_ids: object) -> object:
        kwargs = {self.encoder_input: source, "decoder_input_ids": decoder_ids}
        return self.model(**kwargs).logits


def t5() -> nn.Module:
    """T5 (relative position bias, 2+2 layers, 64 wide): inputs 4x64:int64, 4x32:int64."""
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(d_model=64, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
                      d_kv=16, vocab_size=1000)
    return EncoderDecoder(T5ForConditionalGeneration(config), "input_ids")


def whisper() -> nn.Module:
    """Whisper-style speech model (conv front end on 16 mel bins, 2+2 layers, 64 wide):
    inputs 4x16x64 (mel frames; the convs halve 64 to the 32 encoder positions), 4x32:int64."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=2,
                           encoder_attention_heads=4, decoder_attention_heads=4,
                           encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
                           max_source_positions=32, max_target_positions=64, vocab_size=1000,
                           pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           decoder_start_token_id=1)
    return EncoderDecoder(WhisperForConditionalGeneration(config), "input_features")
