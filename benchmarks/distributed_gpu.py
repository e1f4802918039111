"""Per-GPU memory of DDP and FSDP on one real rank, against graphmem's per-rank model.

    python benchmarks/distributed_gpu.py [--device cuda] [--layers 4] [--batch 4] [--seq 256]

One rank (world size 1; nccl on CUDA, gloo on CPU), each setup in a fresh process: a plain
Adam step, the same step under DistributedDataParallel, and under FSDP2 `fully_shard` with one
unit per transformer block. Each is measured in steady state (third step: optimizer state and
DDP buckets exist) as `torch.cuda.max_memory_allocated` over the step (everything allocated).
graphmem predicts the plain step (its single-GPU peak), DDP at N=1 (plus the buckets: a second
copy of every gradient) and FSDP at N=1 (plus the gathered units and one unit's unsharded
gradient). Prints a markdown table; the deltas to the plain step isolate what each wrapper
adds. On CPU nothing is measured (no allocator statistics): it only checks the code.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graphmem import analyze_torch
from graphmem.distributed.strategies import DistributedConfig
from graphmem.pipeline.extras import with_distributed
from tests.models import GPT2


def build(layers: int) -> nn.Module:
    torch.manual_seed(0)
    return GPT2(n_layer=layers)


def measure(model: nn.Module, wrap: Callable[[nn.Module], nn.Module], ids: torch.Tensor,
            device: str) -> int:
    wrapped = wrap(model.to(device))
    optimizer = torch.optim.Adam(wrapped.parameters(), foreach=True)
    targets = torch.randint(0, 50257, ids.shape, device=device)

    def step() -> None:
        logits = wrapped(ids)
        F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    step()
    if device != "cuda":
        step()
        return 0
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def fsdp_wrap(model: nn.Module) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    for block in model.h:  # type: ignore[union-attr]
        fully_shard(block)
    fully_shard(model)
    return model


WRAPPERS: dict[str, Callable[[nn.Module], nn.Module]] = {
    "plain": lambda model: model, "ddp": DistributedDataParallel, "fsdp": fsdp_wrap}


def _measure_in_subprocess(name: str, args: argparse.Namespace) -> int:
    command = [sys.executable, __file__, "--measure", name, "--device", args.device,
               "--layers", str(args.layers), "--batch", str(args.batch), "--seq", str(args.seq)]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return int(output.strip().splitlines()[-1])


def _measure_one(args: argparse.Namespace) -> None:
    backend = "nccl" if args.device == "cuda" else "gloo"
    dist.init_process_group(backend, rank=0, world_size=1, store=dist.HashStore())
    torch.manual_seed(1)
    ids = torch.randint(0, 50257, (args.batch, args.seq), device=args.device)
    print(measure(build(args.layers), WRAPPERS[args.measure], ids, args.device))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--measure", choices=tuple(WRAPPERS), help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    args = parser.parse_args()
    if args.measure:
        _measure_one(args)
        return
    backend = "nccl" if args.device == "cuda" else "gloo"
    dist.init_process_group(backend, rank=0, world_size=1, store=dist.HashStore())
    spec = f"{args.batch}x{args.seq}:int64"
    analysis = analyze_torch(build(args.layers), [spec], train=True, optimizer="adam")
    predicted = {strategy: with_distributed(analysis, DistributedConfig(strategy, 1))
                 .distributed.per_rank.total_bytes  # type: ignore[union-attr]
                 for strategy in ("ddp", "fsdp")}
    predicted["plain"] = int(analysis.liveness.peak_bytes)
    dist.destroy_process_group()
    # Each wrapper in a fresh process: run one after the other in one process, DDP measured
    # a second copy of its buckets that a fresh process does not have.
    measured = {name: _measure_in_subprocess(name, args) for name in WRAPPERS}
    params = sum(p.numel() for p in build(args.layers).parameters())
    print(f"GPT2 {args.layers} layers ({params:,} parameters), input {spec}, Adam foreach,"
          f" {args.device}, world size 1")
    print("| step | predicted | measured | error | predicted - plain | measured - plain |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in ("plain", "ddp", "fsdp"):
        error = (f"{(predicted[name] - measured[name]) / measured[name]:+.2%}"
                 if measured[name] else "-")  # nothing measured on the CPU
        print(f"| {name} | {predicted[name]:,} | {measured[name]:,} | {error} |"
              f" {predicted[name] - predicted['plain']:,} |"
              f" {measured[name] - measured['plain']:,} |")


if __name__ == "__main__":
    main()
