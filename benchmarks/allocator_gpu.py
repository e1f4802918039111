"""PyTorch's CUDA caching allocator on a real GPU against graphmem's simulation of it.

Run on a machine with a CUDA GPU: `PYTHONPATH=. python3 benchmarks/allocator_gpu.py`.
Prints markdown: (a) synthetic alloc/free sequences replayed with torch.empty, measured
max_memory_allocated / max_memory_reserved against `simulate_caching_allocator`; (c) the CUDA
context and library workspaces (benchmarks/gpu_context.py); (b) real training and inference
steps of small models, each in a fresh process, against graphmem's analyze_torch +
torch_cuda_estimate (graphmem/runtime_models/torch_cuda.py).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import gpu_context
from graphmem import analyze_torch
from graphmem.devices.gpus import find_gpu
from graphmem.frontends.torch.trace import cross_entropy_loss
from graphmem.runtime_models.cuda_allocator import AllocatorEvent, simulate_caching_allocator
from graphmem.runtime_models.torch_cuda import cuda_overhead, torch_cuda_estimate
from tests.models import ResNet18
from tests.torch_models.small import ConvNet, TinyGPT

MIB = 1 << 20


def synthetic_sequences() -> dict[str, list[AllocatorEvent]]:
    def allocs(*sizes: int) -> list[AllocatorEvent]:
        return [("alloc", i, size) for i, size in enumerate(sizes)]

    return {
        "1 B": allocs(1),
        "1 MiB + (1 MiB + 1 B)": allocs(MIB, MIB + 1),
        "5 MiB x2": allocs(5 * MIB, 5 * MIB),
        "11 MiB": allocs(11 * MIB),
        "10 MiB + 1 B": allocs(10 * MIB + 1),
        "hole reuse": [*allocs(6 * MIB, 6 * MIB), ("free", 0, 6 * MIB), ("alloc", 2, 8 * MIB),
                       ("alloc", 3, 7 * MIB), ("alloc", 4, 5 * MIB)],
        "coalesce": [*allocs(4 * MIB, 4 * MIB, 4 * MIB), ("free", 0, 4 * MIB),
                     ("free", 1, 4 * MIB), ("alloc", 3, 8 * MIB), ("alloc", 4, 9 * MIB)],
        "small pool": [*allocs(*[300_000] * 8), *[("free", i, 300_000) for i in (1, 2, 5)],
                       ("alloc", 8, 700_000), ("alloc", 9, 600_000)],
        "random 1 (mixed)": random_sequence(1, 600),
        "random 2 (mixed)": random_sequence(2, 600),
        "random 3 (small)": random_sequence(3, 600, max_bytes=MIB),
    }


def random_sequence(seed: int, count: int, max_bytes: int = 64 * MIB) -> list[AllocatorEvent]:
    """Log-uniform sizes from 1 B to `max_bytes`; a random live buffer freed half the time."""
    rng = random.Random(seed)
    events: list[AllocatorEvent] = []
    live: dict[int, int] = {}
    for i in range(count):
        if live and (rng.random() < 0.5 or len(live) > 40):
            victim = rng.choice(list(live))
            events.append(("free", victim, live.pop(victim)))
        size = int(2 ** rng.uniform(0, max_bytes.bit_length() - 1))
        live[i] = size
        events.append(("alloc", i, size))
    return events


def replay(events: list[AllocatorEvent]) -> tuple[int, int, int]:
    """(peak allocated, peak reserved, segments) of torch.empty replaying `events`."""
    assert torch.cuda.memory_allocated() == 0, "replay needs an empty allocator"
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    tensors: dict[object, torch.Tensor] = {}
    for kind, buffer_id, size in events:
        if kind == "alloc":
            tensors[buffer_id] = torch.empty(size, dtype=torch.uint8, device="cuda")
        else:
            del tensors[buffer_id]
    stats = torch.cuda.memory_stats()
    tensors.clear()
    torch.cuda.empty_cache()
    return (stats["allocated_bytes.all.peak"], stats["reserved_bytes.all.peak"],
            stats["segment.all.peak"])


def print_synthetic() -> None:
    print("\n## (a) synthetic sequences: torch.empty on CUDA vs the simulator\n")
    print("| sequence | events | allocated measured | simulated | reserved measured |"
          " simulated | segments measured | simulated |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, events in synthetic_sequences().items():
        allocated, reserved, segments = replay(events)
        sim = simulate_caching_allocator(events)
        print(f"| {name} | {len(events)} | {allocated:,} | {sim.allocated_peak_bytes:,} |"
              f" {reserved:,} | {sim.reserved_peak_bytes:,} | {segments} |"
              f" {sim.segment_count} |", flush=True)


class MLP(nn.Sequential):
    def __init__(self) -> None:
        super().__init__(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 1000))


CASES: list[tuple[str, Callable[[], nn.Module], str]] = [
    ("ConvNet", ConvNet, "32x3x64x64"),
    ("TinyGPT", TinyGPT, "8x64:int64"),
    ("MLP 1024-4096-4096-1000", MLP, "64x1024"),
    ("ResNet18", ResNet18, "8x3x224x224"),
]


def real_inputs(spec_text: str) -> list[torch.Tensor]:
    shape_text, _, dtype = spec_text.partition(":")
    shape = tuple(int(d) for d in shape_text.split("x"))
    if dtype == "int64":
        return [torch.randint(0, 100, shape, device="cuda")]
    return [torch.randn(shape, device="cuda")]


def adam_with_state(model: nn.Module) -> torch.optim.Optimizer:
    """Adam (foreach) whose state exists before the first step, as graphmem assumes."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    for p in model.parameters():
        optimizer.state[p] = {"step": torch.tensor(0.0),
                              "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                              "exp_avg_sq": torch.zeros_like(p,
                                                             memory_format=torch.preserve_format)}
    return optimizer


def run_steps(build: Callable[[], nn.Module], spec_text: str, train: bool) -> list[int]:
    """Absolute peaks [allocated, reserved] of step 1, then of step 2 (in a fresh process)."""
    torch.manual_seed(0)
    model = build().cuda()
    inputs = real_inputs(spec_text)
    optimizer = adam_with_state(model) if train else None
    torch.cuda.synchronize()
    peaks = []
    for _ in range(2):
        torch.cuda.reset_peak_memory_stats()
        if train:
            loss = cross_entropy_loss(model(*inputs))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            del loss
        else:
            with torch.no_grad():
                model(*inputs)
        torch.cuda.synchronize()
        peaks += [torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()]
    return peaks


def measure_in_fresh_process(index: int, train: bool) -> list[int]:
    command = [sys.executable, __file__, "--case", str(index), "--train", str(int(train))]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_models() -> None:
    print("\n## (b) one real step vs graphmem (analyze_torch + torch_cuda_estimate)\n")
    print("Each case in a fresh process. Absolute peaks: parameters, inputs, Adam state"
          " (made before the first step) and the cuBLAS workspaces included. Step 2 reuses"
          " step 1's segments; graphmem replays a training step twice.\n")
    print("| model | input | step | allocated step 1 | step 2 | predicted | error |"
          " reserved step 1 | step 2 | predicted | error | live-tensor peak |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    gpu = find_gpu("h100-sxm")
    for index, (name, build, spec_text) in enumerate(CASES):
        for train in (False, True):
            analysis = analyze_torch(build(), [spec_text], train=train, optimizer="adam",
                                     plan=False, suggest=False)
            estimate = torch_cuda_estimate(analysis, gpu)
            reserved = estimate.device_total_bytes - cuda_overhead("hopper").context_bytes
            a1, r1, a2, r2 = measure_in_fresh_process(index, train)
            print(f"| {name} | {spec_text} | {'train adam' if train else 'inference'} |"
                  f" {a1:,} | {a2:,} | {estimate.runtime_peak_bytes:,} |"
                  f" {(estimate.runtime_peak_bytes - a2) / a2:+.2%} | {r1:,} | {r2:,} |"
                  f" {reserved:,} | {(reserved - r2) / r2:+.2%} |"
                  f" {int(analysis.liveness.peak_bytes):,} |", flush=True)


def main() -> None:
    if "--case" in sys.argv:
        index, train = int(sys.argv[2]), sys.argv[4] == "1"
        _, build, spec_text = CASES[index]
        print(json.dumps(run_steps(build, spec_text, train)))
        return
    started = time.perf_counter()
    print(f"# caching allocator and CUDA context on {torch.cuda.get_device_name()}\n")
    print("before init (nvidia-smi):", gpu_context.nvidia_smi_used_mib())
    context = gpu_context.init_context()
    print_synthetic()
    print("\n## (c) CUDA context and library workspaces\n")
    gpu_context.print_stages([context, *gpu_context.library_stages()])
    print(gpu_context.versions())
    print_models()
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
