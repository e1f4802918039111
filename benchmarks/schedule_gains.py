"""What the best order and the arena plan give on real exported models.

    python benchmarks/schedule_gains.py [--gpu t4]

Exports four small PyTorch models with a dynamic batch (a bottleneck ResNet, an Inception
net, a U-Net with skip connections, a GPT) to a temporary folder, adds samples/*.onnx where
present, and prints per model: the activation peak per sample in the model's order and in the
best order found (batch free, so these are the batch coefficients of the peak formulas), the
lower bound, the method, the arena's fragmentation at the probe batch, and the largest batch
on the GPU with its check by re-analysis at max_batch and max_batch + 1.
Results are recorded in benchmarks/results/schedule_speed.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphmem import analyze_onnx
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes
from tests.torch_models.small import TinyGPT

REPO = Path(__file__).resolve().parent.parent


class Bottleneck(nn.Module):
    def __init__(self, channels: int, mid: int, stride: int = 1) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(channels, mid, 1)
        self.c2 = nn.Conv2d(mid, mid, 3, stride, 1)
        self.c3 = nn.Conv2d(mid, channels, 1)
        self.down = nn.Conv2d(channels, channels, 1, stride) if stride > 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c3(torch.relu(self.c2(torch.relu(self.c1(x)))))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNetish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 7, 2, 3)
        self.layers = nn.Sequential(*[Bottleneck(64, 32, 2 if i % 3 == 0 else 1)
                                      for i in range(9)])
        self.fc = nn.Linear(64, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.layers(torch.relu(self.stem(x))).mean((2, 3)))


class Inception(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.b1 = nn.Conv2d(channels, 32, 1)
        self.b2 = nn.Sequential(nn.Conv2d(channels, 96, 1), nn.ReLU(),
                                nn.Conv2d(96, 64, 3, padding=1))
        self.b3 = nn.Sequential(nn.Conv2d(channels, 16, 1), nn.ReLU(),
                                nn.Conv2d(16, 32, 5, padding=2))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(channels, 32, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1))


class GoogLeNetish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 160, 7, 2, 3)
        self.blocks = nn.Sequential(*[Inception(160) for _ in range(4)])
        self.fc = nn.Linear(160, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.blocks(torch.relu(self.stem(x))).mean((2, 3)))


class UNetish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.e1 = nn.Conv2d(3, 32, 3, 1, 1)
        self.e2 = nn.Conv2d(32, 64, 3, 2, 1)
        self.e3 = nn.Conv2d(64, 128, 3, 2, 1)
        self.d2 = nn.ConvTranspose2d(128, 64, 2, 2)
        self.d1 = nn.ConvTranspose2d(128, 32, 2, 2)
        self.out = nn.Conv2d(64, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.e1(x))
        b = torch.relu(self.e2(a))
        c = torch.relu(self.e3(b))
        y = torch.cat([self.d1(torch.cat([self.d2(c), b], 1)), a], 1)
        return self.out(y)


def export_models(folder: Path) -> list[tuple[Path, dict[str, int]]]:
    models = [
        ("resnetish", ResNetish(), torch.randn(2, 3, 224, 224), {0: "batch"}, {}),
        ("googlenetish", GoogLeNetish(), torch.randn(2, 3, 224, 224), {0: "batch"}, {}),
        ("unetish", UNetish(), torch.randn(2, 3, 128, 128), {0: "batch"}, {}),
        ("tinygpt", TinyGPT(width=256, heads=8, layers=4, context=512),
         torch.randint(0, 100, (2, 128)), {0: "batch", 1: "seq"}, {"seq": 512}),
    ]
    exported = []
    for name, model, example, axes, dims in models:
        path = folder / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model.eval(), (example,), str(path), dynamo=False,
                              opset_version=17, input_names=["x"], dynamic_axes={"x": axes})
        exported.append((path, dims))
    return exported


def per_sample(value: SymInt, batch_dim: str) -> str:
    """The coefficient of batch in a peak formula (bytes per sample), formatted."""
    probe = value.evaluate({batch_dim: 2}) - value.evaluate({batch_dim: 1})
    return format_bytes(probe)


def report(path: Path, dims: dict[str, int], gpu: str) -> None:
    start = time.perf_counter()
    analysis = analyze_onnx(path, dims=dims, gpu=gpu)
    seconds = time.perf_counter() - start
    schedule, arena, max_batch = analysis.schedule, analysis.arena, analysis.max_batch
    batch_dim = analysis.dims.batch_dim
    assert schedule is not None and arena is not None and max_batch is not None
    model_peak = schedule.model_order_peak_bytes
    best_peak = schedule.best_order_peak_bytes
    line = f"{path.stem:<14} {len(analysis.graph.nodes):>5} nodes {seconds:5.2f} s"
    if batch_dim and batch_dim not in analysis.dims.bound:
        gain = 1 - (best_peak.evaluate({batch_dim: 64}) / model_peak.evaluate({batch_dim: 64}))
        line += (f" | per sample: model order {per_sample(model_peak, batch_dim)}, best"
                 f" {per_sample(best_peak, batch_dim)} (-{gain:.1%} at batch 64), lower bound"
                 f" {per_sample(schedule.lower_bound_bytes, batch_dim)}")
    line += f" | {schedule.method}{', proven' if schedule.proven_optimal else ''}"
    line += f" | arena fragmentation {arena.fragmentation:.1%}"
    if max_batch.max_batch:
        check = [analyze_onnx(path, dims=dims, batch=b, gpu=gpu, plan=False).fit
                 for b in (max_batch.max_batch, max_batch.max_batch + 1)]
        verdicts = "/".join("fits" if fit and fit.fits else "no" for fit in check)
        line += f" | max batch on {gpu} {max_batch.max_batch} (re-analysis: {verdicts})"
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="t4")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        models = export_models(Path(folder))
        models += [(path, {}) for path in sorted((REPO / "samples").glob("*.onnx"))]
        for path, dims in models:
            report(path, dims, args.gpu)


if __name__ == "__main__":
    main()
