"""The op-coverage zoo: architectures at toy widths, from transformers configs (random
weights, no hub download, eager attention) and plain torch CNNs built by hand.

Each entry is (name, family, builder, example inputs); tests/test_zoo.py runs them through
graphmem and against FlopCounterMode and a real CPU step, docs/zoo.md holds the table.
Integer inputs are random ids below 100 (graphmem's verify runner), so vocabularies are 128.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from tests.torch_models.hf import EncoderDecoder
from tests.zoo_cnns import TinyMobileNet, TinyResNet, TinyUNet, TinyVGG
from tests.zoo_diffusers import (
    AUTOENCODER_KL,
    CONTROLNET,
    DIT,
    LATENTS,
    PIXELS,
    TEXT_STATES,
    TIMESTEPS,
    UNET,
)

IDS = "2x16:int64"
IMAGE = "2x3x32x32"
# a decoder or encoder at toy width: 2 layers, 32 wide, 4 heads (2 key/value heads)
TEXT: dict[str, Any] = {
    "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
    "intermediate_size": 64, "vocab_size": 128, "max_position_embeddings": 64,
    "attn_implementation": "eager",
}


@dataclass(frozen=True)
class ZooModel:
    name: str
    # decoder, encoder, encoder-decoder, vision, speech, multimodal, moe, ssm, cnn, diffusion,
    # audio (generation)
    family: str
    build: Callable[[], nn.Module]
    inputs: tuple[str, ...] = (IDS,)
    # the training loss by its --loss name (graphmem/core/conventions.py Loss); None: the
    # default cross-entropy
    loss: str | None = None


class Logits(nn.Module):
    """A transformers model called with keyword inputs, returning the one tensor the loss
    reads (`logits`, or the named output)."""

    def __init__(self, model: nn.Module, names: tuple[str, ...], output: str = "logits"
                 ) -> None:
        super().__init__()
        self.model = model
        self.names = names
        self.output = output

    def forward(self, *args: object) -> object:
        return getattr(self.model(**dict(zip(self.names, args, strict=True))), self.output)


def hf(config_name: str, model_name: str, **config: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers

        return getattr(transformers, model_name)(getattr(transformers, config_name)(**config))

    return build


def text(config_name: str, model_name: str, **overrides: Any) -> Callable[[], nn.Module]:
    return hf(config_name, model_name, **{**TEXT, **overrides})


def seq2seq(config_name: str, model_name: str, source: str = "input_ids",
            **config: Any) -> Callable[[], nn.Module]:
    make = hf(config_name, model_name, **config)
    return lambda: EncoderDecoder(make(), source)


def wrapped(make: Callable[[], nn.Module], names: tuple[str, ...], output: str = "logits"
            ) -> Callable[[], nn.Module]:
    return lambda: Logits(make(), names, output)


BART_LIKE: dict[str, Any] = {
    "d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 4,
    "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
    "vocab_size": 128, "max_position_embeddings": 64, "attn_implementation": "eager",
    "pad_token_id": 1, "decoder_start_token_id": 2,
}
# DeBERTa's disentangled attention: content-to-position and position-to-content gathers
RELATIVE: dict[str, Any] = {"relative_attention": True, "pos_att_type": ["p2c", "c2p"],
                            "max_relative_positions": 16}
VIT_LIKE: dict[str, Any] = {
    "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
    "intermediate_size": 64, "image_size": 32, "patch_size": 8,
    "attn_implementation": "eager",
}
STAGES: dict[str, Any] = {"num_stages": 2, "depths": [1, 1], "hidden_sizes": [8, 16]}
SSM: dict[str, Any] = {"hidden_size": 32, "num_hidden_layers": 2, "vocab_size": 128,
                       "state_size": 8}
# a two-tower model's text and vision encoders (CLIP, SigLIP, BLIP): 1 layer each
TOWER: dict[str, Any] = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                         "intermediate_size": 64}
TOWER_TEXT: dict[str, Any] = {**TOWER, "vocab_size": 128}
TOWER_VISION: dict[str, Any] = {**TOWER, "image_size": 32, "patch_size": 8}
# a mixture of experts at toy width: 4 experts, 2 per token, transformers' eager expert loop
MOE: dict[str, Any] = {"num_experts_per_tok": 2, "experts_implementation": "eager"}
# DeepSeek's multi-head latent attention: queries and keys/values through low-rank latents,
# a rotary part and a plain part per head; 4 routed experts and a shared one, layer 0 dense
MLA: dict[str, Any] = {
    "num_key_value_heads": 4, "kv_lora_rank": 16, "qk_rope_head_dim": 4,
    "qk_nope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 4, "moe_intermediate_size": 32,
    "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, **MOE,
}
# a Mamba-2 mixer at toy width (8 heads of 8, one group, chunks of 8) for the hybrids
MAMBA2_MIXER: dict[str, Any] = {"mamba_d_state": 8, "mamba_n_groups": 1,
                                "mamba_chunk_size": 8}
AUDIO_LIKE: dict[str, Any] = {
    "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "intermediate_size": 64, "conv_dim": (16, 16), "conv_stride": (5, 2),
    "conv_kernel": (10, 3), "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4,
    "vocab_size": 32, "mask_time_prob": 0.0, "layerdrop": 0.0,
}


FIRST_ROUND: list[ZooModel] = [
    # decoders
    ZooModel("gpt2", "decoder", text("GPT2Config", "GPT2LMHeadModel", n_inner=64)),
    ZooModel("llama", "decoder", text("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2)),
    ZooModel("mistral", "decoder", text("MistralConfig", "MistralForCausalLM",
                                        num_key_value_heads=2, head_dim=8)),
    ZooModel("qwen2", "decoder", text("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2)),
    ZooModel("qwen3", "decoder", text("Qwen3Config", "Qwen3ForCausalLM", num_key_value_heads=2,
                                      head_dim=8)),
    ZooModel("gemma", "decoder", text("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=2,
                                      head_dim=8)),
    ZooModel("gemma2", "decoder", text("Gemma2Config", "Gemma2ForCausalLM",
                                       num_key_value_heads=2, head_dim=8)),
    ZooModel("phi", "decoder", text("PhiConfig", "PhiForCausalLM")),
    ZooModel("phi3", "decoder", text("Phi3Config", "Phi3ForCausalLM", num_key_value_heads=2,
                                     pad_token_id=0)),
    ZooModel("falcon", "decoder", text("FalconConfig", "FalconForCausalLM")),
    ZooModel("gpt_neox", "decoder", text("GPTNeoXConfig", "GPTNeoXForCausalLM")),
    ZooModel("opt", "decoder", text("OPTConfig", "OPTForCausalLM", ffn_dim=64,
                                    word_embed_proj_dim=32)),
    ZooModel("bloom", "decoder", text("BloomConfig", "BloomForCausalLM")),
    ZooModel("gptj", "decoder", text("GPTJConfig", "GPTJForCausalLM", rotary_dim=4)),
    ZooModel("starcoder2", "decoder", text("Starcoder2Config", "Starcoder2ForCausalLM",
                                           num_key_value_heads=2)),
    ZooModel("olmo", "decoder", text("OlmoConfig", "OlmoForCausalLM")),
    ZooModel("stablelm", "decoder", text("StableLmConfig", "StableLmForCausalLM",
                                         num_key_value_heads=2)),
    ZooModel("codegen", "decoder", text("CodeGenConfig", "CodeGenForCausalLM", rotary_dim=4,
                                        n_ctx=64)),
    # encoders
    ZooModel("bert", "encoder", text("BertConfig", "BertForMaskedLM")),
    ZooModel("roberta", "encoder", text("RobertaConfig", "RobertaForMaskedLM",
                                        max_position_embeddings=72)),
    ZooModel("distilbert", "encoder", text("DistilBertConfig", "DistilBertForMaskedLM",
                                           n_layers=2, dim=32, n_heads=4, hidden_dim=64)),
    ZooModel("albert", "encoder", text("AlbertConfig", "AlbertForMaskedLM", embedding_size=16)),
    ZooModel("electra", "encoder", text("ElectraConfig", "ElectraForMaskedLM",
                                        embedding_size=16)),
    ZooModel("deberta", "encoder", text("DebertaConfig", "DebertaForMaskedLM", **RELATIVE)),
    ZooModel("deberta_v2", "encoder", text("DebertaV2Config", "DebertaV2ForMaskedLM",
                                           **RELATIVE)),
    ZooModel("mpnet", "encoder", text("MPNetConfig", "MPNetForMaskedLM",
                                      max_position_embeddings=72)),
    ZooModel("convbert", "encoder", text("ConvBertConfig", "ConvBertForMaskedLM",
                                         embedding_size=32)),
    ZooModel("xlm_roberta", "encoder", text("XLMRobertaConfig", "XLMRobertaForMaskedLM",
                                            max_position_embeddings=72)),
    # encoder-decoders (positional source, decoder ids)
    ZooModel("t5", "encoder-decoder", seq2seq(
        "T5Config", "T5ForConditionalGeneration", d_model=32, d_ff=64, num_layers=1,
        num_decoder_layers=1, num_heads=4, d_kv=8, vocab_size=128,
        attn_implementation="eager"), (IDS, IDS)),
    ZooModel("bart", "encoder-decoder", seq2seq(
        "BartConfig", "BartForConditionalGeneration", **BART_LIKE), (IDS, IDS)),
    ZooModel("mbart", "encoder-decoder", seq2seq(
        "MBartConfig", "MBartForConditionalGeneration", **BART_LIKE), (IDS, IDS)),
    ZooModel("pegasus", "encoder-decoder", seq2seq(
        "PegasusConfig", "PegasusForConditionalGeneration", **BART_LIKE), (IDS, IDS)),
    ZooModel("marian", "encoder-decoder", seq2seq(
        "MarianConfig", "MarianMTModel", **{**BART_LIKE, "decoder_vocab_size": 128}),
        (IDS, IDS)),
    # vision
    ZooModel("vit", "vision", hf("ViTConfig", "ViTForImageClassification", **VIT_LIKE),
             (IMAGE,)),
    ZooModel("deit", "vision", hf("DeiTConfig", "DeiTForImageClassification", **VIT_LIKE),
             (IMAGE,)),
    ZooModel("beit", "vision", hf("BeitConfig", "BeitForImageClassification", **VIT_LIKE),
             (IMAGE,)),
    ZooModel("dinov2", "vision", hf("Dinov2Config", "Dinov2Model", **VIT_LIKE), (IMAGE,)),
    ZooModel("swin", "vision", hf("SwinConfig", "SwinForImageClassification", image_size=32,
                                  patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4],
                                  window_size=4, attn_implementation="eager"), (IMAGE,)),
    ZooModel("convnext", "vision", hf("ConvNextConfig", "ConvNextForImageClassification",
                                      **STAGES), (IMAGE,)),
    ZooModel("convnextv2", "vision", hf("ConvNextV2Config",
                                        "ConvNextV2ForImageClassification", **STAGES),
             (IMAGE,)),
    ZooModel("resnet", "vision", hf("ResNetConfig", "ResNetForImageClassification",
                                    embedding_size=8, **STAGES), (IMAGE,)),
    ZooModel("regnet", "vision", hf("RegNetConfig", "RegNetForImageClassification",
                                    embedding_size=8, depths=[1, 1], hidden_sizes=[8, 16],
                                    groups_width=8), (IMAGE,)),
    ZooModel("mobilevit", "vision", hf("MobileViTConfig", "MobileViTForImageClassification",
                                       image_size=32, hidden_sizes=[16, 16, 16],
                                       neck_hidden_sizes=[8, 8, 8, 8, 8, 8, 16]), (IMAGE,)),
    ZooModel("segformer", "vision", hf("SegformerConfig",
                                       "SegformerForSemanticSegmentation",
                                       num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                       hidden_sizes=[8, 16], num_attention_heads=[1, 2],
                                       decoder_hidden_size=16, patch_sizes=[7, 3],
                                       strides=[4, 2], attn_implementation="eager"),
             (IMAGE,)),
    # speech
    ZooModel("whisper", "speech", seq2seq(
        "WhisperConfig", "WhisperForConditionalGeneration", "input_features", d_model=32,
        encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
        max_source_positions=16, max_target_positions=64, vocab_size=128, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
        attn_implementation="eager"), ("2x16x32", IDS)),
    ZooModel("wav2vec2", "speech", hf(
        "Wav2Vec2Config", "Wav2Vec2ForCTC", hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
        conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
        vocab_size=32, mask_time_prob=0.0, layerdrop=0.0, attn_implementation="eager"),
        ("2x400",)),
    ZooModel("hubert", "speech", hf(
        "HubertConfig", "HubertForCTC", hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
        conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
        vocab_size=32, mask_time_prob=0.0, layerdrop=0.0, attn_implementation="eager"),
        ("2x400",)),
    # multimodal
    ZooModel("clip", "multimodal", wrapped(hf(
        "CLIPConfig", "CLIPModel",
        text_config=TOWER_TEXT, vision_config=TOWER_VISION,
        projection_dim=16, attn_implementation="eager"),
        ("input_ids", "pixel_values"), "logits_per_image"), (IDS, IMAGE)),
    ZooModel("siglip", "multimodal", wrapped(hf(
        "SiglipConfig", "SiglipModel",
        text_config={**TOWER_TEXT, "max_position_embeddings": 16},
        vision_config=TOWER_VISION,
        attn_implementation="eager"),
        ("input_ids", "pixel_values"), "logits_per_image"), (IDS, IMAGE)),
    # mixture of experts
    ZooModel("mixtral", "moe", text("MixtralConfig", "MixtralForCausalLM",
                                    num_key_value_heads=2, num_local_experts=4,
                                    num_experts_per_tok=2, experts_implementation="eager")),
    ZooModel("qwen2_moe", "moe", text("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                                      num_key_value_heads=2, num_experts=4,
                                      num_experts_per_tok=2, moe_intermediate_size=32,
                                      shared_expert_intermediate_size=32,
                                      experts_implementation="eager")),
    # state-space and hybrid
    ZooModel("mamba", "ssm", hf("MambaConfig", "MambaForCausalLM", **SSM)),
    ZooModel("mamba2", "ssm", hf("Mamba2Config", "Mamba2ForCausalLM", hidden_size=32,
                                 num_hidden_layers=2, vocab_size=128, state_size=8,
                                 num_heads=8, head_dim=8, n_groups=1, chunk_size=8)),
    ZooModel("falcon_mamba", "ssm", hf("FalconMambaConfig", "FalconMambaForCausalLM", **SSM)),
    ZooModel("jamba", "ssm", text("JambaConfig", "JambaForCausalLM", num_key_value_heads=2,
                                  num_experts=4, num_experts_per_tok=2, attn_layer_period=2,
                                  attn_layer_offset=1, expert_layer_period=2,
                                  expert_layer_offset=1, mamba_d_state=8,
                                  use_mamba_kernels=False, experts_implementation="eager")),
    ZooModel("rwkv", "ssm", hf("RwkvConfig", "RwkvForCausalLM", hidden_size=32,
                               num_hidden_layers=2, vocab_size=128, attention_hidden_size=32,
                               intermediate_size=64, context_length=64)),
    # plain torch CNNs
    ZooModel("tiny_resnet", "cnn", TinyResNet, (IMAGE,)),
    ZooModel("tiny_vgg", "cnn", TinyVGG, (IMAGE,)),
    ZooModel("tiny_mobilenet", "cnn", TinyMobileNet, (IMAGE,)),
    ZooModel("tiny_unet", "cnn", TinyUNet, (IMAGE,)),
]
# The second round: architectures chosen for mechanisms the first did not have (docs/zoo.md)
SECOND_ROUND: list[ZooModel] = [
    # mixtures of experts: latent attention, sinks, sparse mixers
    ZooModel("deepseek_v3", "moe", text("DeepseekV3Config", "DeepseekV3ForCausalLM",
                                        q_lora_rank=16, **MLA)),
    ZooModel("deepseek_v2", "moe", text("DeepseekV2Config", "DeepseekV2ForCausalLM",
                                        q_lora_rank=None, **MLA)),
    ZooModel("qwen3_moe", "moe", text("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                                      num_key_value_heads=2, head_dim=8, num_experts=4,
                                      moe_intermediate_size=32, **MOE)),
    ZooModel("gpt_oss", "moe", text("GptOssConfig", "GptOssForCausalLM", num_key_value_heads=2,
                                    head_dim=8, num_local_experts=4, sliding_window=8, **MOE)),
    ZooModel("phimoe", "moe", text("PhimoeConfig", "PhimoeForCausalLM", num_key_value_heads=2,
                                   num_local_experts=4, **MOE)),
    # decoders: a sliding-window pattern, multi-query
    ZooModel("gemma3", "decoder", text("Gemma3TextConfig", "Gemma3ForCausalLM",
                                       num_key_value_heads=2, head_dim=8, sliding_window=8,
                                       sliding_window_pattern=2)),
    ZooModel("gpt_bigcode", "decoder", text("GPTBigCodeConfig", "GPTBigCodeForCausalLM",
                                            n_inner=64)),
    # recurrent and hybrid: RG-LRU, Mamba-2 beside attention, short convolutions
    ZooModel("recurrent_gemma", "ssm", text(
        "RecurrentGemmaConfig", "RecurrentGemmaForCausalLM", num_key_value_heads=2,
        lru_width=32, attention_window_size=8, block_types=["recurrent", "attention"])),
    ZooModel("zamba2", "ssm", text(
        "Zamba2Config", "Zamba2ForCausalLM", **MAMBA2_MIXER, num_key_value_heads=4,
        mamba_headdim=8, n_mamba_heads=8, chunk_size=8, use_mem_eff_path=False,
        num_mem_blocks=1, layers_block_type=["mamba", "hybrid"])),
    ZooModel("bamba", "ssm", text("BambaConfig", "BambaForCausalLM", **MAMBA2_MIXER,
                                  num_key_value_heads=2, mamba_d_head=8, mamba_n_heads=8,
                                  attn_layer_indices=[1])),
    ZooModel("falcon_h1", "ssm", text("FalconH1Config", "FalconH1ForCausalLM", **MAMBA2_MIXER,
                                      num_key_value_heads=2, mamba_d_head=8,
                                      mamba_n_heads=8, head_dim=8, mamba_d_ssm=64)),
    ZooModel("lfm2", "ssm", text("Lfm2Config", "Lfm2ForCausalLM", num_key_value_heads=2,
                                 layer_types=["conv", "full_attention"])),
    # encoders: local and global attention, sliding chunks, block-sparse, pooling
    ZooModel("modernbert", "encoder", text(
        "ModernBertConfig", "ModernBertForMaskedLM", global_attn_every_n_layers=2,
        local_attention=8, pad_token_id=0, eos_token_id=1, bos_token_id=2, cls_token_id=2,
        sep_token_id=1)),
    ZooModel("longformer", "encoder", text("LongformerConfig", "LongformerForMaskedLM",
                                           attention_window=4, max_position_embeddings=72)),
    ZooModel("big_bird", "encoder", text("BigBirdConfig", "BigBirdForMaskedLM",
                                         attention_type="block_sparse", block_size=2,
                                         num_random_blocks=1)),
    ZooModel("funnel", "encoder", hf("FunnelConfig", "FunnelForMaskedLM", block_sizes=[1, 1],
                                     d_model=32, n_head=4, d_head=8, d_inner=64,
                                     vocab_size=128, num_decoder_layers=1)),
    # encoder-decoders: transient-global attention
    ZooModel("longt5", "encoder-decoder", seq2seq(
        "LongT5Config", "LongT5ForConditionalGeneration", d_model=32, d_ff=64, num_layers=1,
        num_decoder_layers=1, num_heads=4, d_kv=8, vocab_size=128, local_radius=4,
        encoder_attention_type="transient-global", global_block_size=4), (IDS, IDS)),
    # vision: masked pretraining, detection tokens, continuous position bias
    ZooModel("vit_mae", "vision", hf(
        "ViTMAEConfig", "ViTMAEForPreTraining", **VIT_LIKE, decoder_hidden_size=32,
        decoder_num_hidden_layers=1, decoder_num_attention_heads=4,
        decoder_intermediate_size=64), (IMAGE,)),
    ZooModel("yolos", "vision", wrapped(hf(
        "YolosConfig", "YolosForObjectDetection", **{**VIT_LIKE, "image_size": [32, 32]},
        num_detection_tokens=4), ("pixel_values",)), (IMAGE,)),
    ZooModel("swinv2", "vision", hf(
        "Swinv2Config", "Swinv2ForImageClassification", image_size=32, patch_size=4,
        embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4,
        attn_implementation="eager"), (IMAGE,)),
    # speech: conformer blocks
    ZooModel("wav2vec2_conformer", "speech", hf(
        "Wav2Vec2ConformerConfig", "Wav2Vec2ConformerForCTC", **AUDIO_LIKE,
        conv_depthwise_kernel_size=3, position_embeddings_type="relative"), ("2x400",)),
    # multimodal: latent cross-attention over any input
    ZooModel("perceiver", "multimodal", wrapped(hf(
        "PerceiverConfig", "PerceiverForMaskedLM", num_latents=8, d_latents=32, d_model=32,
        num_blocks=1, num_self_attends_per_block=1, num_self_attention_heads=4,
        num_cross_attention_heads=4, vocab_size=128, max_position_embeddings=16),
        ("inputs",)), (IDS,)),
]
# Measured once with the second round, every check passing (docs/zoo.md has their rows), and
# left out of the suite for its time (DBRX: fused experts, Cohere-2 and GPT-Neo: sliding and
# local layers, Nemotron: squared ReLU, XLNet: two-stream attention, LED: a Longformer
# encoder, LeViT, SpeechT5; then near kin of rows above). benchmarks/zoo_table.py runs them
MEASURED_ONCE: list[ZooModel] = [
    # DBRX's config leaves rope_theta and clip_qkv unset where its attention reads them
    ZooModel("dbrx", "moe", hf(
        "DbrxConfig", "DbrxForCausalLM", d_model=32, n_heads=4, n_layers=2, max_seq_len=64,
        vocab_size=128, attn_config={"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
        ffn_config={"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2},
        attn_implementation="eager", experts_implementation="eager")),
    ZooModel("cohere2", "decoder", text("Cohere2Config", "Cohere2ForCausalLM",
                                        num_key_value_heads=2, sliding_window=8)),
    ZooModel("nemotron", "decoder", text("NemotronConfig", "NemotronForCausalLM",
                                         num_key_value_heads=2)),
    ZooModel("gpt_neo", "decoder", text("GPTNeoConfig", "GPTNeoForCausalLM",
                                        attention_types=[[["global", "local"], 1]],
                                        window_size=8)),
    ZooModel("xlnet", "encoder", hf("XLNetConfig", "XLNetLMHeadModel", d_model=32, n_layer=2,
                                    n_head=4, d_inner=64, vocab_size=128)),
    ZooModel("led", "encoder-decoder", seq2seq(
        "LEDConfig", "LEDForConditionalGeneration", **BART_LIKE,
        max_encoder_position_embeddings=64, max_decoder_position_embeddings=64,
        attention_window=4), (IDS, IDS)),
    ZooModel("levit", "vision", hf(
        "LevitConfig", "LevitForImageClassification", image_size=32, hidden_sizes=[16, 32, 48],
        num_attention_heads=[1, 2, 3], depths=[1, 1, 1], key_dim=[8, 8, 8], patch_size=16),
        (IMAGE,)),
    ZooModel("speecht5", "speech", seq2seq(
        "SpeechT5Config", "SpeechT5ForSpeechToText", "input_values", hidden_size=32,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4, mask_time_prob=0.0, encoder_layers=1,
        decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=128, encoder_layerdrop=0.0,
        decoder_layerdrop=0.0, max_speech_positions=64, max_text_positions=64),
        ("2x400", IDS)),
    ZooModel("olmoe", "moe", text("OlmoeConfig", "OlmoeForCausalLM", num_experts=4, **MOE)),
    ZooModel("cohere", "decoder", text("CohereConfig", "CohereForCausalLM",
                                       num_key_value_heads=2)),
    ZooModel("olmo2", "decoder", text("Olmo2Config", "Olmo2ForCausalLM", num_key_value_heads=2)),
    ZooModel("esm", "encoder", text("EsmConfig", "EsmForMaskedLM", pad_token_id=1,
                                    position_embedding_type="rotary")),
    ZooModel("pvt_v2", "vision", hf(
        "PvtV2Config", "PvtV2ForImageClassification", image_size=32, hidden_sizes=[8, 16],
        num_attention_heads=[1, 2], depths=[1, 1], sr_ratios=[2, 1], patch_sizes=[7, 3],
        strides=[4, 2], num_encoder_blocks=2, mlp_ratios=[2, 2]), (IMAGE,)),
    ZooModel("wavlm", "speech", hf("WavLMConfig", "WavLMForCTC", **AUDIO_LIKE, num_buckets=32,
                                   max_bucket_distance=64), ("2x400",)),
    ZooModel("blip", "multimodal", wrapped(hf(
        "BlipConfig", "BlipModel",
        text_config=TOWER_TEXT, vision_config=TOWER_VISION,
        projection_dim=16), ("input_ids", "pixel_values"), "logits_per_image"), (IDS, IMAGE)),
]


# ----- the third round: diffusion and audio generation (docs/zoo.md) -----------------------
THIRD_ROUND_GENERATIVE: list[ZooModel] = [
    # diffusion (diffusers, tests/zoo_diffusers.py): noise predicted, trained with MSE
    ZooModel("sd_unet", "diffusion", UNET, (LATENTS, TIMESTEPS, TEXT_STATES), "mse"),
    ZooModel("dit", "diffusion", DIT, (LATENTS, TIMESTEPS, TIMESTEPS), "mse"),
]
# measured once with the round (docs/zoo.md has their rows), left out of the suite for its
# time: AutoencoderKL (its channels-last copies have tests/test_channels_last_copies.py), a
# ControlNet (the UNet's blocks again) and MusicGen's decoder (a decoder over codebooks)
MEASURED_ONCE += [
    ZooModel("autoencoder_kl", "diffusion", AUTOENCODER_KL, (PIXELS,), "mse"),
    ZooModel("controlnet", "diffusion", CONTROLNET, (LATENTS, TIMESTEPS, TEXT_STATES, PIXELS),
             "mse"),
    # audio generation: MusicGen's decoder over 2 codebooks (ids [batch x codebooks, seq])
    ZooModel("musicgen", "audio", hf(
        "MusicgenDecoderConfig", "MusicgenForCausalLM", vocab_size=128, num_hidden_layers=2,
        hidden_size=32, num_attention_heads=4, ffn_dim=64, num_codebooks=2,
        max_position_embeddings=64, pad_token_id=127, bos_token_id=127,
        attn_implementation="eager"), ("4x16:int64",)),
]
# a toy neural codec: 4 filters, hop 8, 800 Hz (100 frames/s: 2 kbps is 2 codebooks of 32)
CODEC: dict[str, Any] = {
    "num_filters": 4, "hidden_size": 16, "codebook_size": 32, "codebook_dim": 16,
    "upsampling_ratios": [4, 2], "num_lstm_layers": 1, "target_bandwidths": [2.0],
    "sampling_rate": 800,
}
AUDIO_CLIP = "2x1x400"
# EnCodec, outside the suite's rows (docs/zoo.md): it traces (its convolutions pad by amounts
# computed from kernel-size buffers, kept as constants), but its LSTM is not priced yet
# (tests/test_zoo.py test_encodec_every_op_is_priced, an expected failure)
ENCODEC = ZooModel("encodec", "audio", wrapped(hf(
    "EncodecConfig", "EncodecModel", **CODEC), ("input_values",), "audio_values"),
    (AUDIO_CLIP,), "mse")
ZOO: list[ZooModel] = FIRST_ROUND + SECOND_ROUND + THIRD_ROUND_GENERATIVE
