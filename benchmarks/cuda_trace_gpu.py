"""The CUDA trace against a real GPU: predicted vs torch.cuda.max_memory_allocated.

`python benchmarks/cuda_trace_gpu.py [--gpu NAME] [--models ConvNet,TinyGPT]` on a machine
with a CUDA GPU traces each model and step of benchmarks/torch_accuracy.py (8 models x
inference, SGD, momentum, Adam, AdamW, Adam bf16) as PyTorch's CUDA backend runs it on that
GPU (graphmem/frontends/torch/cuda_kernels.py: the SDPA backend CUDA picks, fused dropout with
a bool mask, cuDNN batch norm; docs/cuda-trace.md), runs one real step of it on the GPU
(graphmem/verify/runners/torch_runner.py: steady state, torch.cuda.max_memory_allocated above
the step's start) and prints a markdown table: the CUDA-trace prediction, the CPU trace's for
comparison, the measurement, the error and the kernels the trace assumed. The GPU is found
in graphmem's table from torch.cuda.get_device_name() unless --gpu names it.

Without a CUDA device it measures nothing: it says so and exits 0; with --gpu NAME it first
prints the predictions alone (no GPU is needed to predict). No number here is made up: a
row's measured column is what this run measured, or "-".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from torch_accuracy import CASES, STEPS, extra_cases

from graphmem.core.conventions import AmpPolicy, TrainingOptions
from graphmem.devices.gpus import GpuSpec, find_gpu
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.import_step import import_torch
from graphmem.frontends.torch.kernel_choice import CudaTarget, cuda_target
from graphmem.frontends.torch.loader import TensorSpec, parse_tensor_spec
from graphmem.passes.dims import DimBinding, value_bytes
from graphmem.passes.liveness import analyze_liveness
from graphmem.verify.runners.torch_runner import measure_step

NO_DEVICE = "no CUDA device: nothing measured"


def predicted_peak(model: torch.nn.Module, specs: Sequence[TensorSpec], train: bool,
                   optimizer: str, amp: str | None,
                   target: CudaTarget | None) -> tuple[int, tuple[str, ...]]:
    """graphmem's activation peak for the step (memory.activation_peak_bytes), traced for
    `target` (None: the CPU trace), and the kernels the trace assumed."""
    training = TrainingOptions(optimizer, amp,  # type: ignore[arg-type]
                               amp_policy=AmpPolicy.CUDA) if train else None
    imported = import_torch(model, specs, type(model).__name__, training, cuda=target)
    graph = imported.graph
    binding = DimBinding(bound={}, free=(), batch_dim=None)
    liveness = analyze_liveness(graph, value_bytes(graph, binding))
    return int(liveness.activation_peak_bytes), tuple(map(str, imported.kernels))


def step_name(train: bool, optimizer: str, amp: str | None) -> str:
    return f"train {optimizer}" + (f" {amp}" if amp else "") if train else "inference"


def table(gpu: GpuSpec, names: set[str] | None, measure: bool) -> None:
    target = cuda_target(gpu)
    print(f"| model | input | step | predicted, CUDA trace ({target.sm}) | predicted, CPU trace"
          " | measured (cuda) | error | kernels assumed |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for name, model_class, spec_text in CASES + extra_cases():
        if names is not None and name not in names:
            continue
        for train, optimizer, amp in STEPS:
            specs = [parse_tensor_spec(spec_text)]
            torch.manual_seed(0)
            cuda, kernels = predicted_peak(model_class(), specs, train, optimizer, amp, target)
            cpu, _ = predicted_peak(model_class(), specs, train, optimizer, amp, None)
            measured, error = "-", "-"
            if measure:
                torch.manual_seed(0)
                peak = measure_step(model_class(), specs, train, optimizer, amp,
                                    device="cuda").peak_bytes
                measured, error = f"{peak:,}", f"{(cuda - peak) / peak:+.2%}"
            print(f"| {name} | {spec_text} | {step_name(train, optimizer, amp)} | {cuda:,} |"
                  f" {cpu:,} | {measured} | {error} | {'; '.join(kernels) or '-'} |",
                  flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", help="the GPU's name in graphmem's table (default: the"
                        " device torch sees)")
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    args = parser.parse_args(argv)
    names = set(args.models.split(",")) if args.models else None
    if not torch.cuda.is_available():
        print(NO_DEVICE)
        if args.gpu:
            print(f"\npredictions only, traced for {args.gpu}:\n")
            table(find_gpu(args.gpu), names, measure=False)
        return 0
    try:
        gpu = find_gpu(args.gpu or torch.cuda.get_device_name())
    except GraphmemError as error:
        print(f"{error}: name the table's GPU closest to this one with --gpu NAME")
        return 2
    print(f"{torch.cuda.get_device_name()} ({gpu.name}), torch {torch.__version__},"
          f" CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}\n")
    table(gpu, names, measure=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
