"""Measure what a CUDA process holds before any tensor: the context and library workspaces.

Run on a machine with a GPU: `python benchmarks/gpu_context.py`. Prints one line per stage
with the device memory in use (cudaMemGetInfo: total - free), in MiB.
"""

from __future__ import annotations

import subprocess

import torch

MIB = 2**20


def used_bytes() -> int:
    free, total = torch.cuda.mem_get_info()
    return total - free


def nvidia_smi_used_mib() -> str:
    query = ["nvidia-smi", "--query-gpu=memory.used,memory.total,name,driver_version",
             "--format=csv,noheader"]
    return subprocess.run(query, capture_output=True, text=True, check=False).stdout.strip()


def main() -> None:
    print("before init (nvidia-smi):", nvidia_smi_used_mib())
    torch.cuda.init()
    base = used_bytes()
    print(f"after context init: used={base / MIB:.1f} MiB; total={torch.cuda.mem_get_info()[1]}")
    x = torch.ones(1, device="cuda")
    reserved = torch.cuda.memory_reserved()
    print(f"after 1 tensor: used={used_bytes() / MIB:.1f} MiB reserved={reserved}")
    a = torch.randn(1024, 1024, device="cuda")
    (a @ a).sum().item()
    print(f"after first matmul (cuBLAS handle+workspace): used={used_bytes() / MIB:.1f} MiB")
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
    conv(torch.randn(8, 64, 56, 56, device="cuda")).sum().item()
    reserved_mib = torch.cuda.memory_reserved() / MIB
    print(f"after first conv (cuDNN): used={used_bytes() / MIB:.1f} MiB"
          f" reserved={reserved_mib:.1f} MiB")
    print("nvidia-smi now:", nvidia_smi_used_mib())
    print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(),
          torch.cuda.get_device_name())
    del x


if __name__ == "__main__":
    main()
