"""Predicted vs measured saving of graphmem's checkpoint suggestions, on a real training step.

    python benchmarks/checkpoint_saving.py [--device cpu|cuda]

For each model: graphmem suggests which modules to checkpoint for a memory budget (the
saving re-analysed by re-tracing the step with those modules wrapped), then the same
modules of the real model are wrapped in `torch.utils.checkpoint(..., use_reentrant=False)`
(what the suggestion's snippet does) and one Adam training step is measured before and after:
`torch.cuda.max_memory_allocated` above the step's start on CUDA, torch.profiler's memory
deltas on the CPU (graphmem/verify/runners/torch_runner.py). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphmem import analyze_torch
from graphmem.frontends.torch.loader import TensorSpec
from graphmem.verify.runners.torch_runner import measure_step
from tests.models import ResNet18
from tests.test_checkpoint_search import MLP
from tests.torch_models.small import TinyGPT

MIB = 1 << 20
# name, model factory, input, budget as a share of the unchanged step's peak
CASES: list[tuple[str, Callable[[], nn.Module], TensorSpec, float]] = [
    ("MLP 4x128", lambda: MLP(width=128, depth=4), TensorSpec((1024, 128), torch.float32), 0.7),
    ("TinyGPT", TinyGPT, TensorSpec((32, 64), torch.int64), 0.75),
    ("ResNet18", ResNet18, TensorSpec((16, 3, 224, 224), torch.float32), 0.8),
]


def suggested_modules(model: nn.Module, spec: TensorSpec, share: float,
                      policy: str) -> tuple[tuple[str, ...], int, int]:
    base = analyze_torch(model, [spec], train=True, optimizer="adam", suggest=False,
                         plan=False, amp_policy=policy)
    budget = int(int(base.liveness.peak_bytes) * share)
    suggested = analyze_torch(model, [spec], train=True, optimizer="adam", suggest=True,
                              memory_budget_bytes=budget, plan=False, amp_policy=policy)
    assert suggested.suggestions is not None
    cards = [s for s in suggested.suggestions.suggestions if s.kind == "checkpoint"]
    if not cards or cards[0].saves_bytes is None:
        return (), budget, 0
    return cards[0].targets, budget, cards[0].saves_bytes


def wrap(model: nn.Module, paths: tuple[str, ...]) -> None:
    for path in paths:
        module = model.get_submodule(path)
        module.forward = functools.partial(checkpoint, module.forward, use_reentrant=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    policy = "cuda" if args.device.startswith("cuda") else "cpu"
    print(f"| model | input | budget | checkpointed | predicted saving | measured saving |"
          f" error | measured peak before -> after ({args.device}) |")
    print("|---|---|---:|---|---:|---:|---:|---|")
    for name, factory, spec, share in CASES:
        torch.manual_seed(0)
        model = factory()
        paths, budget, predicted = suggested_modules(model, spec, share, policy)
        before = measure_step(model, [spec], True, "adam", device=args.device).peak_bytes
        wrap(model, paths)
        after = measure_step(model, [spec], True, "adam", device=args.device).peak_bytes
        measured = before - after
        error = f"{(predicted - measured) / measured:+.1%}" if measured else "-"
        shape = "x".join(str(d) for d in spec.shape)
        print(f"| {name} | {shape} | {budget / MIB:.1f} MiB | {', '.join(paths) or '-'} |"
              f" {predicted:,} | {measured:,} | {error} | {before:,} -> {after:,} |",
              flush=True)


if __name__ == "__main__":
    main()
