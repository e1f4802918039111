"""The zoo's diffusion models, built from diffusers configs at toy widths (random weights, no
hub download): tests/zoo_models.py lists them with the transformers architectures.

Each builder returns the model wrapped so that it takes positional inputs and returns the one
tensor the loss reads (the `sample` of diffusers' outputs); they train with the mean squared
error (`--loss mse`), as a diffusion model's noise prediction does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from tests.zoo_wrappers import Logits

# latents 2x4x8x8 (a 64x64 image through an 8x VAE), timesteps and class labels as ids
LATENTS = "2x4x8x8"
TIMESTEPS = "2:int64"
# the text encoder's hidden states a UNet or a ControlNet attends to: 8 tokens of 16
TEXT_STATES = "2x8x16"
PIXELS = "2x3x16x16"
# one down and one up block pair of 8 and 16 channels, GroupNorm of 4 groups, 1 layer each
UNET_LIKE: dict[str, Any] = {
    "sample_size": 8, "in_channels": 4, "block_out_channels": (8, 16), "layers_per_block": 1,
    "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"), "cross_attention_dim": 16,
    "attention_head_dim": 8, "norm_num_groups": 4,
}


def diffusers_model(model_name: str, names: tuple[str, ...], output: str = "sample",
                    **config: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import diffusers

        return Logits(getattr(diffusers, model_name)(**config), names, output)

    return build


UNET = diffusers_model(
    "UNet2DConditionModel", ("sample", "timestep", "encoder_hidden_states"), **UNET_LIKE,
    out_channels=4, up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))
AUTOENCODER_KL = diffusers_model(
    "AutoencoderKL", ("sample",), in_channels=3, out_channels=3, block_out_channels=(8, 16),
    down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
    latent_channels=4, norm_num_groups=4, layers_per_block=1, sample_size=16)
# a ControlNet beside that UNet: its down blocks and a conditioning image's embedding (16x
#16 pixels to the 8x8 latents), returning the residual its mid block adds to the UNet's
CONTROLNET = diffusers_model(
    "ControlNetModel", ("sample", "timestep", "encoder_hidden_states", "controlnet_cond"),
    "mid_block_res_sample", **{k: v for k, v in UNET_LIKE.items() if k != "sample_size"},
    conditioning_embedding_out_channels=(8, 16))
# class labels are ids below 100: 128 classes
DIT = diffusers_model(
    "DiTTransformer2DModel", ("hidden_states", "timestep", "class_labels"),
    num_attention_heads=2, attention_head_dim=8, in_channels=4, num_layers=1, sample_size=8,
    patch_size=2, num_embeds_ada_norm=128)
