"""The zoo's four CNNs, built by hand in plain torch (torchvision does not import beside
torch 2.13 here): tests/zoo_models.py lists them with the transformers architectures."""

from __future__ import annotations

from typing import Any

from torch import nn


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
