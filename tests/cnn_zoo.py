"""Standard CNNs in plain torch.nn, laid out as torchvision builds them (torchvision does not
import here), for tests/test_cnn_zoo.py. Layer configurations follow the papers and
torchvision's model builders, so parameter counts match torchvision's model docs exactly:
https://pytorch.org/vision/stable/models.html (each builder's page lists "num_params" and
"GFLOPS"; torchvision's GFLOPS are multiply-accumulates, i.e. GMACs).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

# --- VGG-16 (configuration "D", no BatchNorm) -------------------------------------------------

VGG16_LAYERS: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                                 512, 512, 512, "M", 512, 512, 512, "M"]


class VGG16(nn.Module):
    """Simonyan & Zisserman 2014; torchvision vgg16: 138,357,544 params, 15.47 GMACs."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for item in VGG16_LAYERS:
            if item == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, int(item), 3, padding=1), nn.ReLU(inplace=True)]
                cin = int(item)
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(), nn.Linear(4096, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# --- SqueezeNet 1.1 ----------------------------------------------------------------------------


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand1x1: int, expand3x3: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.expand1x1 = nn.Conv2d(squeeze, expand1x1, 1)
        self.expand3x3 = nn.Conv2d(squeeze, expand3x3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.expand1x1(s)), F.relu(self.expand3x3(s))], 1)


class SqueezeNet11(nn.Module):
    """Iandola et al. 2016, v1.1; torchvision squeezenet1_1: 1,235,496 params, 0.35 GMACs."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, stride=2), nn.ReLU(True), pool,
            Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), pool,
            Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool,
            Fire(256, 48, 192, 192), Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256), Fire(512, 64, 256, 256))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(512, num_classes, 1),
                                        nn.ReLU(True), nn.AdaptiveAvgPool2d(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


# --- DenseNet-121 (growth 32, blocks 6-12-24-16, bottleneck 4x) --------------------------------


def bn_relu_conv(cin: int, cout: int, kernel: int) -> nn.Sequential:
    return nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(True),
                         nn.Conv2d(cin, cout, kernel, padding=kernel // 2, bias=False))


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.bottleneck = bn_relu_conv(cin, bn_size * growth, 1)
        self.conv = bn_relu_conv(bn_size * growth, growth, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.conv(self.bottleneck(x))], 1)


class DenseNet121(nn.Module):
    """Huang et al. 2016; torchvision densenet121: 7,978,856 params, 2.83 GMACs (see tests)."""

    def __init__(self, growth: int = 32, blocks: tuple[int, ...] = (6, 12, 24, 16),
                 init_features: int = 64, bn_size: int = 4, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, init_features, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(init_features), nn.ReLU(True), nn.MaxPool2d(3, 2, 1)]
        channels = init_features
        for index, count in enumerate(blocks):
            for _ in range(count):
                layers.append(DenseLayer(channels, growth, bn_size))
                channels += growth
            if index != len(blocks) - 1:  # transition: halve channels and resolution
                layers += [bn_relu_conv(channels, channels // 2, 1), nn.AvgPool2d(2, 2)]
                channels //= 2
        layers += [nn.BatchNorm2d(channels), nn.ReLU(True), nn.AdaptiveAvgPool2d(1)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


# --- Inception-v3 (torchvision's structure; the aux head runs only in training) ---------------


class BasicConv(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int | tuple[int, int],
                 stride: int = 1, padding: int | tuple[int, int] = 0) -> None:
        super().__init__(nn.Conv2d(cin, cout, kernel, stride, padding, bias=False),
                         nn.BatchNorm2d(cout, eps=0.001), nn.ReLU(True))


def conv_1x7(cin: int, cout: int) -> BasicConv:
    return BasicConv(cin, cout, (1, 7), padding=(0, 3))


def conv_7x1(cin: int, cout: int) -> BasicConv:
    return BasicConv(cin, cout, (7, 1), padding=(3, 0))


class Branches(nn.Module):
    """Runs each branch on the input and concatenates along channels."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([branch(x) for branch in self.branches], 1)


def pool_branch(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.AvgPool2d(3, 1, 1), BasicConv(cin, cout, 1))


def inception_a(cin: int, pool_features: int) -> Branches:
    return Branches(
        BasicConv(cin, 64, 1),
        nn.Sequential(BasicConv(cin, 48, 1), BasicConv(48, 64, 5, padding=2)),
        nn.Sequential(BasicConv(cin, 64, 1), BasicConv(64, 96, 3, padding=1),
                      BasicConv(96, 96, 3, padding=1)),
        pool_branch(cin, pool_features))


def inception_b(cin: int) -> Branches:
    return Branches(
        BasicConv(cin, 384, 3, stride=2),
        nn.Sequential(BasicConv(cin, 64, 1), BasicConv(64, 96, 3, padding=1),
                      BasicConv(96, 96, 3, stride=2)),
        nn.MaxPool2d(3, 2))


def inception_c(cin: int, c7: int) -> Branches:
    return Branches(
        BasicConv(cin, 192, 1),
        nn.Sequential(BasicConv(cin, c7, 1), conv_1x7(c7, c7), conv_7x1(c7, 192)),
        nn.Sequential(BasicConv(cin, c7, 1), conv_7x1(c7, c7), conv_1x7(c7, c7),
                      conv_7x1(c7, c7), conv_1x7(c7, 192)),
        pool_branch(cin, 192))


def inception_d(cin: int) -> Branches:
    return Branches(
        nn.Sequential(BasicConv(cin, 192, 1), BasicConv(192, 320, 3, stride=2)),
        nn.Sequential(BasicConv(cin, 192, 1), conv_1x7(192, 192), conv_7x1(192, 192),
                      BasicConv(192, 192, 3, stride=2)),
        nn.MaxPool2d(3, 2))


def split_3x3(cin: int) -> Branches:
    return Branches(BasicConv(cin, 384, (1, 3), padding=(0, 1)),
                    BasicConv(cin, 384, (3, 1), padding=(1, 0)))


def inception_e(cin: int) -> Branches:
    return Branches(
        BasicConv(cin, 320, 1),
        nn.Sequential(BasicConv(cin, 384, 1), split_3x3(384)),
        nn.Sequential(BasicConv(cin, 448, 1), BasicConv(448, 384, 3, padding=1), split_3x3(384)),
        pool_branch(cin, 192))


class InceptionAux(nn.Module):
    def __init__(self, cin: int, num_classes: int) -> None:
        super().__init__()
        self.conv0 = BasicConv(cin, 128, 1)
        self.conv1 = BasicConv(128, 768, 5)
        self.fc = nn.Linear(768, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(self.conv0(F.avg_pool2d(x, 5, stride=3)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InceptionV3(nn.Module):
    """Szegedy et al. 2015; torchvision inception_v3: 27,161,264 params with the aux head
    (23,834,568 without), 5.71 GMACs at 299x299. eval() skips the aux head."""

    def __init__(self, num_classes: int = 1000, aux_logits: bool = True) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            BasicConv(3, 32, 3, stride=2), BasicConv(32, 32, 3), BasicConv(32, 64, 3, padding=1),
            nn.MaxPool2d(3, 2), BasicConv(64, 80, 1), BasicConv(80, 192, 3), nn.MaxPool2d(3, 2),
            inception_a(192, 32), inception_a(256, 64), inception_a(288, 64),
            inception_b(288), inception_c(768, 128), inception_c(768, 160),
            inception_c(768, 160), inception_c(768, 192))
        self.aux = InceptionAux(768, num_classes) if aux_logits else None
        self.tail = nn.Sequential(inception_d(768), inception_e(1280), inception_e(2048),
                                  nn.AdaptiveAvgPool2d(1), nn.Dropout(0.5))
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        aux = self.aux(x) if self.aux is not None and self.training else None
        logits = self.fc(torch.flatten(self.tail(x), 1))
        return logits if aux is None else logits + 0.3 * aux


# --- EfficientNet-B0 (MBConv, SiLU, squeeze-excitation) ----------------------------------------

# (expand ratio, kernel, stride, in channels, out channels, layers) of torchvision's B0
EFFICIENTNET_B0_STAGES = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
                          (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
                          (6, 3, 1, 192, 320, 1)]


def conv_bn_silu(cin: int, cout: int, kernel: int, stride: int = 1,
                 groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout, eps=1e-3), nn.SiLU(True))


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.fc2(F.silu(self.fc1(F.adaptive_avg_pool2d(x, 1))))
        return x * torch.sigmoid(scale)


class MBConv(nn.Module):
    def __init__(self, expand: int, kernel: int, stride: int, cin: int, cout: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = [conv_bn_silu(cin, hidden, 1)] if expand != 1 else []
        layers += [conv_bn_silu(hidden, hidden, kernel, stride, groups=hidden),
                   SqueezeExcitation(hidden, max(1, cin // 4)),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout, eps=1e-3)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout  # stochastic depth is identity in eval

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.residual else self.block(x)


class EfficientNetB0(nn.Module):
    """Tan & Le 2019; torchvision efficientnet_b0: 5,288,548 params, 0.39 GMACs."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn_silu(3, 32, 3, stride=2)]
        for expand, kernel, stride, cin, cout, count in EFFICIENTNET_B0_STAGES:
            for index in range(count):
                layers.append(MBConv(expand, kernel, stride if index == 0 else 1,
                                     cin if index == 0 else cout, cout))
        layers += [conv_bn_silu(320, 1280, 1), nn.AdaptiveAvgPool2d(1)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


# --- ConvNeXt-Tiny -----------------------------------------------------------------------------


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor, through NHWC as torchvision does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
        y = self.pwconv2(F.gelu(self.pwconv1(y))).permute(0, 3, 1, 2)
        return x + self.layer_scale * y  # stochastic depth is identity in eval


class ConvNeXtTiny(nn.Module):
    """Liu et al. 2022; torchvision convnext_tiny: 28,589,128 params, 4.46 GMACs."""

    def __init__(self, depths: tuple[int, ...] = (3, 3, 9, 3),
                 dims: tuple[int, ...] = (96, 192, 384, 768), num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, stride=4),
                                   LayerNorm2d(dims[0], eps=1e-6)]
        for index, (depth, dim) in enumerate(zip(depths, dims, strict=True)):
            layers += [ConvNeXtBlock(dim) for _ in range(depth)]
            if index != len(dims) - 1:
                layers += [LayerNorm2d(dim, eps=1e-6), nn.Conv2d(dim, dims[index + 1], 2, 2)]
        self.features = nn.Sequential(*layers)
        self.head_norm = LayerNorm2d(dims[-1], eps=1e-6)
        self.fc = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head_norm(F.adaptive_avg_pool2d(self.features(x), 1))
        return self.fc(torch.flatten(x, 1))
