"""CNNs whose CPU training step has kernels' scratch (tests/test_cpu_scratch.py).

A ResNet of one BasicBlock per stage (NCHW: oneDNN's blocked copies in every convolution
and its backward) and a small ConvNeXt (patchify stem, depthwise 7x7 + LayerNorm + pointwise
Linear blocks, whose permutes make the depthwise convolutions' tensors channels-last).
"""

from __future__ import annotations

from torch import Tensor, nn

from tests.models import BasicBlock, ResNet


def build_resnet_small() -> nn.Module:
    return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)


class LayerNorm2d(nn.Module):
    """LayerNorm over the channels of an NCHW tensor, as ConvNeXt's stem and downsamplers."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)  # N, H, W, C
        y = self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, dims: tuple[int, ...] = (32, 64, 128), num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0])]
        for i, dim in enumerate(dims):
            if i:
                layers += [LayerNorm2d(dims[i - 1]), nn.Conv2d(dims[i - 1], dim, 2, 2)]
            layers += [ConvNeXtBlock(dim), ConvNeXtBlock(dim)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x).mean((2, 3)))


def build_convnext_small() -> nn.Module:
    return ConvNeXt()
