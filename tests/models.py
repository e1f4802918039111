"""Reference architectures in plain torch.nn, for the samples and the tests.

Nothing here imports graphmem, torchvision or transformers: the classes are written out so the
parameter counts can be checked against the published figures (see each class's docstring) and
the ONNX samples in `samples/` can be regenerated with `python samples/make_samples.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F


def count_params(model: nn.Module) -> int:
    """Trainable parameters, shared (tied) tensors counted once, buffers not counted."""
    return sum(p.numel() for p in model.parameters())  # parameters() already dedups


# --- ResNet (torchvision v1.5: the stride sits on the 3x3 conv of the bottleneck) -------------


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs with BN; identity or conv1x1+BN shortcut."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int = 1,
                 downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = conv3x3(cin, width, stride)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(width, width)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided), 1x1 expand by 4; BN after each conv."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1,
                 downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = conv1x1(cin, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, width * self.expansion)
        self.bn3 = nn.BatchNorm2d(width * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + identity)


Block = type[BasicBlock] | type[Bottleneck]


class ResNet(nn.Module):
    """torchvision's ResNet: 7x7 stem, maxpool, four stages, global average pool, fc."""

    def __init__(self, block: Block, layers: list[int], num_classes: int = 1000) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block: Block, width: int, blocks: int, stride: int = 1) -> nn.Sequential:
        out = width * block.expansion
        downsample = None
        if stride != 1 or self.inplanes != out:
            downsample = nn.Sequential(conv1x1(self.inplanes, out, stride), nn.BatchNorm2d(out))
        layers = [block(self.inplanes, width, stride, downsample)]
        self.inplanes = out
        layers += [block(out, width) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def ResNet50(num_classes: int = 1000) -> ResNet:
    """torchvision resnet50: Bottleneck [3, 4, 6, 3]; 25,557,032 parameters."""
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes)


def ResNet18(num_classes: int = 1000) -> ResNet:
    """torchvision resnet18: BasicBlock [2, 2, 2, 2]; 11,689,512 parameters."""
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes)


# --- MobileNetV2 (torchvision) ----------------------------------------------------------------


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round channels to a multiple of 8 without going more than 10% below (torchvision)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def conv_bn_relu6(cin: int, cout: int, kernel: int = 3, stride: int = 1,
                  groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(inplace=True),
    )


class InvertedResidual(nn.Module):
    """1x1 expand (none when t=1), 3x3 depthwise, 1x1 linear projection; residual if same shape."""

    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = round(cin * expand_ratio)
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(conv_bn_relu6(cin, hidden, kernel=1))
        layers += [
            conv_bn_relu6(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return x + y if self.use_res_connect else y


# (expansion t, channels c, repeats n, first stride s), from the MobileNetV2 paper's table 2.
MOBILENET_V2_SETTING = [
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
    (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
]


class MobileNetV2(nn.Module):
    """torchvision mobilenet_v2; at width 1.0 it has 3,504,872 parameters."""

    def __init__(self, width: float = 1.0, num_classes: int = 1000) -> None:
        super().__init__()
        cin = make_divisible(32 * width)
        self.last_channel = make_divisible(1280 * max(1.0, width))
        features: list[nn.Module] = [conv_bn_relu6(3, cin, stride=2)]
        for t, c, n, s in MOBILENET_V2_SETTING:
            cout = make_divisible(c * width)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(conv_bn_relu6(cin, self.last_channel, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(self.last_channel, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# --- TinyCNN ----------------------------------------------------------------------------------


class TinyCNN(nn.Module):
    """conv-BN-ReLU stem, maxpool, a residual block, a strided conv, global pool, linear.

    With the defaults (channels 16, 10 classes): 10,138 parameters.
    """

    def __init__(self, channels: int = 16, num_classes: int = 10) -> None:
        super().__init__()
        wide = 2 * channels
        self.stem = conv_bn_relu(3, channels)
        self.pool = nn.MaxPool2d(2)
        self.block = nn.Sequential(conv_bn_relu(channels, channels), conv_bn(channels, channels))
        self.down = conv_bn_relu(channels, wide, stride=2)
        self.fc = nn.Linear(wide, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.stem(x))
        x = F.relu(x + self.block(x))  # the residual add
        x = self.down(x).mean(dim=(2, 3))  # global average pool
        return self.fc(x)


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout))


def conv_bn_relu(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(*conv_bn(cin, cout, stride), nn.ReLU())


# --- GPT-2 (Hugging Face gpt2 small) ----------------------------------------------------------


def flat_linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """Apply `layer` to x viewed as 2-D, as Hugging Face's GPT-2 Conv1D does.

    [b, t, c] -> [b*t, c] @ W^T + bias -> [b, t, n]: the export then holds Gemm nodes on
    [batch*seq, n] values like HF's own GPT-2 exports, not 3-D MatMuls.
    """
    return layer(x.reshape(-1, layer.in_features)).view(*x.shape[:-1], layer.out_features)


class CausalSelfAttention(nn.Module):
    """One fused qkv Linear (n_embd -> 3 n_embd), masked softmax attention, output projection."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        # Widths are kept as Python ints: splitting by a traced `x.shape` value makes the
        # TorchScript exporter warn that it turned a tensor into a constant.
        self.n_embd, self.n_head, self.head_dim = n_embd, n_head, n_embd // n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = flat_linear(self.c_attn, x).split(self.n_embd, dim=2)
        # [b, t, c] -> [b, heads, t, head_dim]
        q, k, v = (z.view(b, t, self.n_head, self.head_dim).transpose(1, 2) for z in (q, k, v))
        y = causal_attention(q, k, v, self.head_dim**-0.5)
        return flat_linear(self.c_proj, y.transpose(1, 2).reshape(b, t, self.n_embd))


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """softmax(q k^T * scale + causal mask) v, written out so each op shows in the graph."""
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * scale  # [b, h, t, d] @ [b, h, d, t] -> [b, h, t, t]
    # Built from the runtime seq length (not a sliced [n_ctx, n_ctx] buffer) so the export keeps
    # `seq` symbolic and carries no mask initializer.
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v


class GPT2MLP(nn.Module):
    """c_fc (n -> 4n), tanh-approximated GELU, c_proj (4n -> n); Hugging Face's names."""

    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return flat_linear(self.c_proj, self.act(flat_linear(self.c_fc, x)))


class GPT2Block(nn.Module):
    """Pre-LN: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = GPT2MLP(n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """Hugging Face GPT-2; the defaults are gpt2 small: 124,439,808 parameters (lm_head tied).

    The small sample config `GPT2(vocab=512, n_ctx=128, n_embd=64, n_layer=2, n_head=4)` has
    141,056 parameters.
    """

    def __init__(self, vocab: int = 50257, n_ctx: int = 1024, n_embd: int = 768,
                 n_layer: int = 12, n_head: int = 12) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(n_ctx, n_embd)
        self.h = nn.ModuleList(GPT2Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one tensor, counted once

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# --- Llama-style decoder ----------------------------------------------------------------------


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight (no mean subtraction, no bias)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary_tables(head_dim: int, max_seq: int, base: float = 10000.0) -> torch.Tensor:
    """cos and sin of position * inv_freq, stacked: [2, max_seq, head_dim]."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)  # HF layout: the two halves share frequencies
    return torch.stack((angles.cos(), angles.sin()))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_half(x) * sin  # [b, h, t, d] * [t, d]


class LlamaAttention(nn.Module):
    """q, k, v, o projections without bias; rotary on q and k; causal softmax attention."""

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.dim, self.n_heads, self.head_dim = dim, n_heads, dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape

        def heads(z: torch.Tensor) -> torch.Tensor:  # [b, t, c] -> [b, heads, t, head_dim]
            return z.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)

        q = apply_rotary(heads(self.wq(x)), cos, sin)
        k = apply_rotary(heads(self.wk(x)), cos, sin)
        y = causal_attention(q, k, heads(self.wv(x)), self.head_dim**-0.5)
        return self.wo(y.transpose(1, 2).reshape(b, t, self.dim))


class SwiGLU(nn.Module):
    """w2(silu(w1 x) * w3 x), no biases."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def llama_hidden(dim: int, multiple_of: int = 32) -> int:
    """Llama's MLP width: 2/3 of 4*dim, rounded up to a multiple (64 -> 192)."""
    hidden = int(2 * 4 * dim / 3)
    return multiple_of * math.ceil(hidden / multiple_of)


class LlamaBlock(nn.Module):
    def __init__(self, dim: int, n_heads: int, hidden: int) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = LlamaAttention(dim, n_heads)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = SwiGLU(dim, hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class TinyLlama(nn.Module):
    """Llama-style decoder: RMSNorm, rotary, SwiGLU, no biases, untied lm head.

    Parameters: 2 * vocab * dim + dim + n_layers * (4 dim^2 + 3 dim hidden + 2 dim), with
    hidden = llama_hidden(dim). The defaults (vocab 512, dim 64, 2 layers, 4 heads, hidden 192)
    give 172,352 parameters. The rotary cos/sin table is a buffer, not a parameter
    (2 * max_seq * head_dim floats: 4,096 at the defaults).
    """

    def __init__(self, vocab: int = 512, dim: int = 64, n_layers: int = 2, n_heads: int = 4,
                 max_seq: int = 128) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        hidden = llama_hidden(dim)
        self.layers = nn.ModuleList(LlamaBlock(dim, n_heads, hidden) for _ in range(n_layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("rotary", rotary_tables(dim // n_heads, max_seq), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        t = input_ids.shape[1]
        cos, sin = self.rotary[0, :t], self.rotary[1, :t]  # sliced to the runtime seq length
        x = self.tok_embeddings(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.output(self.norm(x))


# --- Small configurations shipped with full weights -------------------------------------------


def tiny_gpt() -> GPT2:
    """GPT2 class at vocab 512, context 128, width 64, 2 layers, 4 heads: 141,056 parameters."""
    return GPT2(vocab=512, n_ctx=128, n_embd=64, n_layer=2, n_head=4)


def tiny_llama() -> TinyLlama:
    """TinyLlama at vocab 512, width 64, 2 layers, 4 heads: 172,352 parameters."""
    return TinyLlama(vocab=512, dim=64, n_layers=2, n_heads=4, max_seq=128)


# Expected parameter counts, for the tests (published figures for the torchvision / HF models).
EXPECTED_PARAMS: dict[str, tuple[Callable[[], nn.Module], int]] = {
    "resnet50": (ResNet50, 25_557_032),
    "resnet18": (ResNet18, 11_689_512),
    "mobilenet_v2": (MobileNetV2, 3_504_872),
    "gpt2": (GPT2, 124_439_808),
    "tiny_cnn": (TinyCNN, 10_138),
    "tiny_gpt": (tiny_gpt, 141_056),
    "tiny_llama": (tiny_llama, 172_352),
}


class ResBlockNet(nn.Module):
    """A strided BasicBlock with a 1x1 downsample, mean over H and W, a linear head: the
    resnet_block of the measured CPU steps (tests/test_onnx_training.py, test_torch_scratch.py)."""

    def __init__(self) -> None:
        super().__init__()
        shortcut = nn.Sequential(conv1x1(16, 32, 2), nn.BatchNorm2d(32))
        self.block = BasicBlock(16, 32, 2, shortcut)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.block(x).mean(dim=(2, 3)))
