"""The zoo's sixth round: models users write by hand in plain torch that the zoo had not met,
each a published architecture at toy width (docs/zoo.md, "The sixth round")."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

VOLUME = "2x1x8x16x16"  # one channel of 8 slices of 16x16 (a CT or MRI crop)
FRAMES = "2x4x3x16x16"  # 4 frames of 3x16x16
SMALL_IMAGE = "2x3x16x16"


def conv3d_block(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv3d(inputs, outputs, 3, padding=1, bias=False), nn.BatchNorm3d(outputs),
        nn.ReLU(inplace=True),
        nn.Conv3d(outputs, outputs, 3, padding=1, bias=False), nn.BatchNorm3d(outputs),
        nn.ReLU(inplace=True))


class TinyUNet3d(nn.Module):
    """3-D U-Net (Çiçek et al., 2016): two levels of Conv3d-BatchNorm3d-ReLU pairs, MaxPool3d
    down, a stride-2 ConvTranspose3d up, the skip concatenated, per-voxel class logits moved
    last (channels-last, as a segmentation loss over classes reads them)."""

    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.down, self.bottom = conv3d_block(1, 8), conv3d_block(8, 16)
        self.up = nn.ConvTranspose3d(16, 8, 2, stride=2)
        self.decode = conv3d_block(16, 8)
        self.head = nn.Conv3d(8, classes, 1)

    def forward(self, volume: torch.Tensor) -> torch.Tensor:
        skip = self.down(volume)
        deep = self.bottom(F.max_pool3d(skip, 2))
        merged = self.decode(torch.cat([self.up(deep), skip], dim=1))
        return self.head(merged).permute(0, 2, 3, 4, 1)


class VectorQuantizer(nn.Module):
    """VQ-VAE's codebook (van den Oord et al., 2017): each vector replaced by its nearest code
    (squared distances by one matmul, argmin), the codebook and commitment losses, and the
    straight-through estimator z + (q - z).detach() that passes the decoder's gradient to
    the encoder."""

    def __init__(self, codes: int, width: int, commitment: float = 0.25) -> None:
        super().__init__()
        self.codebook = nn.Embedding(codes, width)
        self.commitment = commitment

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, width, height, across = z.shape
        flat = z.permute(0, 2, 3, 1).reshape(-1, width)
        distances = (flat.pow(2).sum(1, keepdim=True) - 2 * flat @ self.codebook.weight.t()
                     + self.codebook.weight.pow(2).sum(1))
        quantized = self.codebook(distances.argmin(1)).view(batch, height, across, width)
        quantized = quantized.permute(0, 3, 1, 2)
        loss = (F.mse_loss(quantized, z.detach())
                + self.commitment * F.mse_loss(z, quantized.detach()))
        return z + (quantized - z).detach(), loss


class TinyVQVAE(nn.Module):
    """A VQ-VAE: a strided convolutional encoder, the vector quantizer, a transposed
    convolutional decoder. The reconstruction plus the quantizer's loss (a scalar, broadcast)
    is the output, so that the harness's one loss on the output trains the codebook too."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, 16, 4, stride=2, padding=1), nn.ReLU(),
                                     nn.Conv2d(16, 16, 3, padding=1))
        self.quantizer = VectorQuantizer(32, 16)
        self.decoder = nn.Sequential(nn.ReLU(), nn.ConvTranspose2d(16, 3, 4, stride=2,
                                                                   padding=1))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        quantized, loss = self.quantizer(self.encoder(image))
        return self.decoder(quantized) + loss


class SelectiveScan(nn.Module):
    """Mamba's block with its selective scan written in torch (Gu and Dao, 2023; as
    mamba-minimal writes it): input projection to x and a gate z, a causal depthwise Conv1d,
    input-dependent dt, B and C, and the recurrence h = exp(dt A) h + dt B x, y = C h,
    stepped over time in a Python loop, then D x, the SiLU gate and the output projection."""

    def __init__(self, width: int, state: int = 8, expand: int = 2, kernel: int = 4) -> None:
        super().__init__()
        inner = expand * width
        self.rank = max(1, width // 16)
        self.in_proj = nn.Linear(width, 2 * inner, bias=False)
        self.conv = nn.Conv1d(inner, inner, kernel, groups=inner, padding=kernel - 1)
        self.x_proj = nn.Linear(inner, self.rank + 2 * state, bias=False)
        self.dt_proj = nn.Linear(self.rank, inner)
        self.a_log = nn.Parameter(torch.log(torch.arange(1, state + 1.0)).repeat(inner, 1))
        self.d = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, width, bias=False)
        self.state = state

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        length = hidden.shape[1]
        x, z = self.in_proj(hidden).chunk(2, dim=-1)
        x = F.silu(self.conv(x.transpose(1, 2))[..., :length].transpose(1, 2))
        dt, b, c = self.x_proj(x).split([self.rank, self.state, self.state], dim=-1)
        dt = F.softplus(self.dt_proj(dt))  # [b, l, inner]
        a = -torch.exp(self.a_log)  # [inner, state]
        decay = torch.exp(dt.unsqueeze(-1) * a)  # [b, l, inner, state]
        drive = dt.unsqueeze(-1) * b.unsqueeze(2) * x.unsqueeze(-1)  # [b, l, inner, state]
        h = torch.zeros_like(decay[:, 0])
        outputs = []
        for step in range(length):
            h = decay[:, step] * h + drive[:, step]
            outputs.append((h * c[:, step].unsqueeze(1)).sum(-1))  # [b, inner]
        y = torch.stack(outputs, dim=1) + x * self.d
        return self.out_proj(y * F.silu(z))


class TinyMambaScan(nn.Module):
    """Two pre-norm residual selective-scan blocks over token embeddings, a tied head."""

    def __init__(self, vocabulary: int = 128, width: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        self.blocks = nn.ModuleList([SelectiveScan(width) for _ in range(2)])
        self.norms = nn.ModuleList([nn.RMSNorm(width) for _ in range(3)])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(ids)
        for norm, block in zip(self.norms, self.blocks, strict=False):
            hidden = hidden + block(norm(hidden))
        return self.norms[-1](hidden) @ self.embed.weight.t()


class ConvLSTMCell(nn.Module):
    """ConvLSTM's cell (Shi et al., 2015): one convolution of the input and hidden state
    concatenated gives the four gates; c = f c + i g, h = o tanh(c)."""

    def __init__(self, inputs: int, hidden: int, kernel: int = 3) -> None:
        super().__init__()
        self.gates = nn.Conv2d(inputs + hidden, 4 * hidden, kernel, padding=kernel // 2)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor]:
        h, c = state
        i, f, o, g = self.gates(torch.cat([x, h], dim=1)).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class TinyConvLSTM(nn.Module):
    """A two-layer ConvLSTM over a clip's frames (a Python loop over time), the last hidden
    state pooled into 10 classes."""

    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.cells = nn.ModuleList([ConvLSTMCell(3, hidden), ConvLSTMCell(hidden, hidden)])
        self.head = nn.Linear(hidden, 10)
        self.hidden = hidden

    def forward(self, clip: torch.Tensor) -> torch.Tensor:
        batch, frames, _, height, width = clip.shape
        zeros = clip.new_zeros(batch, self.hidden, height, width)
        states = [(zeros, zeros) for _ in self.cells]
        for t in range(frames):
            x = clip[:, t]
            for layer, cell in enumerate(self.cells):
                states[layer] = cell(x, states[layer])
                x = states[layer][0]
        return self.head(states[-1][0].mean(dim=(2, 3)))
