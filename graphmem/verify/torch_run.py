"""`graphmem verify file.py:fn`: a real PyTorch step next to graphmem's prediction for it.

The prediction is graphmem's activation peak (the live-tensor peak less parameters, buffers,
optimizer state and inputs, which exist before the step); the measurement is the peak of
bytes allocated during one real step above what was allocated before it: torch.profiler's
memory events on the CPU, `torch.cuda.max_memory_allocated()` on a GPU
(graphmem/verify/runners/torch_runner.py). Both steps are the same: the model's forward, for
training the same loss, backward and torch's foreach optimizer in its steady state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypedDict

from graphmem.core.conventions import Amp, AmpPolicy, Optimizer, TrainingOptions, closed
from graphmem.core.progress import steps
from graphmem.devices.gpus import find_gpu
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.loader import TensorSpec, build_model, parse_tensor_spec
from graphmem.pipeline import run
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.request import Request, SuggestOptions
from graphmem.pipeline.runtime import runtime_estimate
from graphmem.runtime_models.base import Runtime
from graphmem.verify.onnx_run import percent_error
from graphmem.verify.runners.torch_env import cuda_available
from graphmem.verify.runners.torch_env import seed as seed_torch
from graphmem.verify.runners.torch_runner import (
    MeasuredStep,
    cuda_device_name,
    measure_step,
)


@dataclass(frozen=True)
class TorchVerification:
    model: str
    inputs: tuple[str, ...]  # as given, e.g. "4x3x32x32"
    train: bool
    optimizer: str | None  # None for inference
    amp: str | None
    predicted_activation_peak_bytes: int
    measured: MeasuredStep
    traced_for: str | None = None  # the GPU whose CUDA kernels were traced; None: the CPU's
    # what the prediction assumed (a mixture of experts' routing policy...): its warnings
    prediction_warnings: tuple[str, ...] = ()
    # CPU: graphmem's torch-cpu model, the activation peak with each kernel's scratch added
    # while it runs (graphmem/runtime_models/torch_cpu.py), to compare with the allocator's
    # peak; None on a GPU
    predicted_allocator_peak_bytes: int | None = None
    predicted_scratch_bytes: int | None = None  # the scratch at that peak
    predicted_scratch_node: str | None = None  # the node running at that peak

    @property
    def error_pct(self) -> float | None:
        """(graphmem - measured) / measured, in %."""
        return percent_error(self.predicted_activation_peak_bytes, self.measured.peak_bytes)

    @property
    def allocator_error_pct(self) -> float | None:
        """(graphmem with scratch - the allocator's peak) / the allocator's peak, in %."""
        predicted, measured = self.predicted_allocator_peak_bytes, \
            self.measured.allocator_peak_bytes
        if predicted is None or measured is None:
            return None
        return percent_error(predicted, measured)


def verify_torch(
    spec: str,
    inputs: Sequence[str],
    train: bool = False,
    optimizer: str = "adam",
    amp: str | None = None,
    loss: Callable[..., object] | None = None,
    device: str = "cpu",
    seed: int = 0,
) -> TorchVerification:
    """Analyze `spec` (file.py:fn or package.module:fn), then run one real step of it."""
    specs: list[TensorSpec] = [parse_tensor_spec(text) for text in inputs]
    if not specs:
        raise GraphmemError("no example inputs: give --input SHAPE[:dtype] for each input")
    if device == "cuda" and not cuda_available():
        raise GraphmemError("--provider cuda: torch sees no CUDA device here; drop the option"
                            " to measure on the CPU")
    policy = AmpPolicy.CUDA if device.startswith("cuda") else AmpPolicy.CPU
    training = None
    if train:
        training = TrainingOptions(closed(Optimizer, optimizer, "--optimizer"),
                                   closed(Amp, amp, "--amp") if amp else None, loss=loss,
                                   amp_policy=policy)
    gpu = traced_for(device)
    analysis = run.analyze(Request(spec, tuple(specs), training=training, gpu=gpu,
                                   suggest=SuggestOptions(enabled=False)))
    with steps(f"one real step on {device}", 1) as done:
        seed_torch(seed)
        model = build_model(spec)  # real weights this time: the step runs for real
        measured = measure_step(model, specs, train, optimizer, amp, device=device,
                                loss=loss)  # type: ignore[arg-type]
        done(1)
    return TorchVerification(
        model=spec,
        inputs=tuple(inputs),
        train=train,
        optimizer=optimizer if train else None,
        amp=amp,
        predicted_activation_peak_bytes=int(analysis.liveness.activation_peak_bytes),
        measured=measured,
        traced_for=gpu,
        prediction_warnings=tuple(str(w) for w in analysis.model.warnings),
        **_with_scratch(analysis, device),
    )


class _Scratch(TypedDict, total=False):
    predicted_allocator_peak_bytes: int
    predicted_scratch_bytes: int
    predicted_scratch_node: str | None


def _with_scratch(analysis: Analysis, device: str) -> _Scratch:
    """On the CPU, graphmem's torch-cpu model of the step: the peak with kernels' scratch."""
    if device != "cpu":
        return {}
    estimate = runtime_estimate(analysis, Runtime.TORCH_CPU, None)
    return {"predicted_allocator_peak_bytes": estimate.runtime_peak_bytes,
            "predicted_scratch_bytes": estimate.workspace_bytes,
            "predicted_scratch_node": estimate.workspace_node}


def traced_for(device: str) -> str | None:
    """The GPU of graphmem's table the prediction is traced for: on a CUDA device, the one
    torch runs on (its kernels: docs/cuda-trace.md); None on the CPU or for a GPU the table
    does not have (then the CPU's kernels are traced, and the output says so)."""
    if not device.startswith("cuda"):
        return None
    try:
        return find_gpu(cuda_device_name()).name
    except GraphmemError:
        return None
