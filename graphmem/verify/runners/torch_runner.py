"""Run a real PyTorch step and measure its peak of allocated bytes (CPU profiler or CUDA).

This is the reference graphmem's torch.fx predictions are checked against: the same model,
inputs, loss and optimizer (torch's foreach implementation, as traced), in the steady state
(one warm-up step first, so optimizer state exists), gradients set to None before the step.
Like importers, runtimes are allowed to know torch.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.autograd.profiler_util import FunctionEvent

from graphmem.frontends.torch.loader import KeywordCall, TensorSpec
from graphmem.frontends.torch.train_step import AMP_DTYPES, cross_entropy_loss

if TYPE_CHECKING:
    from torch._C._profiler import _ProfilerEvent


@dataclass(frozen=True)
class MeasuredStep:
    """Peak bytes allocated during one step, above what was allocated before it.

    `peak_bytes` counts tensors, what graphmem's graph models. On the CPU a kernel may also
    allocate buffers it frees before it returns (oneDNN's reorders and the scratch of a
    convolution's backward, a strided convolution backward's copy of its input gradient):
    the kernel's scratch, not a tensor. `allocator_peak_bytes` is the true peak of every
    allocation the profiler saw, scratch included; `kernel_scratch_bytes` how far it is
    above the tensor peak; `scratch_kernel` the kernel running at the allocator's peak.
    All three are None on a GPU, where `peak_bytes` (max_memory_allocated) includes it."""

    peak_bytes: int
    device: str
    method: str  # how it was measured
    kernel_scratch_bytes: int | None = None
    allocator_peak_bytes: int | None = None
    scratch_kernel: str | None = None  # e.g. "aten::convolution_backward"
    # the allocator's live bytes read as each op returns, ops inside a kernel aside (the
    # kernel's scratch freed, its outputs made, its inputs not yet released): the live
    # tensors' peak with no event placed by guess, as the replay of `peak_bytes` places
    # them (CPU only)
    kernel_ends_peak_bytes: int | None = None


def cuda_device_name() -> str:
    """What torch calls the CUDA device a step runs on, e.g. "NVIDIA H100 80GB HBM3"."""
    return torch.cuda.get_device_name()


def random_inputs(specs: Sequence[TensorSpec], device: str) -> list[torch.Tensor]:
    """Random tensors of the right shapes and dtypes; integer inputs are ids below 100."""
    inputs = []
    for spec in specs:
        if spec.dtype.is_floating_point:
            inputs.append(torch.randn(spec.shape, dtype=spec.dtype, device=device))
        else:
            inputs.append(torch.randint(0, 100, spec.shape, dtype=spec.dtype, device=device))
    return inputs


def measure_step(
    model: nn.Module,
    specs: Sequence[TensorSpec],
    train: bool,
    optimizer: str = "adam",
    amp: str | None = None,
    device: str = "cpu",
    loss: Callable[..., torch.Tensor] | None = None,
    grad_accum: int = 1,
) -> MeasuredStep:
    """`loss(output) -> scalar`, as graphmem traces it; default: cross-entropy, zero targets.

    With `grad_accum` > 1 the measured step is the last micro-batch: an earlier one ran its
    forward and backward first, so the .grad sums exist when it starts; they are counted in
    the peak (graphmem's trace allocates them at the step's start)."""
    if any(spec.name is not None for spec in specs):  # keyword inputs: model(*args, **kw)
        model = KeywordCall(model, specs)
    model = model.to(device)
    inputs = random_inputs(specs, device)
    loss_of = loss or cross_entropy_loss
    step, _ = step_function(model, inputs, train, optimizer, amp, device, loss_of)
    step()  # warm up: optimizer state exists from now on, as graphmem assumes
    model.zero_grad(set_to_none=True)
    held = 0
    if train and grad_accum > 1:
        _micro_batch(model, inputs, amp, device, loss_of)
        held = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)
    measured = _measure_cuda(step) if device == "cuda" else _measure_cpu(step)
    return replace(measured, peak_bytes=measured.peak_bytes + held)


def _micro_batch(model: nn.Module, inputs: list[torch.Tensor], amp: str | None, device: str,
                 loss_of: Callable[..., torch.Tensor],
                 scaler: torch.amp.GradScaler | None = None) -> tuple[object, torch.Tensor]:
    """Forward and backward, no optimizer: one micro-batch, its gradients added into .grad.

    Returns the model's output and the loss, which the caller holds: as in `out = model(x);
    loss = f(out); loss.backward(); opt.step(); log(loss.item())` and as graphmem traces the
    step, the logits and the loss stay allocated to the end of the step (a reduced MSE loss's
    storage is its unreduced elementwise loss: graphmem/frontends/torch/loss_storage.py)."""
    with _autocast(amp, device):
        output = model(*inputs)
        loss = loss_of(output)
    (loss if scaler is None else scaler.scale(loss)).backward()
    return output, loss


def step_function(model: nn.Module, inputs: list[torch.Tensor], train: bool,
                  optimizer_name: str = "adam", amp: str | None = None, device: str = "cpu",
                  loss_of: Callable[..., torch.Tensor] = cross_entropy_loss,
                  ) -> tuple[Callable[[], None], torch.optim.Optimizer | None]:
    """One step as graphmem traces it, to run as often as the caller likes, and its optimizer
    (None for inference): benchmarks/gpu_campaign.py runs it on the GPU."""
    if not train:
        return _inference_step(model, inputs), None
    return _training_step(model, inputs, optimizer_name, amp, device, loss_of)


def _inference_step(model: nn.Module, inputs: list[torch.Tensor]) -> Callable[[], None]:
    model.eval()

    def step() -> None:
        with torch.no_grad():
            model(*inputs)

    return step


def _training_step(model: nn.Module, inputs: list[torch.Tensor], optimizer_name: str,
                   amp: str | None, device: str,
                   loss_of: Callable[..., torch.Tensor]
                   ) -> tuple[Callable[[], None], torch.optim.Optimizer]:
    model.train()
    optimizer = _optimizer(optimizer_name, model)
    # fp16 on a GPU trains through a loss scaler, as graphmem traces a CUDA fp16 step
    scaler = torch.amp.GradScaler(device) if amp == "fp16" and device == "cuda" else None

    def step() -> None:
        output, loss = _micro_batch(model, inputs, amp, device, loss_of, scaler)
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        del output, loss  # held through the update, as graphmem traces the step

    return step, optimizer


def _optimizer(name: str, model: nn.Module) -> torch.optim.Optimizer:
    params = model.parameters()
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, foreach=True)
    if name == "momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=True)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=True)
    return torch.optim.Adam(params, lr=1e-3, foreach=True)


@contextlib.contextmanager
def _autocast(amp: str | None, device: str) -> Iterator[None]:
    if amp is None:
        yield
        return
    with torch.autocast(device, dtype=AMP_DTYPES[amp]):
        yield


def _measure_cpu(step: Callable[[], None]) -> MeasuredStep:
    """Replay the profiler's memory deltas in time order; the running maximum is the peak.

    The profiler attributes each allocation to the op that made it and records frees
    outside ops as `[memory]` events. A kernel (an aten op with a kernel of its own, not a
    CompositeImplicitAutograd op decomposing into others, as make_fx traces them) counts
    with everything under it: its net delta, the tensors it returns. Other events count
    their own deltas: autograd's evaluate_function frees its inputs after its children ran.
    A net release is placed at the event's end, a net allocation at its start; summing them
    in time order gives the live tensor bytes allocated since the step began. The raw
    allocation events give the allocator's true peak, kernels' scratch included.
    """
    activities = [torch.profiler.ProfilerActivity.CPU]
    with _quiet_stderr(), torch.profiler.profile(activities=activities,
                                                  profile_memory=True) as profile:
        step()
    deltas = sorted(
        (event.time_range.end if delta < 0 else event.time_range.start, delta)
        for event in profile.events()
        if (delta := _tensor_delta_bytes(event))
    )
    peak = _running_peak(delta for _, delta in deltas)
    allocator = allocator_peak(profile)
    return MeasuredStep(peak, "cpu", "torch.profiler profile_memory, memory deltas replayed,"
                        " kernels' scratch apart",
                        kernel_scratch_bytes=max(0, allocator.peak_bytes - peak),
                        allocator_peak_bytes=allocator.peak_bytes,
                        scratch_kernel=allocator.kernel,
                        kernel_ends_peak_bytes=allocator.kernel_ends_peak_bytes)


def _running_peak(deltas: Iterator[int]) -> int:
    live = peak = 0
    for delta in deltas:
        live += delta
        peak = max(peak, live)
    return peak


@dataclass(frozen=True)
class AllocatorPeak:
    """The running maximum of every allocation and free the profiler recorded, in time
    order, and the outermost aten kernel under which it was reached (None: between ops)."""

    peak_bytes: int
    kernel: str | None
    kernel_ends_peak_bytes: int  # the running total read only as ops outside kernels return


def allocator_peak(profile: torch.profiler.profile) -> AllocatorPeak:
    """The raw event tree's allocations (`[memory]` events are these, attributed)."""
    from torch._C._profiler import _EventType, _ExtraFields_Allocation

    # (time ns, 0 an allocation / 1 an op's return, bytes, enclosing kernel): an op returns
    # after the allocations of its last nanosecond; ops inside a kernel are its scratch's
    found: list[tuple[int, int, int, str | None]] = []
    pending: list[tuple[_ProfilerEvent, str | None]] = [
        (node, None) for node in _event_tree(profile)]
    while pending:
        node, kernel = pending.pop()
        fields = node.typed[1]
        if isinstance(fields, _ExtraFields_Allocation):
            found.append((node.start_time_ns, 0, fields.alloc_size, kernel))
        elif kernel is None and node.typed[0] == _EventType.TorchOp:
            found.append((node.end_time_ns, 1, 0, None))
            kernel = node.name if _is_kernel(node.name) else None
        pending.extend((child, kernel) for child in node.children)
    live = peak = at_ends = 0
    at: str | None = None
    for _, returns, size, kernel in sorted(found, key=lambda event: event[:2]):
        live += size
        if returns:
            at_ends = max(at_ends, live)
        elif live > peak:
            peak, at = live, kernel
    return AllocatorPeak(peak, at, at_ends)


def _event_tree(profile: torch.profiler.profile) -> list[_ProfilerEvent]:
    """The profile's raw event tree (torch's private profiler API, as its `[memory]` events
    are built)."""
    results = profile.profiler.kineto_results if profile.profiler is not None else None
    if results is None:
        raise RuntimeError("the profile has no results: read it after the profiled block")
    return results.experimental_event_tree()


@dataclass(frozen=True)
class KernelScratch:
    """One outermost aten kernel's call: the bytes it returns (net) and how far the running
    sum of its allocations rose above that while it ran (its scratch)."""

    kernel: str
    net_bytes: int
    scratch_bytes: int
    allocations: tuple[int, ...]  # every allocation (+) and free (-) inside, in time order


def kernel_scratch(profile: torch.profiler.profile) -> list[KernelScratch]:
    """Each outermost kernel call's scratch, in time order (benchmarks/cpu_scratch.py)."""
    from torch._C._profiler import _EventType, _ExtraFields_Allocation

    calls: list[tuple[int, str, list[tuple[int, int]]]] = []
    pending: list[tuple[_ProfilerEvent, list[tuple[int, int]] | None]] = [
        (node, None) for node in _event_tree(profile)]
    while pending:
        node, sizes = pending.pop()
        fields = node.typed[1]
        if isinstance(fields, _ExtraFields_Allocation) and sizes is not None:
            sizes.append((node.start_time_ns, fields.alloc_size))
        elif sizes is None and node.typed[0] == _EventType.TorchOp and _is_kernel(node.name):
            sizes = []
            calls.append((node.start_time_ns, node.name, sizes))
        pending.extend((child, sizes) for child in node.children)
    found = []
    for _, name, sizes in sorted(calls, key=lambda call: call[0]):
        ordered = tuple(size for _, size in sorted(sizes))
        net = sum(ordered)
        peak = _running_peak(iter(ordered))
        found.append(KernelScratch(name, net, peak - max(net, 0), ordered))
    return found


def _tensor_delta_bytes(event: FunctionEvent) -> int:
    """An event's part of the tensor replay (see _measure_cpu): 0 under a kernel."""
    if _inside_kernel(event):
        return 0
    if _is_kernel(event.name):
        return int(event.cpu_memory_usage)  # children included
    if event.name == "[memory]":
        return int(event.cpu_memory_usage)
    return int(event.self_cpu_memory_usage)


def _inside_kernel(event: FunctionEvent) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if _is_kernel(parent.name):
            return True
        parent = parent.cpu_parent
    return False


@functools.cache
def _is_kernel(name: str) -> bool:
    """An aten op that computes itself: not a CompositeImplicitAutograd decomposition."""
    if not name.startswith("aten::"):
        return False
    try:
        return not torch._C._dispatch_has_kernel_for_dispatch_key(
            name, "CompositeImplicitAutograd")
    except RuntimeError:  # not an operator name the dispatcher knows
        return False


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The profiler's C++ side prints `profiler_start`/`profiler_stop` lines to fd 2."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _measure_cuda(step: Callable[[], None]) -> MeasuredStep:
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    return MeasuredStep(peak, "cuda", "torch.cuda.max_memory_allocated above the step's start")
