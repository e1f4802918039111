"""Kernels' scratch on the CPU: what each aten op of a conv layer's forward and backward
allocates and frees inside itself, over a grid of shapes.

`python benchmarks/cpu_scratch.py [--dtype bfloat16] [--raw]` runs, per row, one Conv2d's
forward and backward (input gradient and weight gradient) under torch.profiler and prints, for
each outermost aten kernel with scratch, the bytes it returned and its scratch (how far the
running sum of its allocations rose above them: graphmem/verify/runners/torch_runner.py
`kernel_scratch`), next to graphmem's rule for it (graphmem/runtime_models/torch_cpu.py).
`--raw` lists every allocation inside those kernels. Results: benchmarks/results/cpu_scratch.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphmem.verify.runners import torch_runner

# (batch, c_in, c_out, size, kernel, stride, groups)
GRID = [
    (8, 3, 16, 32, 3, 1, 1),
    (8, 16, 16, 32, 3, 1, 1),
    (8, 16, 32, 32, 3, 2, 1),
    (8, 32, 32, 16, 1, 1, 1),
    (8, 32, 64, 16, 1, 2, 1),
    (8, 64, 64, 16, 3, 1, 1),
    (2, 64, 64, 16, 3, 1, 1),
    (8, 3, 64, 64, 7, 2, 1),
    (8, 32, 32, 16, 7, 1, 32),
    (8, 64, 64, 16, 7, 1, 64),
    (8, 64, 64, 16, 3, 1, 64),
    (8, 64, 64, 16, 3, 2, 64),
    (8, 64, 64, 16, 3, 1, 4),
    (8, 96, 96, 28, 7, 1, 96),
]


def measure(row: tuple[int, ...], dtype: torch.dtype) -> list[torch_runner.KernelScratch]:
    batch, c_in, c_out, size, kernel, stride, groups = row
    conv = nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups).to(dtype)
    x = torch.randn(batch, c_in, size, size, dtype=dtype, requires_grad=True)

    def step() -> None:
        out = conv(x)
        out.backward(torch.ones_like(out))

    step()  # warm up: oneDNN's primitive caches
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch_runner._quiet_stderr(), torch.profiler.profile(
            activities=activities, profile_memory=True) as profile:
        step()
    return torch_runner.kernel_scratch(profile)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--raw", action="store_true")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.dtype}")
    print("| N | Cin | Cout | HxW | k | s | g | kernel | net B | scratch B |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in GRID:
        for call in measure(row, dtype):
            if call.scratch_bytes <= 0:
                continue
            cells = " | ".join(str(v) for v in row)
            print(f"| {cells} | {call.kernel} | {call.net_bytes:,} | {call.scratch_bytes:,} |")
            if args.raw:
                print(f"|   raw: {', '.join(f'{size:+,}' for size in call.allocations)} |")


if __name__ == "__main__":
    main()
