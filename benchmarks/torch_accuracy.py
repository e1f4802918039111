"""Predicted vs measured peak for PyTorch models, inference and training steps.

`python benchmarks/torch_accuracy.py [--device cuda]` prints a markdown table: graphmem's
activation peak (the live-tensor peak less parameters, optimizer state and inputs, which exist
before the step) against a real step's peak allocated above its start: torch.profiler's memory
deltas on CPU, torch.cuda.max_memory_allocated on a GPU. On the CPU the last column is the
kernels' scratch: how far the allocator's true peak (every raw allocation event) is above the
tensor peak, buffers a kernel allocates and frees before it returns (not graph tensors).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphmem import analyze_torch
from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.verify.runners.torch_runner import measure_step
from tests.torch_models.small import ConvNet, TinyGPT

CASES = [
    ("ConvNet", ConvNet, "32x3x64x64"),
    ("TinyGPT", TinyGPT, "8x64:int64"),
]
STEPS = [(False, "adam", None), (True, "sgd", None), (True, "momentum", None),
         (True, "adam", None), (True, "adamw", None), (True, "adam", "bf16")]


def extra_cases() -> list[tuple[str, type, str]]:
    try:
        from tests import models
    except ImportError:
        return []
    found = [("ResNet18", models.ResNet18, "8x3x224x224"),
             ("MobileNetV2", models.MobileNetV2, "8x3x224x224")]
    try:
        import transformers  # noqa: F401 - only to know it is there
    except ImportError:
        return found
    from tests.torch_models import hf

    return [*found, ("HF GPT-2 (SDPA)", hf.gpt2, "4x64:int64"),
            ("HF Llama (SDPA, GQA)", hf.llama, "4x64:int64"),
            ("HF BERT (eager)", hf.bert, "4x64:int64"),
            ("HF ViT (eager)", hf.vit, "4x3x64x64")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(f"| model | input | step | predicted | measured ({args.device}) | error |"
          " kernels' scratch |")
    print("|---|---|---|---:|---:|---:|---:|")
    policy = "cuda" if args.device.startswith("cuda") else "cpu"  # whose autocast lists
    for name, model_class, spec_text in CASES + extra_cases():
        for train, optimizer, amp in STEPS:
            torch.manual_seed(0)
            spec = [parse_tensor_spec(spec_text)]
            analysis = analyze_torch(model_class(), spec, train=train, optimizer=optimizer,
                                     amp=amp, amp_policy=policy)
            predicted = int(analysis.liveness.activation_peak_bytes)
            step_measured = measure_step(model_class(), spec, train, optimizer, amp,
                                         device=args.device)
            measured = step_measured.peak_bytes
            scratch = step_measured.kernel_scratch_bytes
            step = f"train {optimizer}" + (f" {amp}" if amp else "") if train else "inference"
            error = (predicted - measured) / measured
            print(f"| {name} | {spec_text} | {step} | {predicted:,} | {measured:,} |"
                  f" {error:+.2%} | {'-' if scratch is None else f'+{scratch:,}'} |",
                  flush=True)


if __name__ == "__main__":
    main()
