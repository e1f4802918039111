"""Kernels' scratch on the CPU: what each aten op of a conv layer's forward and backward
allocates and frees inside itself, over a grid of shapes.

`python benchmarks/cpu_scratch.py [--dtype bfloat16] [--raw]` runs, per row, one Conv2d's
forward and backward (input gradient and weight gradient) under torch.profiler and prints, for
each outermost aten kernel with scratch, the bytes it returned and its scratch (how far the
running sum of its allocations rose above them: graphmem/verify/runners/torch_runner.py
`kernel_scratch`), next to graphmem's rule for it (graphmem/runtime_models/torch_cpu.py).
`--raw` lists every allocation inside those kernels; `--toy` runs the grid below oneDNN's
16-channel block (2 to 16 channels) instead; `--transposed` the forward of ConvTranspose2d
layers (tests/helpers/deconv.py's grid: widths the stride divides and not, one small image);
`--conv3d` the forward of Conv3d layers (tests/helpers/conv3d.py: the rows the rule was read
from, then held-out ones, fp32 and bf16); `--lstm` one nn.LSTM layer's oneDNN kernels
(aten.mkldnn_rnn_layer, inference and training, and its backward: tests/helpers/lstm_kernels.py)
over the shapes the rules were read from, then the held-out ones (`HELD_OUT`).
`--models` runs whole training steps (`graphmem verify` on the CPU) and prints graphmem's
activation peak and its torch-cpu peak (kernels' scratch included) against the allocator's
measured peak. Results:
benchmarks/results/cpu_scratch.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphmem.core.ir import DType, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.runtime_models.torch_cpu import scratch_bytes
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
# `--toy`: below oneDNN's 16-channel block (the zoo's toy CNNs: 2..16 channels)
TOY_GRID = [
    (2, c_in, c_out, 16, kernel, stride, 1)
    for c_in, c_out in ((2, 2), (4, 4), (8, 8), (8, 16), (16, 8), (3, 8), (4, 16), (16, 16))
    for kernel, stride in ((1, 1), (1, 2), (3, 1), (3, 2))
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


# (model spec, input, optimizer, amp): CNNs whose steps have kernels' scratch
MODELS = [
    ("tests/torch_models/convnets.py:build_resnet_small", "8x3x64x64", "sgd", None),
    ("tests/torch_models/convnets.py:build_resnet_small", "8x3x64x64", "adamw", None),
    ("tests/torch_models/convnets.py:build_resnet_small", "8x3x64x64", "sgd", "bf16"),
    ("tests/torch_models/convnets.py:build_convnext_small", "8x3x64x64", "adamw", None),
    ("tests/torch_models/convnets.py:build_convnext_small", "8x3x64x64", "adamw", "bf16"),
    ("tests/models.py:MobileNetV2", "2x3x64x64", "sgd", None),
    ("tests/models.py:ResNet18", "2x3x64x64", "sgd", None),
    ("tests/torch_models/small.py:build_convnet", "8x3x32x32", "sgd", None),
]


def models() -> None:
    from graphmem.verify.torch_run import verify_torch

    print("| model | input | step | tensors measured B | allocator measured B |"
          " graphmem tensors B (vs allocator) | graphmem torch-cpu B (vs allocator) |"
          " scratch at peak B | peak node |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec, shape, optimizer, amp in MODELS:
        result = verify_torch(spec, [shape], train=True, optimizer=optimizer, amp=amp)
        measured = result.measured
        allocator = measured.allocator_peak_bytes or 1
        tensors = result.predicted_activation_peak_bytes
        before = 100 * (tensors - allocator) / allocator
        step = optimizer + (f" {amp}" if amp else "")
        print(f"| {spec.split(':')[1]} | {shape} | {step} | {measured.peak_bytes:,} |"
              f" {allocator:,} | {tensors:,} ({before:+.1f}%) |"
              f" {result.predicted_allocator_peak_bytes or 0:,}"
              f" ({result.allocator_error_pct or 0:+.2f}%) |"
              f" {result.predicted_scratch_bytes or 0:,} | {result.predicted_scratch_node} |",
              flush=True)


def predicted(row: tuple[int, ...], kernel: str, dtype: torch.dtype) -> int | None:
    """graphmem's rule for the row's kernel (the layer as graphmem's trace would hold it)."""
    batch, c_in, c_out, size, kernel_size, stride, groups = row
    out = (size + 2 * (kernel_size // 2) - kernel_size) // stride + 1
    kind = DType.FLOAT32 if dtype == torch.float32 else DType.BFLOAT16

    def value(name: str, *shape: int) -> Value:
        return Value(name, kind, tuple(SymInt.const(d) for d in shape), Role.ACTIVATION)

    x, y = value("x", batch, c_in, size, size), value("y", batch, c_out, out, out)
    w = value("w", c_out, c_in // groups, kernel_size, kernel_size)
    attributes = {"stride": (stride, stride), "padding": (kernel_size // 2, kernel_size // 2),
                  "groups": groups, "transposed": 0, "channels_last": 0}
    if kernel == "aten::convolution":
        # nn.Conv2d's default bias, as measured (its padding to oneDNN's block counts)
        node = Node("conv", "aten.convolution.default", [x, w, value("b", c_out)], [],
                    attributes=attributes)
        node.add_output(y)
    elif kernel == "aten::convolution_backward":
        node = Node("conv_backward", "aten.convolution_backward.default", [y, x, w], [],
                    attributes={**attributes, "output_mask": (1, 1, 1)})
        for made in (value("gx", batch, c_in, size, size), value("gw", *[int(d) for d in w.shape]),  # type: ignore[union-attr]
                     value("gb", c_out)):
            node.add_output(made)
    else:
        return None
    return scratch_bytes(node, {}, torch.get_num_threads())


def transposed(raw: bool) -> None:
    """ConvTranspose2d forwards (fp32, no grad): measured scratch against graphmem's rule."""
    from tests.helpers.deconv import BIASED, GRID, deconv, measured

    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} threads, float32")
    print("| N | Cin | Cout | HxW | k | s | p | out pad | bias | net B | scratch B |"
          " graphmem B |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row, bias in [*((row, False) for row in GRID), *((row, True) for row in BIASED)]:
        call = measured(row, bias)
        n, c_in, c_out, h, w, kernel, stride, padding, extra = row
        print(f"| {n} | {c_in} | {c_out} | {h}x{w} | {kernel} | {stride} | {padding} | {extra} |"
              f" {'yes' if bias else 'no'} | {call.net_bytes:,} | {call.scratch_bytes:,} |"
              f" {scratch_bytes(deconv(row, bias), {}, threads):,} |")
        if raw:
            print(f"|   raw: {', '.join(f'{size:+,}' for size in call.allocations)} |")


def conv3d(raw: bool) -> None:
    """Conv3d forwards (no grad): measured scratch against graphmem's rule."""
    from tests.helpers.conv3d import BF16, FITTED, HELD_OUT, conv3d, measured

    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} threads")
    print("| rows | N | Cin | Cout | T | HxW | kernel | stride | padding | g | dtype | net B |"
          " scratch B | graphmem B |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [*(("fitted", row, False) for row in FITTED),
            *(("held out", row, False) for row in HELD_OUT),
            *(("held out", row, True) for row in BF16)]
    for kind, row, bf16 in rows:
        call = measured(row, bf16)
        n, c_in, c_out, frames, size, kernel, stride, padding, groups = row
        shape = " | ".join("x".join(map(str, dims)) for dims in (kernel, stride, padding))
        print(f"| {kind} | {n} | {c_in} | {c_out} | {frames} | {size}x{size} | {shape} |"
              f" {groups} | {'bf16' if bf16 else 'fp32'} | {call.net_bytes:,} |"
              f" {call.scratch_bytes:,} | {scratch_bytes(conv3d(row, bf16), {}, threads):,} |")
        if raw:
            print(f"|   raw: {', '.join(f'{size:+,}' for size in call.allocations)} |")


# (T, B, I, H): the shapes graphmem/ops/onednn_rnn.py was read from
LSTM_GRID = [(10, 2, 16, 16), (20, 2, 16, 16), (10, 4, 16, 16), (10, 2, 16, 32), (10, 2, 32, 16),
             (10, 2, 20, 20), (7, 3, 33, 17), (10, 2, 64, 64), (5, 2, 8, 128), (30, 8, 100, 50)]


def lstm(raw: bool) -> None:
    """One LSTM layer's kernels (fp32): measured scratch against graphmem's rules."""
    from graphmem.ops.onednn_rnn import RnnLayer
    from tests.helpers.lstm_kernels import HELD_OUT
    from tests.helpers.lstm_kernels import measure as measure_lstm
    from tests.helpers.lstm_kernels import predicted as predicted_lstm

    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} threads, float32")
    print("| T | B | I | H | step | kernel | net B | scratch B | graphmem B |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in [*LSTM_GRID, *HELD_OUT]:
        for training in (False, True):
            layer = RnnLayer(*shape)
            rules = predicted_lstm(layer, training, threads)
            for kernel, call in measure_lstm(layer, training).items():
                step = "training" if training else "inference"
                print(f"| {' | '.join(map(str, shape))} | {step} | {kernel} |"
                      f" {call.net_bytes:,} | {call.scratch_bytes:,} | {rules[kernel]:,} |")
                if raw:
                    print(f"|   raw: {', '.join(f'{size:+,}' for size in call.allocations)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--raw", action="store_true")
    parser.add_argument("--models", action="store_true")
    parser.add_argument("--toy", action="store_true", help="the 2..16-channel grid")
    parser.add_argument("--transposed", action="store_true", help="ConvTranspose2d forwards")
    parser.add_argument("--conv3d", action="store_true", help="Conv3d forwards")
    parser.add_argument("--lstm", action="store_true", help="nn.LSTM layers' oneDNN kernels")
    args = parser.parse_args()
    if args.lstm:
        lstm(args.raw)
        return
    if args.models:
        models()
        return
    if args.transposed:
        transposed(args.raw)
        return
    if args.conv3d:
        conv3d(args.raw)
        return
    dtype = getattr(torch, args.dtype)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.dtype}")
    print("| N | Cin | Cout | HxW | k | s | g | kernel | net B | scratch B | graphmem B |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in TOY_GRID if args.toy else GRID:
        for call in measure(row, dtype):
            if call.scratch_bytes <= 0:
                continue
            cells = " | ".join(str(v) for v in row)
            rule = predicted(row, call.kernel, dtype)
            print(f"| {cells} | {call.kernel} | {call.net_bytes:,} | {call.scratch_bytes:,} |"
                  f" {'' if rule is None else f'{rule:,}'} |")
            if args.raw:
                print(f"|   raw: {', '.join(f'{size:+,}' for size in call.allocations)} |")


if __name__ == "__main__":
    main()
