"""Measure what a CUDA process holds before any tensor: the context and library workspaces.

Run on a machine with a GPU: `python benchmarks/gpu_context.py`. Prints one line per stage
with the device memory in use (cudaMemGetInfo: total - free) and what the caching allocator
holds (memory_allocated, memory_reserved). The non-tensor overhead of a PyTorch process is
the device memory in use less the allocator's reserved bytes after the last stage.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

import torch

MIB = 2**20


@dataclass(frozen=True)
class Stage:
    label: str
    used_bytes: int  # cudaMemGetInfo total - free, whole device
    allocated_bytes: int  # torch.cuda.memory_allocated
    reserved_bytes: int  # torch.cuda.memory_reserved


def used_bytes() -> int:
    free, total = torch.cuda.mem_get_info()
    return total - free


def nvidia_smi_used_mib() -> str:
    query = ["nvidia-smi", "--query-gpu=memory.used,memory.total,name,driver_version",
             "--format=csv,noheader"]
    return subprocess.run(query, capture_output=True, text=True, check=False).stdout.strip()


def stage(label: str) -> Stage:
    torch.cuda.synchronize()
    return Stage(label, used_bytes(), torch.cuda.memory_allocated(),
                 torch.cuda.memory_reserved())


def init_context() -> Stage:
    torch.cuda.init()
    torch.cuda.synchronize()
    return stage("CUDA context created (torch.cuda.init)")


def library_stages() -> list[Stage]:
    """First tensor, first fp32/bf16 matmuls (cuBLAS, cuBLASLt), first conv (cuDNN).

    Every tensor made here is freed again, so what stays allocated afterwards is what the
    libraries keep (the cuBLAS workspace lives in the caching allocator).
    """
    stages = []
    x = torch.ones(1, device="cuda")
    stages.append(stage("first 4-byte tensor"))
    a = torch.randn(1024, 1024, device="cuda")
    (a @ a).sum().item()
    stages.append(stage("first 1024x1024 fp32 matmul (cuBLAS handle + workspace)"))
    linear = torch.nn.Linear(1024, 1024).cuda()
    linear(a).sum().item()
    stages.append(stage("first fp32 Linear with bias (addmm)"))
    b = a.bfloat16()
    (b @ b).sum().item()
    stages.append(stage("first bf16 matmul"))
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
    conv(torch.randn(8, 64, 56, 56, device="cuda")).sum().item()
    stages.append(stage("first 3x3 conv, 8x64x56x56 (cuDNN)"))
    del x, a, b, linear, conv
    torch.cuda.empty_cache()
    stages.append(stage("tensors freed, cache emptied"))
    return stages


def print_stages(stages: list[Stage]) -> None:
    print("| stage | used MiB | step MiB | allocated B | reserved B |")
    print("|---|---:|---:|---:|---:|")
    before = 0
    for item in stages:
        print(f"| {item.label} | {item.used_bytes / MIB:.1f} |"
              f" {(item.used_bytes - before) / MIB:+.1f} | {item.allocated_bytes:,} |"
              f" {item.reserved_bytes:,} |")
        before = item.used_bytes
    last = stages[-1]
    print(f"\nnon-tensor overhead (used - reserved after the last stage):"
          f" {last.used_bytes - last.reserved_bytes:,} B"
          f" = {(last.used_bytes - last.reserved_bytes) / MIB:.1f} MiB;"
          f" kept in the allocator by the libraries: {last.allocated_bytes:,} B")


def versions() -> str:
    return (f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA"
            f" {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()};"
            f" nvidia-smi: {nvidia_smi_used_mib()}")


def main() -> None:
    print("before init (nvidia-smi):", nvidia_smi_used_mib())
    print_stages([init_context(), *library_stages()])
    print(versions())


if __name__ == "__main__":
    main()
