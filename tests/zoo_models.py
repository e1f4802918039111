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
    family: str  # decoder, encoder, encoder-decoder, vision, speech, multimodal, moe, ssm, cnn
    build: Callable[[], nn.Module]
    inputs: tuple[str, ...] = (IDS,)


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


# ----- plain torch CNNs --------------------------------------------------------------------
class TinyResNet(nn.Module):
    """conv-bn-relu stem, max pool (its indices saved for backward), two residual blocks, the
    second strided with a 1x1 projection, global average pool, linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        self.block1 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False),
                                    nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                    nn.Conv2d(8, 8, 3, padding=1, bias=False),
                                    nn.BatchNorm2d(8))
        self.block2 = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1, bias=False),
                                    nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                                    nn.Conv2d(16, 16, 3, padding=1, bias=False),
                                    nn.BatchNorm2d(16))
        self.project = nn.Sequential(nn.Conv2d(8, 16, 1, 2, bias=False), nn.BatchNorm2d(16))
        self.head = nn.Linear(16, 10)

    def forward(self, x: Any) -> Any:
        x = self.stem(x)
        x = (x + self.block1(x)).relu()
        x = (self.project(x) + self.block2(x)).relu()
        return self.head(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


class TinyVGG(nn.Module):
    """conv-relu-maxpool twice, dropout, two linear layers."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1),
                                      nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 8 * 8, 32), nn.ReLU(),
                                        nn.Dropout(0.5), nn.Linear(32, 10))

    def forward(self, x: Any) -> Any:
        return self.classifier(self.features(x))


class TinyMobileNet(nn.Module):
    """MobileNet-V2 inverted residuals: 1x1 expand, 3x3 depthwise, ReLU6, 1x1 project,
    a squeeze-and-excitation gate (sigmoid, hardswish), average pool."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU6())
        self.expand = nn.Sequential(nn.Conv2d(8, 32, 1, bias=False), nn.BatchNorm2d(32),
                                    nn.ReLU6())
        self.depthwise = nn.Sequential(nn.Conv2d(32, 32, 3, 1, 1, groups=32, bias=False),
                                       nn.BatchNorm2d(32), nn.Hardswish())
        self.squeeze = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(32, 8, 1), nn.SiLU(),
                                     nn.Conv2d(8, 32, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(32, 8, 1, bias=False), nn.BatchNorm2d(8))
        self.head = nn.Sequential(nn.AvgPool2d(16), nn.Flatten(), nn.Linear(8, 10))

    def forward(self, x: Any) -> Any:
        x = self.stem(x)
        y = self.depthwise(self.expand(x))
        return self.head(x + self.project(y * self.squeeze(y)))


class TinyUNet(nn.Module):
    """An encoder-decoder CNN: strided conv down, group norm, GELU, transposed conv up,
    nearest upsampling, a skip concatenation, per-pixel logits."""

    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.GroupNorm(4, 16), nn.GELU())
        self.bottom = nn.Sequential(nn.Conv2d(16, 16, 3, 2, 1), nn.GELU())
        self.up = nn.ConvTranspose2d(16, 16, 2, 2)
        self.fuse = nn.Conv2d(32, 16, 3, padding=1)
        self.out = nn.Conv2d(16, 10, 1)

    def forward(self, x: Any) -> Any:
        import torch

        skip = self.down(x)
        y = torch.cat([skip, self.up(self.bottom(skip))], dim=1)
        y = nn.functional.interpolate(self.fuse(y), scale_factor=2.0, mode="nearest")
        return self.out(y).permute(0, 2, 3, 1)


ZOO: list[ZooModel] = [
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
        text_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                     "intermediate_size": 64, "vocab_size": 128},
        vision_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                       "intermediate_size": 64, "image_size": 32, "patch_size": 8},
        projection_dim=16, attn_implementation="eager"),
        ("input_ids", "pixel_values"), "logits_per_image"), (IDS, IMAGE)),
    ZooModel("siglip", "multimodal", wrapped(hf(
        "SiglipConfig", "SiglipModel",
        text_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                     "intermediate_size": 64, "vocab_size": 128,
                     "max_position_embeddings": 16},
        vision_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                       "intermediate_size": 64, "image_size": 32, "patch_size": 8},
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
