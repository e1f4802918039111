"""The zoo's fifth round: more models users write by hand in plain torch, each a published
architecture at toy width, chosen for a mechanism the zoo had not met (docs/zoo.md, "The fifth
round: hand-written models, second set")."""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parametrizations

LATENT = "2x32"
POINTS = "2x3x64"  # 64 points of 3 coordinates, channels first as PointNet's Conv1d reads them
RAYS = "2x64x3"  # 64 samples along rays: positions, and view directions
SIGNAL = "2x4x32"  # 4 channels of 32 time steps
SMALL_IMAGE = "2x3x16x16"
USERS = "2x8:int64"  # a batch of 8 (user, item) pairs, read as two id rows of 8


class EqualLinear(nn.Module):
    """StyleGAN's equalized learning rate: the weight stored at unit variance, scaled by
    1 / sqrt(fan_in) at run time (Karras et al., 2018)."""

    def __init__(self, inputs: int, outputs: int, bias_init: float = 0.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(outputs, inputs))
        self.bias = nn.Parameter(torch.full((outputs,), bias_init))
        self.scale = 1 / math.sqrt(inputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight * self.scale, self.bias)


class ModulatedConv2d(nn.Module):
    """StyleGAN2's modulated convolution (Karras et al., 2020, "Analyzing and Improving the
    Image Quality of StyleGAN"): the weight scaled per sample by a style, demodulated to unit
    norm, run as one grouped convolution over the batch ([1, b*c, h, w], groups=b); `up`
    upsamples by a stride-2 transposed convolution, grouped the same way."""

    def __init__(self, inputs: int, outputs: int, kernel: int, latent: int,
                 demodulate: bool = True, up: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1, outputs, inputs, kernel, kernel))
        self.scale = 1 / math.sqrt(inputs * kernel * kernel)
        self.style = EqualLinear(latent, inputs, bias_init=1.0)
        self.demodulate, self.up, self.padding = demodulate, up, kernel // 2

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        batch, inputs, height, width = x.shape
        style = self.style(w).view(batch, 1, inputs, 1, 1)
        weight = self.scale * self.weight * style  # [b, out, in, k, k]
        if self.demodulate:
            demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
            weight = weight * demod.view(batch, -1, 1, 1, 1)
        outputs, kernel = weight.shape[1], weight.shape[-1]
        x = x.reshape(1, batch * inputs, height, width)
        if self.up:  # the transposed convolution's weight is [in, out, k, k] per group
            weight = weight.transpose(1, 2).reshape(batch * inputs, outputs, kernel, kernel)
            out = F.conv_transpose2d(x, weight, stride=2, padding=self.padding,
                                     output_padding=1, groups=batch)
        else:
            weight = weight.reshape(batch * outputs, inputs, kernel, kernel)
            out = F.conv2d(x, weight, padding=self.padding, groups=batch)
        return out.view(batch, outputs, *out.shape[2:])


class StyledConv(nn.Module):
    """A modulated convolution, noise injection (per-pixel noise, a learned strength), a bias
    and StyleGAN's scaled leaky ReLU."""

    def __init__(self, inputs: int, outputs: int, latent: int, up: bool = False) -> None:
        super().__init__()
        self.conv = ModulatedConv2d(inputs, outputs, 3, latent, up=up)
        self.noise_strength = nn.Parameter(torch.zeros(1))
        self.bias = nn.Parameter(torch.zeros(1, outputs, 1, 1))

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        x = self.conv(x, w)
        noise = torch.randn(x.shape[0], 1, x.shape[2], x.shape[3], device=x.device)
        return F.leaky_relu(x + self.noise_strength * noise + self.bias, 0.2) * math.sqrt(2)


class TinyStyleGAN2Generator(nn.Module):
    """A StyleGAN2 generator at toy width: a mapping network of equalized linears, a learned
    constant 4x4 input, styled convolutions (4x4, up to 8x8 by a transposed convolution, up
    to 16x16 by `F.interpolate`), a modulated 1x1 to RGB without demodulation (trained with
    MSE on the image)."""

    def __init__(self, latent: int = 32, width: int = 16) -> None:
        super().__init__()
        self.mapping = nn.Sequential(EqualLinear(latent, latent), nn.LeakyReLU(0.2),
                                     EqualLinear(latent, latent))
        self.constant = nn.Parameter(torch.randn(1, width, 4, 4))
        self.convs = nn.ModuleList([StyledConv(width, width, latent),
                                    StyledConv(width, width, latent, up=True),
                                    StyledConv(width, width, latent),
                                    StyledConv(width, width, latent)])
        self.to_rgb = ModulatedConv2d(width, 3, 1, latent, demodulate=False)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        w = self.mapping(F.normalize(z, dim=1))
        x = self.constant.expand(z.shape[0], -1, -1, -1)
        x = self.convs[1](self.convs[0](x, w), w)  # 4x4, up to 8x8
        x = self.convs[2](x, w)
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        return self.to_rgb(self.convs[3](x, w), w)


class TinySpectralDiscriminator(nn.Module):
    """A GAN discriminator with spectral normalization on every layer (Miyato et al., 2018,
    "Spectral Normalization for Generative Adversarial Networks"; SNGAN's, BigGAN's):
    `parametrizations.spectral_norm`, whose power iteration updates its `u` and `v` buffers
    in place at each training forward; strided convolutions, a real/fake logit pair."""

    def __init__(self) -> None:
        super().__init__()
        sn = parametrizations.spectral_norm
        self.convs = nn.ModuleList([sn(nn.Conv2d(3, 16, 3, padding=1)),
                                    sn(nn.Conv2d(16, 32, 4, stride=2, padding=1)),
                                    sn(nn.Conv2d(32, 32, 4, stride=2, padding=1))])
        self.head = sn(nn.Linear(32 * 4 * 4, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = F.leaky_relu(conv(x), 0.1)
        return self.head(x.flatten(1))


class ResidualBlock(nn.Module):
    """EDSR's residual block: conv, ReLU, conv, no batch norm, the residual scaled by 0.1."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.first = nn.Conv2d(width, width, 3, padding=1)
        self.second = nn.Conv2d(width, width, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.1 * self.second(F.relu(self.first(x)))


class TinyEDSR(nn.Module):
    """EDSR (Lim et al., 2017, "Enhanced Deep Residual Networks for Single Image
    Super-Resolution") with ESPCN's sub-pixel upsampler (Shi et al., 2016): a head
    convolution, residual blocks without normalization, a global skip, a convolution to
    4x the channels and `F.pixel_shuffle(2)`, a tail to RGB (MSE on the 2x image)."""

    def __init__(self, width: int = 16, blocks: int = 3) -> None:
        super().__init__()
        self.head = nn.Conv2d(3, width, 3, padding=1)
        self.body = nn.Sequential(*[ResidualBlock(width) for _ in range(blocks)],
                                  nn.Conv2d(width, width, 3, padding=1))
        self.upsample = nn.Conv2d(width, 4 * width, 3, padding=1)
        self.tail = nn.Conv2d(width, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(x)
        x = x + self.body(x)
        return self.tail(F.pixel_shuffle(self.upsample(x), 2))


def point_mlp(*widths: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width, after in itertools.pairwise(widths):
        layers += [nn.Conv1d(width, after, 1), nn.BatchNorm1d(after), nn.ReLU()]
    return nn.Sequential(*layers)


class TNet(nn.Module):
    """PointNet's input transform network: a shared point MLP, a max over the points, an
    MLP to a 3x3 matrix, added to the identity."""

    def __init__(self) -> None:
        super().__init__()
        self.features = point_mlp(3, 16, 32)
        self.head = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 9))
        self.register_buffer("identity", torch.eye(3).flatten(), persistent=False)

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        pooled = self.features(points).amax(dim=2)
        return (self.head(pooled) + self.identity).view(-1, 3, 3)


class TinyPointNet(nn.Module):
    """PointNet for classification (Qi et al., 2017, "PointNet: Deep Learning on Point Sets
    for 3D Classification and Segmentation"): a T-net's 3x3 transform applied by `bmm`, a
    shared MLP as Conv1d over the points, a global max over them (symmetric in the points'
    order), a classifier over 10 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.tnet = TNet()
        self.features = point_mlp(3, 16, 32, 64)
        self.classifier = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, points: torch.Tensor) -> torch.Tensor:  # [batch, 3, points]
        transform = self.tnet(points)
        points = torch.bmm(points.transpose(1, 2), transform).transpose(1, 2)
        return self.classifier(self.features(points).amax(dim=2))


class TinySTN(nn.Module):
    """A spatial transformer network (Jaderberg et al., 2015) in front of a small CNN, as in
    PyTorch's tutorial: a localization net regresses an affine transform (initialized to
    the identity), `F.affine_grid` and `F.grid_sample` warp the input, the CNN classifies."""

    def __init__(self) -> None:
        super().__init__()
        self.localization = nn.Sequential(nn.Conv2d(3, 8, 5), nn.MaxPool2d(2), nn.ReLU(),
                                          nn.Conv2d(8, 8, 5), nn.MaxPool2d(2), nn.ReLU())
        self.theta = nn.Sequential(nn.Linear(8 * 5 * 5, 16), nn.ReLU(), nn.Linear(16, 6))
        last = self.theta[2]
        assert isinstance(last, nn.Linear)
        nn.init.zeros_(last.weight)
        with torch.no_grad():
            last.bias.copy_(torch.tensor([1.0, 0, 0, 0, 1, 0]))
        self.cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        theta = self.theta(self.localization(x).flatten(1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return self.cnn(F.grid_sample(x, grid, align_corners=False))


class TinyNCF(nn.Module):
    """Neural Collaborative Filtering (He et al., 2017): user and item embeddings with
    `sparse=True` (their gradients sparse, trained with `torch.optim.SparseAdam`, the dense
    layers with Adam), a generalized matrix factorization (the embeddings' product) beside an
    MLP over their concatenation, a like/dislike logit pair."""

    def __init__(self, users: int = 128, items: int = 128, width: int = 8) -> None:
        super().__init__()
        self.gmf_user = nn.Embedding(users, width, sparse=True)
        self.gmf_item = nn.Embedding(items, width, sparse=True)
        self.mlp_user = nn.Embedding(users, width, sparse=True)
        self.mlp_item = nn.Embedding(items, width, sparse=True)
        self.mlp = nn.Sequential(nn.Linear(2 * width, 16), nn.ReLU(), nn.Linear(16, width))
        self.head = nn.Linear(2 * width, 2)

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:  # [2, n]: user ids, item ids
        users, items = pairs[0], pairs[1]
        gmf = self.gmf_user(users) * self.gmf_item(items)
        mlp = self.mlp(torch.cat([self.mlp_user(users), self.mlp_item(items)], dim=-1))
        return self.head(torch.cat([gmf, F.relu(mlp)], dim=-1))


class TemporalBlock(nn.Module):
    """A TCN residual block: two dilated causal convolutions (padded on both sides, the
    right padding chomped off), each under `parametrizations.weight_norm`, ReLU, a 1x1
    convolution on the residual where the width changes."""

    def __init__(self, inputs: int, outputs: int, dilation: int, kernel: int = 3) -> None:
        super().__init__()
        self.chomp = (kernel - 1) * dilation
        wn = parametrizations.weight_norm
        self.first = wn(nn.Conv1d(inputs, outputs, kernel, padding=self.chomp,
                                  dilation=dilation))
        self.second = wn(nn.Conv1d(outputs, outputs, kernel, padding=self.chomp,
                                   dilation=dilation))
        self.residual = nn.Conv1d(inputs, outputs, 1) if inputs != outputs else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.first(x)[..., :-self.chomp])
        h = F.relu(self.second(h)[..., :-self.chomp])
        return F.relu(h + self.residual(x))


class TinyTCN(nn.Module):
    """A temporal convolutional network (Bai et al., 2018, "An Empirical Evaluation of
    Generic Convolutional and Recurrent Networks for Sequence Modeling"): residual blocks
    of dilations 1, 2, 4, a classifier over the last step (10 classes)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(TemporalBlock(4, 16, 1), TemporalBlock(16, 16, 2),
                                    TemporalBlock(16, 16, 4))
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x)[:, :, -1])


def positional_encoding(x: torch.Tensor, frequencies: int) -> torch.Tensor:
    """NeRF's encoding: x beside sin(2^k x) and cos(2^k x), k = 0 .. frequencies - 1."""
    scales = 2.0 ** torch.arange(frequencies, device=x.device, dtype=x.dtype)
    scaled = (x[..., None, :] * scales[:, None]).flatten(-2)  # [..., frequencies * 3]
    return torch.cat([x, torch.sin(scaled), torch.cos(scaled)], dim=-1)


class TinyNeRF(nn.Module):
    """NeRF's MLP (Mildenhall et al., 2020, "NeRF: Representing Scenes as Neural Radiance
    Fields for View Synthesis"): positions encoded at 4 frequencies, directions at 2, a
    ReLU MLP with the encoded position concatenated back in at its middle (the skip), a
    density head, a feature joined with the encoded direction for an RGB head (sigmoid);
    trained with MSE on density and colour."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        position, direction = 3 + 3 * 2 * 4, 3 + 3 * 2 * 2
        self.before = nn.Sequential(nn.Linear(position, width), nn.ReLU(),
                                    nn.Linear(width, width), nn.ReLU())
        self.after = nn.Sequential(nn.Linear(width + position, width), nn.ReLU(),
                                   nn.Linear(width, width), nn.ReLU())
        self.density = nn.Linear(width, 1)
        self.feature = nn.Linear(width, width)
        self.colour = nn.Sequential(nn.Linear(width + direction, width // 2), nn.ReLU(),
                                    nn.Linear(width // 2, 3))

    def forward(self, positions: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
        encoded = positional_encoding(positions, 4)
        h = self.after(torch.cat([self.before(encoded), encoded], dim=-1))
        density = F.relu(self.density(h))
        colour = torch.sigmoid(self.colour(torch.cat(
            [self.feature(h), positional_encoding(directions, 2)], dim=-1)))
        return torch.cat([density, colour], dim=-1)


class CausalLinearAttention(nn.Module):
    """Linear attention (Katharopoulos et al., 2020, "Transformers are RNNs"): the feature
    map elu(x) + 1, causal by prefix sums: each position's sum over earlier keys of
    phi(k) v^T ([b, h, n, d, d], `cumsum`) and of phi(k), read by phi(q)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, -1).unbind(2)
        q, k = F.elu(q) + 1, F.elu(k) + 1  # [b, n, h, d]
        states = torch.einsum("bnhd,bnhe->bnhde", k, v).cumsum(1)
        numerator = torch.einsum("bnhd,bnhde->bnhe", q, states)
        denominator = torch.einsum("bnhd,bnhd->bnh", q, k.cumsum(1))[..., None] + 1e-6
        return self.out((numerator / denominator).reshape(batch, length, width))


class LinearAttentionLayer(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = CausalLinearAttention(width, heads)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(),
                                 nn.Linear(2 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyLinearTransformer(nn.Module):
    """A causal language model of two pre-norm linear-attention layers, 4 heads."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(128, 32)
        self.layers = nn.Sequential(LinearAttentionLayer(32, 4), LinearAttentionLayer(32, 4))
        self.head = nn.Linear(32, 128)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.embed(ids)))


class TinyChannelsLastCNN(nn.Module):
    """A small ResNet-style CNN (He et al., 2016) trained as the PyTorch performance guide
    advises on a CPU: the model and its input in channels_last, the step under
    `torch.autocast("cpu", torch.bfloat16)` (the zoo's row traces it with --amp bf16)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16),
                                   nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1),
                                   nn.BatchNorm2d(16))
        self.down = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1),
                                  nn.BatchNorm2d(32), nn.ReLU())
        self.head = nn.Linear(32, 10)
        self.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x.contiguous(memory_format=torch.channels_last))
        x = self.down(F.relu(x + self.block(x)))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


# ----- models the fixes were checked on, not looked at while fixing (measured once) --------
WAVEFORM = "2x1x800"  # 0.1 s of 8 kHz audio


class TinyM5(nn.Module):
    """M5 (Dai et al., 2017, "Very Deep Convolutional Neural Networks for Raw Waveforms"):
    a wide strided Conv1d over the raw waveform, Conv1d-BatchNorm1d-ReLU-MaxPool1d stages, a
    global average over time, a classifier (10 classes). A check of the Conv1d rule
    (runtime_models/conv1d_view.py) on other kernels, strides and pools."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for inputs, outputs, kernel, stride in ((1, 16, 80, 4), (16, 16, 3, 1), (16, 32, 3, 1)):
            layers += [nn.Conv1d(inputs, outputs, kernel, stride), nn.BatchNorm1d(outputs),
                       nn.ReLU(), nn.MaxPool1d(4)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=2))


class MeanPooledEncoder(nn.Module):
    """Sentence-BERT's mean pooling (Reimers & Gurevych, 2019) as written by hand: token
    embeddings through a small encoder layer, multiplied by the int64 attention mask (an
    int64 operand of a float product: promoted by a copy on the CPU), summed over the
    tokens and divided by the mask's count; a classifier. A check of the promotion rule
    (runtime_models/cpu_promotion.py) on integer operands."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(128, 32)
        self.encoder = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = (ids > 10).long()[..., None]  # [b, n, 1]: the ids below 10 are padding
        hidden = self.encoder(self.embed(ids))
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        return self.head(pooled)


class ChannelsLastResNet(nn.Module):
    """A small ResNet (tests/zoo_cnns.py's) moved to channels_last, fp32: a check of the fake
    parameters' strides (graphmem/frontends/torch/trace.py `_fake_like`) on another model."""

    def __init__(self) -> None:
        super().__init__()
        from tests.zoo_cnns import TinyResNet

        self.net = TinyResNet().to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.contiguous(memory_format=torch.channels_last))
