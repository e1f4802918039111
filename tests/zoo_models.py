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
from tests.zoo_custom import (
    BAG,
    DENSE,
    EDGES,
    FIELD,
    NODES,
    SEQUENCE,
    TinyCheckpointed,
    TinyDANN,
    TinyDLRM,
    TinyFNO2d,
    TinyGAT,
    TinyGCN,
    TinyGIN,
    TinyGRU,
    TinyMHA,
    TinyTransformerDecoder,
)
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
from tests.zoo_wrappers import Logits

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
    # the training step's mixed precision by its --amp name (None: fp32)
    amp: str | None = None


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


# The third round: vision-language and vision-task models (docs/zoo.md, "The third round")
class ImageTokens(nn.Module):
    """A vision-language model fed as its processor feeds it: `tokens` image placeholder ids
    (`token_id`, outside the random ids below 100) in front of the text ids, so the
    placeholders match the image's features; `extra` builds the model's other inputs from
    ids it is given (constants a processor computes: aspect ratios, masks, grids)."""

    def __init__(self, model: nn.Module, tokens: int, token_id: int,
                 extra: Callable[[Any], dict[str, Any]] | None = None,
                 output: str = "logits") -> None:
        super().__init__()
        self.model = model
        self.tokens = tokens
        self.token_id = token_id
        self.extra = extra
        self.output = output

    def forward(self, input_ids: Any, pixel_values: Any) -> object:
        import torch

        images = torch.full((input_ids.shape[0], self.tokens), self.token_id,
                            dtype=input_ids.dtype, device=input_ids.device)
        ids = torch.cat([images, input_ids], dim=1)
        extra = self.extra(ids) if self.extra is not None else {}
        out = self.model(input_ids=ids, pixel_values=pixel_values, **extra)
        return getattr(out, self.output)


def image_text(make: Callable[[], nn.Module], tokens: int, token_id: int = 127,
               extra: Callable[[Any], dict[str, Any]] | None = None
               ) -> Callable[[], nn.Module]:
    return lambda: ImageTokens(make(), tokens, token_id, extra)


LLAMA_TEXT: dict[str, Any] = {**{k: v for k, v in TEXT.items() if k != "attn_implementation"},
                              "model_type": "llama", "num_key_value_heads": 2}
VLM_VISION: dict[str, Any] = {**TOWER_VISION, "num_hidden_layers": 2}
def mllama_inputs(ids: Any) -> dict[str, Any]:
    """One image of one tile per sample, aspect ratio 1:1, every token attending to it."""
    import torch

    batch, length = ids.shape
    ones = torch.ones((batch, 1), dtype=torch.long, device=ids.device)
    return {"aspect_ratio_ids": ones, "aspect_ratio_mask": ones[:, :, None],
            "cross_attention_mask": ones[:, None, :, None].expand(batch, length, 1, 1)}


def qwen_vl_inputs(ids: Any) -> dict[str, Any]:
    """One 32x32 image per sample (1 frame of 4x4 patches of 8, merged 2x2 into 4 tokens) in
    front of the text, and the 3D rope positions Qwen's processor side computes for that
    layout: the image's tokens at (t, h, w) = (0, i, j), the text from 2 on in all three."""
    import torch

    batch, length = ids.shape
    grid = torch.arange(2, device=ids.device)
    image = torch.stack([torch.zeros(4, dtype=torch.long, device=ids.device),
                         grid.repeat_interleave(2), grid.repeat(2)])
    text = torch.arange(2, 2 + length - 4, device=ids.device).expand(3, -1)
    positions = torch.cat([image, text], dim=1)[:, None, :].expand(3, batch, length)
    return {"image_grid_thw": torch.tensor([[1, 4, 4]] * batch, device=ids.device),
            "position_ids": positions}


QWEN_VL_TEXT: dict[str, Any] = {**LLAMA_TEXT, "rope_parameters": {
    "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]}}
QWEN_VL_IDS: dict[str, Any] = {"image_token_id": 127, "video_token_id": 126,
                               "vision_start_token_id": 125, "vision_end_token_id": 124}
# 2 images of 32x32 as Qwen's processor flattens them: 16 patches each of 2 frames x 3 x 8 x 8
QWEN_PATCHES = "32x384"
RESNET_BACKBONE: dict[str, Any] = {"model_type": "resnet", "embedding_size": 8, **STAGES,
                                   "out_features": ["stage2"]}
# a detector at toy width: a transformers ResNet backbone (no timm), 1 encoder and 1 decoder
# layer, 8 object queries
DETR_LIKE: dict[str, Any] = {
    "backbone_config": RESNET_BACKBONE, "d_model": 32, "encoder_layers": 1, "decoder_layers": 1,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64, "num_queries": 8, "num_labels": 4,
}

THIRD_ROUND_VISION: list[ZooModel] = [
    # vision-language: image features spliced into a decoder's ids
    ZooModel("llava", "multimodal", image_text(hf(
        "LlavaConfig", "LlavaForConditionalGeneration",
        vision_config={**VLM_VISION, "model_type": "clip_vision_model"},
        text_config=LLAMA_TEXT, image_token_index=127, image_seq_length=16,
        attn_implementation="eager"), 16), (IDS, IMAGE)),
    ZooModel("mllama", "multimodal", image_text(hf(
        "MllamaConfig", "MllamaForConditionalGeneration",
        vision_config={"hidden_size": 32, "num_hidden_layers": 1, "num_global_layers": 1,
                       "attention_heads": 4, "intermediate_size": 64, "image_size": 32,
                       "patch_size": 8, "max_num_tiles": 1, "supported_aspect_ratios": [[1, 1]],
                       "intermediate_layers_indices": [0], "vision_output_dim": 64},
        text_config={**LLAMA_TEXT, "model_type": "mllama_text_model",
                     "cross_attention_layers": [1], "pad_token_id": 0},
        image_token_index=127, attn_implementation="eager"), 1, extra=mllama_inputs),
        (IDS, "2x1x1x3x32x32")),
    ZooModel("qwen2_5_vl", "multimodal", image_text(hf(
        "Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration",
        vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 64,
                       "num_heads": 4, "patch_size": 8, "out_hidden_size": 32,
                       "window_size": 16, "fullatt_block_indexes": [1]},
        text_config={**QWEN_VL_TEXT, "model_type": "qwen2_5_vl_text"}, **QWEN_VL_IDS,
        attn_implementation="eager"), 4, extra=qwen_vl_inputs), (IDS, QWEN_PATCHES)),
    # vision tasks: detection, segmentation, promptable masks
    ZooModel("detr", "vision", wrapped(hf("DetrConfig", "DetrForObjectDetection", **DETR_LIKE),
                                       ("pixel_values",)), (IMAGE,)),
    ZooModel("upernet", "vision", wrapped(hf(
        "UperNetConfig", "UperNetForSemanticSegmentation",
        backbone_config={"model_type": "convnext", "num_stages": 3, "depths": [1, 1, 1],
                         "hidden_sizes": [8, 16, 16],
                         "out_features": ["stage1", "stage2", "stage3"]},
        hidden_size=16, pool_scales=[1, 2], auxiliary_in_channels=16, auxiliary_channels=8,
        num_labels=4), ("pixel_values",)), (IMAGE,)),
    ZooModel("sam", "vision", wrapped(hf(
        "SamConfig", "SamModel",
        vision_config={"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "image_size": 32, "patch_size": 8, "window_size": 2,
                       "global_attn_indexes": [1], "output_channels": 16, "mlp_dim": 64,
                       "num_pos_feats": 8},
        prompt_encoder_config={"hidden_size": 16, "image_size": 32, "patch_size": 8,
                               "mask_input_channels": 4},
        mask_decoder_config={"hidden_size": 16, "mlp_dim": 32, "num_hidden_layers": 1,
                             "num_attention_heads": 2, "iou_head_hidden_dim": 16}),
        ("pixel_values", "input_points"), "pred_masks"), (IMAGE, "2x1x1x2")),
    ZooModel("mask2former", "vision", wrapped(hf(
        "Mask2FormerConfig", "Mask2FormerForUniversalSegmentation",
        backbone_config={"model_type": "swin", "image_size": 32, "patch_size": 4,
                         "embed_dim": 16, "depths": [1, 1, 1, 1], "num_heads": [1, 1, 2, 2],
                         "window_size": 2,
                         "out_features": ["stage1", "stage2", "stage3", "stage4"]},
        feature_size=32, mask_feature_size=32, hidden_dim=32, encoder_feedforward_dim=64,
        encoder_layers=1, decoder_layers=2, num_attention_heads=4, dim_feedforward=64,
        num_queries=4, num_labels=4),
        ("pixel_values",), "masks_queries_logits"), (IMAGE,)),
]

# Measured once with the third round, every check passing (docs/zoo.md has their rows), and
# left out of the suite for its time: near kin of rows above (PaliGemma of LLaVA, Qwen2-VL of
# Qwen2.5-VL), BLIP-2's Q-Former and DPT's reassembly (no op the suite's rows lack)
MEASURED_ONCE += [
    ZooModel("paligemma", "multimodal", image_text(hf(
        "PaliGemmaConfig", "PaliGemmaForConditionalGeneration",
        vision_config={**VLM_VISION, "model_type": "siglip_vision_model"},
        text_config={**LLAMA_TEXT, "model_type": "gemma", "head_dim": 8},
        image_token_index=127, vocab_size=128, projection_dim=32, hidden_size=32,
        attn_implementation="eager"), 16), (IDS, IMAGE)),
    ZooModel("qwen2_vl", "multimodal", image_text(hf(
        "Qwen2VLConfig", "Qwen2VLForConditionalGeneration",
        vision_config={"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 4,
                       "mlp_ratio": 2, "patch_size": 8},
        text_config={**QWEN_VL_TEXT, "model_type": "qwen2_vl_text"}, **QWEN_VL_IDS,
        attn_implementation="eager"), 4, extra=qwen_vl_inputs), (IDS, QWEN_PATCHES)),
    ZooModel("blip2", "multimodal", wrapped(hf(
        "Blip2Config", "Blip2ForImageTextRetrieval",
        vision_config={**VLM_VISION, "model_type": "blip_2_vision_model"},
        qformer_config={**TOWER_TEXT, "num_hidden_layers": 2, "encoder_hidden_size": 32,
                        "cross_attention_frequency": 1, "max_position_embeddings": 64,
                        "use_qformer_text_input": True},
        num_query_tokens=4, image_text_hidden_size=16, attn_implementation="eager"),
        ("input_ids", "pixel_values"), "logits_per_image"), (IDS, IMAGE)),
    ZooModel("dpt", "vision", wrapped(hf(
        "DPTConfig", "DPTForDepthEstimation", **{**VIT_LIKE, "num_hidden_layers": 4},
        backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[8, 8, 16, 16],
        fusion_hidden_size=16), ("pixel_values",), "predicted_depth"), (IMAGE,)),
    # DETR's kin, not looked at while fixing DETR: its training traces the finiteness branch
    ZooModel("conditional_detr", "vision", wrapped(hf(
        "ConditionalDetrConfig", "ConditionalDetrForObjectDetection", **DETR_LIKE),
        ("pixel_values",)), (IMAGE,)),
]
# training steps measured once (docs/zoo.md): no op their inference row and the rest of the
# zoo do not trace; test_zoo.py runs their inference only
TRAINING_MEASURED_ONCE = frozenset({"sam", "mllama", "qwen2_5_vl"})
# DETR's training measured once: its step's measured peak depends on whether transformers'
# cached sine embedding (lru_cache, maxsize 1) holds the warm-up's entry when the measured step
# starts (docs/zoo.md: +0.00% cold, +2.27% against a warm cache): the suite's two workers
# ran it in either state; tests/test_held_past_step.py checks the mechanism deterministically
TRAINING_MEASURED_ONCE = TRAINING_MEASURED_ONCE | {"detr"}


# The third round, text models of 2025-26 (docs/zoo.md, "The third round: text models"):
# chosen for mechanisms the first two did not have; layer patterns given as 2-layer lists
MOE_SHARED: dict[str, Any] = {"moe_intermediate_size": 32, **MOE}
# plain rotary (the 8,192-position YaRN and Llama-3 scalings do not fit 64 positions)
ROPE: dict[str, Any] = {"rope_type": "default", "rope_theta": 10000.0}
# one T5Gemma stack: a Gemma-2 block (sliding and global layers, soft-capped logits)
T5GEMMA_MODULE: dict[str, Any] = {
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 128,
    "query_pre_attn_scalar": 8, "sliding_window": 8, "max_position_embeddings": 64,
    "layer_types": ["sliding_attention", "full_attention"],
}
THIRD_ROUND_TEXT: list[ZooModel] = [
    # Llama-4 text: MoE on every other layer (a routed expert of 1 and a shared one), chunked
    # attention beside a no-rope full-attention layer, QK-norm, attention temperature tuning
    ZooModel("llama4", "moe", text(
        "Llama4TextConfig", "Llama4ForCausalLM", num_key_value_heads=2, head_dim=8,
        intermediate_size=32, intermediate_size_mlp=64, num_local_experts=4,
        num_experts_per_tok=1, interleave_moe_layer_step=2, no_rope_layers=[1, 0],
        attention_chunk_size=8, layer_types=["chunked_attention", "full_attention"],
        experts_implementation="eager")),
    # Qwen3-Next: gated delta-net linear attention, gated full attention, MoE with a gated
    # shared expert
    ZooModel("qwen3_next", "moe", text(
        "Qwen3NextConfig", "Qwen3NextForCausalLM", num_key_value_heads=2, head_dim=8,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=8, num_experts=4, shared_expert_intermediate_size=32,
        layer_types=["linear_attention", "full_attention"], **MOE_SHARED)),
    # MiniMax: lightning (linear) attention layers beside softmax ones, MoE
    ZooModel("minimax", "moe", text(
        "MiniMaxConfig", "MiniMaxForCausalLM", num_key_value_heads=2, head_dim=8,
        num_local_experts=4, block_size=8, layer_types=["linear_attention", "full_attention"],
        **MOE)),
    # Switch Transformers: top-1 routing with an expert capacity, experts a ModuleDict read by
    # a formatted index (graphmem/frontends/torch/conversions.py)
    ZooModel("switch_transformers", "moe", seq2seq(
        "SwitchTransformersConfig", "SwitchTransformersForConditionalGeneration", d_model=32,
        d_ff=64, d_kv=8, num_heads=4, num_layers=2, num_decoder_layers=2,
        num_sparse_encoder_layers=1, num_sparse_decoder_layers=1, num_experts=4,
        expert_capacity=8, vocab_size=128, router_jitter_noise=0.0, dropout_rate=0.0),
        (IDS, IDS)),
]
# measured once with the round, every check passing but routing (docs/zoo.md has their
# rows), and left out of the suite for its time: near kin of rows above or of the first
# two rounds (dense decoders of Llama's block with one change each, routers as
# DeepSeek-V3's or Qwen2-MoE's); NLLB-MoE picks its experts by a formatted index as
# Switch Transformers does (the fix's check on a model not looked at while fixing)
MEASURED_ONCE.extend([
    # GLM-4: partial rotary, post-attention and post-MLP norms; GLM-4-MoE: grouped routing
    # with a correction bias, a shared expert, the first layer dense
    ZooModel("glm4", "decoder", text("Glm4Config", "Glm4ForCausalLM", num_key_value_heads=2,
                                     head_dim=8, pad_token_id=0, eos_token_id=1)),
    ZooModel("glm4_moe", "moe", text(
        "Glm4MoeConfig", "Glm4MoeForCausalLM", num_key_value_heads=2, head_dim=8,
        n_routed_experts=4, n_shared_experts=1, first_k_dense_replace=1, n_group=1,
        topk_group=1, use_qk_norm=True, **MOE_SHARED)),
    # Ernie-4.5: interleaved rotary; its MoE: shared experts, MoE from layer 1
    ZooModel("ernie4_5", "decoder", text("Ernie4_5Config", "Ernie4_5ForCausalLM",
                                         num_key_value_heads=2, head_dim=8)),
    ZooModel("ernie4_5_moe", "moe", text(
        "Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM", num_key_value_heads=2,
        moe_num_experts=4, moe_k=2, moe_num_shared_experts=1, moe_layer_start_index=1,
        moe_layer_end_index=1, moe_intermediate_size=32, experts_implementation="eager")),
    # SmolLM3: rotary skipped every k-th layer
    ZooModel("smollm3", "decoder", text("SmolLM3Config", "SmolLM3ForCausalLM",
                                        num_key_value_heads=2, no_rope_layers=[1, 0],
                                        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # Exaone-4: sliding layers with rotary, full layers without, QK-norm, post-norms
    ZooModel("exaone4", "decoder", text("Exaone4Config", "Exaone4ForCausalLM",
                                        num_key_value_heads=2, sliding_window=8,
                                        layer_types=["sliding_attention", "full_attention"])),
    # HunYuan: QK-norm after rotary; its MoE: a shared MLP beside the experts
    ZooModel("hunyuan", "decoder", text("HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM",
                                        num_key_value_heads=2, head_dim=8)),
    ZooModel("hunyuan_moe", "moe", text(
        "HunYuanMoEV1Config", "HunYuanMoEV1ForCausalLM", num_key_value_heads=2, head_dim=8,
        num_experts=4, moe_topk=2, experts_implementation="eager")),
    # Seed-OSS (attention biases), Apertus (xIELU, QK-norm), Arcee (ReLU^2 MLP)
    ZooModel("seed_oss", "decoder", text("SeedOssConfig", "SeedOssForCausalLM",
                                         num_key_value_heads=2, head_dim=8)),
    ZooModel("apertus", "decoder", text("ApertusConfig", "ApertusForCausalLM",
                                        num_key_value_heads=2, rope_parameters=ROPE)),
    ZooModel("arcee", "decoder", text("ArceeConfig", "ArceeForCausalLM", num_key_value_heads=2,
                                      rope_parameters=ROPE, bos_token_id=1, eos_token_id=2)),
    # encoder-decoders: Gemma-2 blocks as encoder and decoder; n-gram prediction streams;
    # NLLB-MoE's top-2 router with an expert capacity
    ZooModel("t5gemma", "encoder-decoder", seq2seq(
        "T5GemmaConfig", "T5GemmaForConditionalGeneration",
        encoder=T5GEMMA_MODULE, decoder={**T5GEMMA_MODULE, "is_decoder": True},
        vocab_size=128, attn_implementation="eager"), (IDS, IDS)),
    ZooModel("prophetnet", "encoder-decoder", seq2seq(
        "ProphetNetConfig", "ProphetNetForConditionalGeneration", hidden_size=32,
        encoder_ffn_dim=64, decoder_ffn_dim=64, num_encoder_layers=1, num_decoder_layers=1,
        num_encoder_attention_heads=4, num_decoder_attention_heads=4, vocab_size=128,
        max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0), (IDS, IDS)),
    # other common ones of 2025: OLMo-3 (sliding and full layers, post-norms), Granite-4
    # (Mamba-2 and attention layers, experts beside a shared MLP), Gemma-3n (AltUp streams,
    # LAuReL, per-layer inputs, the first layer's gate sparsified), dots.llm1 (DeepSeek-V3's
    # router on a plain attention)
    ZooModel("olmo3", "decoder", text("Olmo3Config", "Olmo3ForCausalLM", num_key_value_heads=2,
                                      sliding_window=8,
                                      layer_types=["sliding_attention", "full_attention"])),
    ZooModel("granitemoehybrid", "ssm", text(
        "GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM", num_key_value_heads=2,
        num_local_experts=4, shared_intermediate_size=32, layer_types=["mamba", "attention"],
        mamba_d_state=8, mamba_n_heads=8, mamba_d_head=8, mamba_n_groups=1,
        mamba_chunk_size=8, **MOE)),
    ZooModel("gemma3n", "decoder", text(
        "Gemma3nTextConfig", "Gemma3nForCausalLM", num_key_value_heads=2, head_dim=8,
        sliding_window=8, layer_types=["sliding_attention", "full_attention"],
        hidden_size_per_layer_input=8, vocab_size_per_layer_input=128, num_kv_shared_layers=0,
        laurel_rank=4, altup_num_inputs=2, activation_sparsity_pattern=[0.95, 0.0],
        intermediate_size=[64, 64])),
    ZooModel("dots1", "moe", text("Dots1Config", "Dots1ForCausalLM", num_key_value_heads=2,
                                  head_dim=8, n_routed_experts=4, n_shared_experts=1,
                                  first_k_dense_replace=1, n_group=1, topk_group=1,
                                  **MOE_SHARED)),
    # OLMo-Hybrid: gated delta-net layers beside attention, its chunked rule solving
    # triangular systems as Qwen3-Next's (the solve's check on a model not looked at)
    ZooModel("olmo_hybrid", "ssm", text(
        "OlmoHybridConfig", "OlmoHybridForCausalLM", num_key_value_heads=2,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=8, layer_types=["linear_attention", "full_attention"],
        pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    ZooModel("nllb_moe", "moe", seq2seq(
        "NllbMoeConfig", "NllbMoeForConditionalGeneration",
        **{**BART_LIKE, "encoder_layers": 2, "decoder_layers": 2}, num_experts=4,
        expert_capacity=8, encoder_sparse_step=2, decoder_sparse_step=2, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, encoder_layerdrop=0.0,
        decoder_layerdrop=0.0), (IDS, IDS)),
])


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
# EnCodec (docs/zoo.md): its convolutions pad by amounts computed from kernel-size buffers
# (kept as constants of the trace); its encoder's and decoder's LSTMs run oneDNN's kernel,
# whose workspace and scratch graphmem models (tests/test_onednn_rnn.py; the encoder's, which
# no gradient reaches, held while its output lives, as eager holds it)
ENCODEC = ZooModel("encodec", "audio", wrapped(hf(
    "EncodecConfig", "EncodecModel", **CODEC), ("input_values",), "audio_values"),
    (AUDIO_CLIP,), "mse")
ZOO: list[ZooModel] = (FIRST_ROUND + SECOND_ROUND + THIRD_ROUND_VISION + THIRD_ROUND_TEXT
                        + THIRD_ROUND_GENERATIVE + [ENCODEC])
# EnCodec's training measured once (docs/zoo.md, -0.00% and +0.00%): its LSTMs' backward
# kernels have tests/test_onednn_rnn.py and tests/test_recurrent_cells.py (5 CPU s saved)
TRAINING_MEASURED_ONCE = TRAINING_MEASURED_ONCE | {"encodec"}


# ----- the fourth round: hand-written models (tests/zoo_custom.py, docs/zoo.md) ------------
# a forecaster's inputs: 16 steps of context after 3 lags (19 past values), 2 time features,
# the observed mask, 8 future values and their time features
SERIES = ("2x19", "2x19x2", "2x19", "2x8", "2x8x2")
SERIES_NAMES = ("past_values", "past_time_features", "past_observed_mask", "future_values",
                "future_time_features")
CLIP = "2x4x3x32x32"  # 4 frames of 32x32


def series(config_name: str, model_name: str) -> Callable[[], nn.Module]:
    return wrapped(hf(config_name, model_name, prediction_length=8, context_length=16,
                      lags_sequence=[1, 2, 3], num_time_features=2, d_model=32,
                      encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                      decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                      encoder_layerdrop=0.0, decoder_layerdrop=0.0),
                   SERIES_NAMES, "last_hidden_state")


FOURTH_ROUND_CUSTOM: list[ZooModel] = [
    # DLRM: EmbeddingBag (sum and mean, flat ids with offsets), a triu-indexed dot-product
    # interaction; trained with cross-entropy over a click logit pair (docs/zoo.md)
    ZooModel("dlrm", "recommender", TinyDLRM, (DENSE, BAG, BAG, BAG)),
    # GAT over an edge list: scatter_reduce amax, scatter_add, index_select
    ZooModel("gat", "graph", TinyGAT, (NODES, EDGES)),
    # a 2D Fourier Neural Operator: rfft2 / irfft2, complex weights viewed from a real
    # parameter, complex einsum
    ZooModel("fno2d", "spectral", TinyFNO2d, (FIELD,), "mse"),
    # custom autograd Functions (a memory-saving Swish, a straight-through estimator, a
    # gradient reversal) and torch.utils.checkpoint in the model's own forward
    ZooModel("dann", "custom", TinyDANN, ("2x8x32",)),
    ZooModel("checkpointed", "custom", TinyCheckpointed, ("2x8x32",)),
    # nn.MultiheadAttention with a key padding mask (its inference fast path in eager)
    ZooModel("nn_mha", "custom", TinyMHA, (SEQUENCE,)),
    # a bidirectional 2-layer nn.GRU (matmuls per step on the CPU, gates by unsafe_split)
    ZooModel("gru", "custom", TinyGRU, (IDS,)),
    # time series, Autoformer: series decomposition, autocorrelation by rfft, its top-k
    # delays read back as shifts (fed past values, time features, an observed mask and
    # future values: `SERIES`; MSE on the last hidden state)
    ZooModel("autoformer", "timeseries", series("AutoformerConfig", "AutoformerModel"),
             SERIES, "mse"),
]
# measured once with the round (docs/zoo.md has their rows), left out of the suite for its
# time: no op or mechanism the rows above and the unit tests (tests/test_zoo_custom_ops.py,
# tests/test_layer_drop.py) lack
MEASURED_ONCE += [
    ZooModel("gcn", "graph", TinyGCN, (NODES, EDGES)),
    ZooModel("gin", "graph", TinyGIN, (NODES, EDGES)),
    ZooModel("fnet", "spectral", text("FNetConfig", "FNetForMaskedLM", type_vocab_size=2)),
    ZooModel("nn_transformer_decoder", "custom", TinyTransformerDecoder, (IDS, SEQUENCE)),
    # time series from transformers configs: PatchTST (patches of a multichannel series),
    # Informer (ProbSparse attention, distilling convolutions), the vanilla
    # TimeSeriesTransformer; LayerDrop off, so that every real step keeps every layer as the
    # trace does (graphmem/frontends/torch/layer_drop.py)
    ZooModel("patchtst", "timeseries", wrapped(hf(
        "PatchTSTConfig", "PatchTSTForPrediction", num_input_channels=3, context_length=32,
        patch_length=8, patch_stride=8, d_model=32, num_attention_heads=4,
        num_hidden_layers=2, ffn_dim=64, prediction_length=8), ("past_values",),
        "prediction_outputs"), ("2x32x3",), "mse"),
    ZooModel("informer", "timeseries", series("InformerConfig", "InformerModel"), SERIES,
             "mse"),
    ZooModel("time_series_transformer", "timeseries", series(
        "TimeSeriesTransformerConfig", "TimeSeriesTransformerModel"), SERIES, "mse"),
    # video: VideoMAE (tubelets by Conv3d), TimeSformer (divided space-time attention)
    ZooModel("videomae", "video", hf(
        "VideoMAEConfig", "VideoMAEForVideoClassification", **VIT_LIKE, num_frames=4,
        tubelet_size=2, num_labels=10), (CLIP,)),
    ZooModel("timesformer", "video", hf(
        "TimesformerConfig", "TimesformerForVideoClassification",
        **{**VIT_LIKE, "attn_implementation": None}, num_frames=4, num_labels=10), (CLIP,)),
]
# measured once: the GRU's and Autoformer's training (the same ops as their inference; the
# LayerDrop draw Autoformer's training reads has tests/test_layer_drop.py)
TRAINING_MEASURED_ONCE = TRAINING_MEASURED_ONCE | {"gru", "autoformer"}
ZOO += FOURTH_ROUND_CUSTOM


# ----- the fifth round: hand-written models, second set (tests/zoo_custom2.py, docs/zoo.md) --
# (imported here, so that the round is one block)
from tests.zoo_custom2 import (  # noqa: E402
    LATENT,
    POINTS,
    RAYS,
    SIGNAL,
    SMALL_IMAGE,
    USERS,
    WAVEFORM,
    ChannelsLastResNet,
    MeanPooledEncoder,
    TinyChannelsLastCNN,
    TinyEDSR,
    TinyLinearTransformer,
    TinyM5,
    TinyNCF,
    TinyNeRF,
    TinyPointNet,
    TinySpectralDiscriminator,
    TinySTN,
    TinyStyleGAN2Generator,
    TinyTCN,
)

FIFTH_ROUND_CUSTOM: list[ZooModel] = [
    # StyleGAN2's generator: modulated, demodulated convolutions run grouped over the batch
    # (a transposed one upsampling), noise injection, equalized learning rate; MSE on the image
    ZooModel("stylegan2", "gan", TinyStyleGAN2Generator, (LATENT,), "mse"),
    # SNGAN's discriminator: parametrizations.spectral_norm (mv, vdot; its power iteration
    # updates buffers in place while training)
    ZooModel("sngan_discriminator", "gan", TinySpectralDiscriminator, (SMALL_IMAGE,)),
    # EDSR with ESPCN's pixel_shuffle upsampler; MSE on the 2x image
    ZooModel("edsr", "cnn", TinyEDSR, (SMALL_IMAGE,), "mse"),
    # PointNet: Conv1d over points, a T-net's 3x3 transform by bmm, a global max
    ZooModel("pointnet", "custom", TinyPointNet, (POINTS,)),
    # a spatial transformer: affine_grid and grid_sample in front of a CNN
    ZooModel("stn", "cnn", TinySTN, (IMAGE,)),
    # a TCN: dilated causal Conv1d under parametrizations.weight_norm
    ZooModel("tcn", "timeseries", TinyTCN, (SIGNAL,)),
    # a CNN trained channels_last under CPU autocast (bf16)
    ZooModel("channels_last_bf16", "cnn", TinyChannelsLastCNN, (IMAGE,), amp="bf16"),
]
# measured once with the round (docs/zoo.md has their rows), left out of the suite for its
# time: NeRF's MLP (sin/cos encodings, a skip concat: ops every row has) and linear attention
# (einsum and cumsum, as the rows of the third round's linear-attention models); NCF's
# inference (its training, with sparse gradients, is refused: tests/test_zoo_custom2_ops.py)
MEASURED_ONCE += [
    ZooModel("nerf", "custom", TinyNeRF, (RAYS, RAYS), "mse"),
    ZooModel("linear_attention", "custom", TinyLinearTransformer, (IDS,)),
    ZooModel("ncf", "recommender", TinyNCF, (USERS,)),
    # the fixes checked on models not looked at while fixing: M5's Conv1d over a waveform,
    # Sentence-BERT's mean pooling by an int64 mask, a ResNet moved to channels_last
    ZooModel("m5", "timeseries", TinyM5, (WAVEFORM,)),
    ZooModel("mean_pooled", "custom", MeanPooledEncoder, (IDS,)),
    ZooModel("channels_last_resnet", "cnn", ChannelsLastResNet, (IMAGE,)),
]
ZOO += FIFTH_ROUND_CUSTOM


# ----- the sixth round: architectures users bring that the zoo lacked (docs/zoo.md) --------
from tests.zoo_custom3 import (  # noqa: E402
    FRAMES,
    SMALL_IMAGE,
    VOLUME,
    TinyConvLSTM,
    TinyMambaScan,
    TinyUNet3d,
    TinyVQVAE,
)

# measured once with the round (docs/zoo.md has their rows), left out of the suite for its
# time: transformers models whose ops the suite's rows already have (the one mechanism found,
# a memoized fake tensor, and SmolVLM's padding-image filter by the pixels' values, have
# tests/test_zoo_custom3_ops.py)
SIXTH_ROUND_MEASURED_ONCE: list[ZooModel] = [
    # decoders of 2025-26 and their attention variants
    ZooModel("qwen3_5", "decoder", text(
        "Qwen3_5TextConfig", "Qwen3_5ForCausalLM", num_key_value_heads=2, head_dim=8,
        linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=8,
        linear_num_key_heads=2, linear_num_value_heads=4,
        layer_types=["linear_attention", "full_attention"])),
    ZooModel("gemma4", "decoder", text(
        "Gemma4TextConfig", "Gemma4ForCausalLM", num_key_value_heads=2, head_dim=8,
        layer_types=["sliding_attention", "full_attention"], sliding_window=8,
        vocab_size_per_layer_input=128, hidden_size_per_layer_input=8, per_layer_config={})),
    ZooModel("diffllama", "decoder", text("DiffLlamaConfig", "DiffLlamaForCausalLM",
                                          num_key_value_heads=2)),
    ZooModel("granite", "decoder", text(
        "GraniteConfig", "GraniteForCausalLM", num_key_value_heads=2, embedding_multiplier=12.0,
        logits_scaling=8.0, residual_multiplier=0.22, attention_multiplier=0.0078125)),
    # encoder-decoders
    ZooModel("m2m_100", "encoder-decoder", seq2seq(
        "M2M100Config", "M2M100ForConditionalGeneration",
        **{**BART_LIKE, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0}), (IDS, IDS)),
    ZooModel("umt5", "encoder-decoder", seq2seq(
        "UMT5Config", "UMT5ForConditionalGeneration", d_model=32, d_ff=64, num_layers=1,
        num_decoder_layers=1, num_heads=4, d_kv=8, vocab_size=128,
        attn_implementation="eager"), (IDS, IDS)),
    # speech
    ZooModel("moonshine", "speech", seq2seq(
        "MoonshineConfig", "MoonshineForConditionalGeneration", "input_values", hidden_size=32,
        intermediate_size=64, encoder_num_hidden_layers=1, decoder_num_hidden_layers=1,
        encoder_num_attention_heads=4, decoder_num_attention_heads=4, vocab_size=128,
        max_position_embeddings=64, decoder_start_token_id=1, attn_implementation="eager"),
        ("2x4000", IDS)),
    ZooModel("parakeet_ctc", "speech", hf(
        "ParakeetCTCConfig", "ParakeetForCTC", vocab_size=32,
        encoder_config={"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "intermediate_size": 64, "conv_kernel_size": 9,
                        "subsampling_conv_channels": 8, "num_mel_bins": 16,
                        "layerdrop": 0.0, "max_position_embeddings": 64}),
        ("2x32x16",)),
    ZooModel("wav2vec2_bert", "speech", hf(
        "Wav2Vec2BertConfig", "Wav2Vec2BertForCTC", hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, feature_projection_input_dim=16,
        conv_depthwise_kernel_size=7, vocab_size=32, mask_time_prob=0.0, layerdrop=0.0,
        add_adapter=False), ("2x16x16",)),
    # vision backbones
    ZooModel("efficientnet", "vision", hf(
        "EfficientNetConfig", "EfficientNetForImageClassification", image_size=32,
        width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320, num_labels=10),
        (IMAGE,)),
    ZooModel("dinov3_vit", "vision", hf(
        "DINOv3ViTConfig", "DINOv3ViTModel", **VIT_LIKE, num_register_tokens=2,
        layerscale_value=0.1), (IMAGE,)),
    ZooModel("hiera", "vision", hf(
        "HieraConfig", "HieraForImageClassification", image_size=[32, 32], patch_size=[3, 3],
        patch_stride=[2, 2], patch_padding=[1, 1], embed_dim=8, depths=[1, 1, 1, 1],
        num_heads=[1, 1, 2, 2], masked_unit_size=[8, 8], num_labels=10), (IMAGE,)),
    ZooModel("focalnet", "vision", hf(
        "FocalNetConfig", "FocalNetForImageClassification", image_size=32, patch_size=4,
        embed_dim=8, depths=[1, 1], hidden_sizes=[8, 16], focal_levels=[2, 2],
        focal_windows=[3, 3], num_labels=10), (IMAGE,)),
    # multimodal: a small vision-language model with a pixel-shuffle connector
    ZooModel("smolvlm", "multimodal", image_text(hf(
        "SmolVLMConfig", "SmolVLMForConditionalGeneration",
        vision_config={**VLM_VISION, "model_type": "smolvlm_vision"},
        text_config=LLAMA_TEXT, image_token_id=127, scale_factor=2,
        attn_implementation="eager"), 4), (IDS, "2x1x3x32x32")),
    # the input-data fix checked on a model not looked at while fixing: Idefics3, SmolVLM's
    # parent (the same padding-image filter, a larger pixel-shuffle connector)
    ZooModel("idefics3", "multimodal", image_text(hf(
        "Idefics3Config", "Idefics3ForConditionalGeneration",
        vision_config={**VLM_VISION, "model_type": "idefics3_vision"},
        text_config=LLAMA_TEXT, image_token_id=127, scale_factor=2,
        attn_implementation="eager"), 4), (IDS, "2x1x3x32x32")),
    # hand-written (tests/zoo_custom3.py): a Mamba block's selective scan stepped in a
    # Python loop, a ConvLSTM over a clip's frames
    ZooModel("mamba_scan", "ssm", TinyMambaScan, (IDS,)),
    ZooModel("convlstm", "custom", TinyConvLSTM, (FRAMES,)),
    # the memoized-tensor fix checked on a model not looked at while fixing: BEiT's relative
    # position bias, whose index is a cached static method's tensor
    ZooModel("beit_relative", "vision", hf(
        "BeitConfig", "BeitForImageClassification", **VIT_LIKE,
        use_relative_position_bias=True), (IMAGE,)),
]
MEASURED_ONCE += SIXTH_ROUND_MEASURED_ONCE
SIXTH_ROUND_CUSTOM: list[ZooModel] = [
    # VQ-VAE: a codebook's nearest code by argmin over distances from one matmul, the
    # straight-through estimator z + (q - z).detach(); MSE on the reconstruction
    ZooModel("vqvae", "custom", TinyVQVAE, (SMALL_IMAGE,), "mse"),
    # 3-D U-Net: Conv3d, BatchNorm3d, MaxPool3d, a stride-2 ConvTranspose3d, a skip concat
    ZooModel("unet3d", "custom", TinyUNet3d, (VOLUME,)),
]
# measured once: the 3-D U-Net's training (its ops are its inference's backward; the
# allocator's peak is oneDNN's weight-gradient scratchpad, which the rules do not model)
TRAINING_MEASURED_ONCE = TRAINING_MEASURED_ONCE | {"unet3d"}
ZOO += SIXTH_ROUND_CUSTOM
