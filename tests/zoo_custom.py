"""The zoo's fourth round: models users write by hand in plain torch (no transformers config),
each a published architecture at toy width, chosen for a mechanism the zoo had not met
(docs/zoo.md, "The fourth round: hand-written models")."""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

# a toy recommender's inputs: 13 dense features (Criteo's), 3 categorical tables, 4 ids a bag
DENSE = "2x13"
BAG = "2x4:int64"
# a graph of 100 nodes (the harness's ids are below 100) with 8 features, 256 directed edges
NODES = "100x8"
EDGES = "2x256:int64"
# a 2D field on a 16x16 grid, 3 channels (a Fourier Neural Operator's input)
FIELD = "2x3x16x16"
SEQUENCE = "2x16x32"


def mlp(*widths: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width, after in itertools.pairwise(widths):
        layers += [nn.Linear(width, after), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class TinyDLRM(nn.Module):
    """DLRM (Naumov et al., 2019, "Deep Learning Recommendation Model for Personalization
    and Recommendation Systems"): a bottom MLP over the dense features, one
    `nn.EmbeddingBag` per categorical table (sum, sum, mean) read with flat ids and offsets,
    the pairwise dot products of the 4 feature vectors (the strict upper triangle, by a
    `triu_indices` index), a top MLP to a click logit pair (the zoo trains it with its
    default cross-entropy over the 2 logits: binary cross-entropy with logits on their
    difference)."""

    def __init__(self) -> None:
        super().__init__()
        self.bottom = mlp(13, 16, 8)
        self.tables = nn.ModuleList(nn.EmbeddingBag(128, 8, mode=mode)
                                    for mode in ("sum", "sum", "mean"))
        pairs = torch.triu_indices(4, 4, offset=1)
        self.register_buffer("rows", pairs[0], persistent=False)
        self.register_buffer("cols", pairs[1], persistent=False)
        self.top = mlp(8 + 6, 16, 2)

    def forward(self, dense: torch.Tensor, *bags: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        features = [x]
        for table, ids in zip(self.tables, bags, strict=True):
            offsets = torch.arange(0, ids.numel(), ids.shape[1], device=ids.device)
            features.append(table(ids.flatten(), offsets))
        stacked = torch.stack(features, dim=1)  # [batch, 4, 8]
        dots = torch.bmm(stacked, stacked.transpose(1, 2))  # [batch, 4, 4]
        return self.top(torch.cat([x, dots[:, self.rows, self.cols]], dim=1))


def self_looped(edges: torch.Tensor, nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    loops = torch.arange(nodes, device=edges.device)
    return torch.cat([edges[0], loops]), torch.cat([edges[1], loops])


class GCNLayer(nn.Module):
    """One graph convolution (Kipf & Welling, 2017): symmetric degree normalisation,
    messages gathered by `index_select` and summed into their targets by `index_add_`."""

    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.linear = nn.Linear(inputs, outputs)

    def forward(self, x: torch.Tensor, source: torch.Tensor, target: torch.Tensor
                ) -> torch.Tensor:
        degree = torch.zeros(x.shape[0], device=x.device).index_add_(
            0, target, torch.ones_like(target, dtype=x.dtype))
        scale = degree.rsqrt()
        weight = scale.index_select(0, source) * scale.index_select(0, target)
        messages = self.linear(x).index_select(0, source) * weight[:, None]
        return torch.zeros(x.shape[0], messages.shape[1], device=x.device).index_add_(
            0, target, messages)


class TinyGCN(nn.Module):
    """A two-layer GCN for node classification, written without PyG."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = GCNLayer(8, 16), GCNLayer(16, 4)

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        source, target = self_looped(edges, x.shape[0])
        return self.second(self.first(x, source, target).relu(), source, target)


class GATLayer(nn.Module):
    """Graph attention (Velickovic et al., 2018): per-edge scores from the two ends'
    projections, LeakyReLU, a softmax over each node's incoming edges (the maximum by
    `scatter_reduce` amax, the sum by `scatter_add`), weighted messages summed by
    `scatter_add` into the targets; 2 heads concatenated."""

    def __init__(self, inputs: int, heads: int, width: int) -> None:
        super().__init__()
        self.heads, self.width = heads, width
        self.project = nn.Linear(inputs, heads * width, bias=False)
        self.source_score = nn.Parameter(torch.randn(heads, width) * 0.1)
        self.target_score = nn.Parameter(torch.randn(heads, width) * 0.1)

    def forward(self, x: torch.Tensor, source: torch.Tensor, target: torch.Tensor
                ) -> torch.Tensor:
        nodes = x.shape[0]
        h = self.project(x).view(nodes, self.heads, self.width)
        scores = nn.functional.leaky_relu(
            (h * self.source_score).sum(-1).index_select(0, source)
            + (h * self.target_score).sum(-1).index_select(0, target), 0.2)  # [edges, heads]
        index = target[:, None].expand_as(scores)
        top = torch.full((nodes, self.heads), float("-inf"), device=x.device).scatter_reduce(
            0, index, scores, "amax", include_self=True)
        weights = (scores - top.gather(0, index)).exp()
        total = torch.zeros(nodes, self.heads, device=x.device).scatter_add(0, index, weights)
        alpha = weights / total.gather(0, index)
        messages = h.index_select(0, source) * alpha[..., None]  # [edges, heads, width]
        out = torch.zeros_like(h).scatter_add(
            0, target[:, None, None].expand_as(messages), messages)
        return out.flatten(1)


class TinyGAT(nn.Module):
    """A two-layer GAT over an edge list with self loops, ELU between."""

    def __init__(self) -> None:
        super().__init__()
        self.first = GATLayer(8, 2, 8)
        self.second = GATLayer(16, 1, 4)

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        source, target = self_looped(edges, x.shape[0])
        return self.second(nn.functional.elu(self.first(x, source, target)), source, target)


class TinyGIN(nn.Module):
    """GIN (Xu et al., 2019, "How Powerful are Graph Neural Networks?"): (1 + eps) x plus
    the neighbours' sum (`index_add`), an MLP, a learnable eps, two layers."""

    def __init__(self) -> None:
        super().__init__()
        self.mlps = nn.ModuleList([mlp(8, 16, 16), mlp(16, 16, 4)])
        self.eps = nn.Parameter(torch.zeros(2))

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.mlps):
            summed = torch.zeros_like(x).index_add(0, edges[1], x.index_select(0, edges[0]))
            x = layer((1 + self.eps[i]) * x + summed)
            if i == 0:
                x = x.relu()
        return x


class SpectralConv2d(nn.Module):
    """The Fourier layer of an FNO: rfft2, the lowest modes (both signs of the first
    frequency) multiplied by complex weights (a real parameter viewed as complex) with an
    einsum, irfft2 back to the grid."""

    def __init__(self, channels: int, modes: int) -> None:
        super().__init__()
        self.modes = modes
        scale = 1 / (channels * channels)
        self.weights = nn.Parameter(scale * torch.rand(2, channels, channels, modes, modes, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        spectrum = torch.fft.rfft2(x)
        weights = torch.view_as_complex(self.weights)
        out = torch.zeros(batch, channels, height, width // 2 + 1, dtype=torch.cfloat,
                          device=x.device)
        m = self.modes
        out[:, :, :m, :m] = torch.einsum("bixy,ioxy->boxy", spectrum[:, :, :m, :m], weights[0])
        out[:, :, -m:, :m] = torch.einsum("bixy,ioxy->boxy", spectrum[:, :, -m:, :m],
                                          weights[1])
        return torch.fft.irfft2(out, s=(height, width))


class TinyFNO2d(nn.Module):
    """A 2D Fourier Neural Operator (Li et al., 2021, "Fourier Neural Operator for
    Parametric Partial Differential Equations"): a lift, two Fourier layers each beside a
    1x1 convolution, GELU, a projection to one output field (trained with MSE)."""

    def __init__(self) -> None:
        super().__init__()
        self.lift = nn.Conv2d(3, 8, 1)
        self.spectral = nn.ModuleList(SpectralConv2d(8, 4) for _ in range(2))
        self.pointwise = nn.ModuleList(nn.Conv2d(8, 8, 1) for _ in range(2))
        self.project = nn.Sequential(nn.Conv2d(8, 16, 1), nn.GELU(), nn.Conv2d(16, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lift(x)
        for spectral, pointwise in zip(self.spectral, self.pointwise, strict=True):
            x = nn.functional.gelu(spectral(x) + pointwise(x))
        return self.project(x)


class SwishFunction(torch.autograd.Function):
    """EfficientNet's memory-saving Swish (lukemelas/EfficientNet-PyTorch): only the input
    saved (`ctx.save_for_backward`), the sigmoid recomputed in backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        sigmoid = torch.sigmoid(x)
        return grad * (sigmoid * (1 + x * (1 - sigmoid)))


class GradientReversal(torch.autograd.Function):
    """The gradient reversal layer of DANN (Ganin & Lempitsky, 2015): identity forward, the
    gradient negated and scaled backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.neg() * 0.5


class StraightThrough(torch.autograd.Function):
    """A straight-through estimator (Bengio et al., 2013; binarized networks): sign forward,
    the gradient passed where |x| <= 1."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.sign(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype)


class TinyDANN(nn.Module):
    """Domain-adversarial training (DANN): a feature extractor with the memory-saving Swish,
    a binarized (straight-through) layer, a label head, and a domain head behind the
    gradient reversal layer; the two heads' logits concatenated."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Linear(32, 64)
        self.binary = nn.Linear(64, 64)
        self.label = nn.Linear(64, 10)
        self.domain = mlp(64, 16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = SwishFunction.apply(self.features(x))
        h = self.binary(StraightThrough.apply(h))
        return torch.cat([self.label(h), self.domain(GradientReversal.apply(h))], dim=-1)


class CheckpointedBlock(nn.Module):
    """A pre-norm transformer MLP block."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class TinyCheckpointed(nn.Module):
    """Activation checkpointing as users write it (Chen et al., 2016, "Training Deep Nets
    with Sublinear Memory Cost"): each block run through `torch.utils.checkpoint` with
    `use_reentrant=False` in the model's own forward while training."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(CheckpointedBlock(32) for _ in range(3))
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.training else block(x)
        return self.head(x)


class TinyTransformerDecoder(nn.Module):
    """The original Transformer's decoder (Vaswani et al., 2017) from torch.nn: token
    embeddings, `nn.TransformerDecoder` (2 layers, 4 heads) with a causal target mask,
    cross-attending to a memory with a key padding mask, a vocabulary head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(128, 32)
        layer = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, 2)
        self.head = nn.Linear(32, 128)

    def forward(self, ids: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(length, device=ids.device)
        padding = torch.zeros(memory.shape[:2], dtype=torch.bool, device=memory.device)
        padding[:, -2:] = True  # the last two memory positions are padding
        out = self.decoder(self.embed(ids), memory, tgt_mask=causal, tgt_is_causal=True,
                           memory_key_padding_mask=padding)
        return self.head(out)


class TinyMHA(nn.Module):
    """Self-attention with `nn.MultiheadAttention` (a key padding mask, the averaged
    attention weights returned as a model that reads them would), a residual and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padding = torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device)
        padding[:, -3:] = True
        out, weights = self.attention(x, x, x, key_padding_mask=padding)
        return self.head(x + out) + weights.sum(-1, keepdim=True)


class TinyGRU(nn.Module):
    """A GRU tagger (Cho et al., 2014): embeddings, a 2-layer bidirectional `nn.GRU`, a
    head over both directions."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(128, 16)
        self.gru = nn.GRU(16, 32, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(64, 128)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.embed(ids))
        return self.head(out)
