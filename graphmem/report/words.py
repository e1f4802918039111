"""The words for the codes the results carry: one label per device-total part, one name per
runtime, one sentence per caveat. The terminal, JSON and HTML renderers all read these tables,
so one number carries one label in every report (tests/test_words.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from graphmem.core.units import format_bytes
from graphmem.passes.device_parts import Caveat, DevicePart
from graphmem.runtime_models.vocabulary import Runtime

if TYPE_CHECKING:  # a GPU's verdict and runtime model: imported where the analysis has one
    from graphmem.passes.fit import FitPart
    from graphmem.runtime_models.base import (
        CachingAllocatorFacts,
        LargestScratch,
        RuntimeEstimate,
    )

PART_LABELS: dict[DevicePart, str] = {
    DevicePart.TENSORS: "tensors at peak",
    DevicePart.RUNTIME_WEIGHTS: "weights in the runtime's pool",
    DevicePart.RESIDENT: "weights + inputs",
    DevicePart.ALLOCATOR: "allocator overhead",
    DevicePart.CONTEXT: "CUDA context + workspaces",
    DevicePart.SCRATCH: "kernels' scratch",
    DevicePart.LIVE_PEAK: "live-tensor peak",
    DevicePart.PARAMETERS: "parameters",
    DevicePart.GRADIENTS: "gradients",
    DevicePart.OPTIMIZER_STATE: "optimizer state",
    DevicePart.TEMPORARIES: "optimizer temporaries",
    DevicePart.ACTIVATIONS: "activations (this rank's micro-batch)",
    DevicePart.GATHERED: "gathered parameters",
    DevicePart.BUCKETS: "communication buckets",
    DevicePart.RING_ATTENTION: "ring attention K/V blocks (context parallel)",
    DevicePart.NCCL: "NCCL buffers (estimate, a floor)",
    DevicePart.WEIGHTS: "weights (per GPU)",
    DevicePart.STEP: "step activation peak",
    DevicePart.CUDA_GRAPHS: "CUDA graphs",
    DevicePart.KV_CACHE: "KV cache",
}
# the runtime's tensors at its peak where it keeps the weights on lines of their own
ACTIVATIONS_AT_PEAK = "activations at its peak"

# a runtime in a few words ("on the GPU (onnxruntime model)"), and as a table's title
RUNTIME_NAMES: dict[Runtime, str] = {
    Runtime.ORT_CUDA: "onnxruntime",
    Runtime.TORCH_CUDA: "PyTorch",
    Runtime.ORT_CPU: "onnxruntime CPU",
    Runtime.TORCH_CPU: "PyTorch CPU",
}
RUNTIME_TITLES: dict[Runtime, str] = {
    Runtime.ORT_CPU: "onnxruntime CPU",
    Runtime.ORT_CUDA: "onnxruntime CUDA (model, not measured)",
    Runtime.TORCH_CUDA: "PyTorch CUDA caching allocator",
    Runtime.TORCH_CPU: "PyTorch CPU",
}

CAVEAT_TEXT: dict[Caveat, str] = {
    Caveat.ORT_CUDA_MODEL: "a model of onnxruntime's CUDA provider, not a measurement; cuDNN's"
                           " convolution workspaces are not modelled: the real total may be"
                           " higher",
    Caveat.TORCH_CUDA_WORKSPACES: "cuDNN workspaces and kernels' temporary buffers are not"
                                  " modelled: the real total may be higher (a few MiB;"
                                  " ResNet-18 training measured up to 10% above on an H100)",
    Caveat.LIVE_PEAK: "the live-tensor peak leaves out what the runtime's allocator adds"
                      " (rounding, cached segments or regions): the device needs more; bind"
                      " every dim for the runtime model's device total",
    Caveat.PER_RANK_PLAN: "the distributed plan's tensors per rank"
                          " (graphmem/distributed/strategies.py); the allocator overhead is"
                          " the single-GPU step's",
}


# what each runtime's own peak (runtime_peak_bytes) counts and leaves out
RUNTIME_COUNTS: dict[Runtime, str] = {
    Runtime.ORT_CPU: "onnxruntime's CPU arena over one run of the graph it runs (optimized at"
                     " the chosen level, ORT_ENABLE_ALL by default; see the notes), as its"
                     " profiler's mem_in_use_peak counts it: the weights it holds from session"
                     " creation (MatMul/Gemm weights prepacked for MLAS, initializers of 127"
                     " bytes or less), every buffer its allocation plan holds at the peak"
                     " (graph outputs, buffers kept for later same-shape reuse) rounded by the"
                     " arena, and the kernel's scratch; not the caller's inputs, not the"
                     " initializers it uses in place",
    Runtime.ORT_CUDA: "onnxruntime's CUDA arena in use at its peak during one run (same plan as"
                      " on CPU); the device total adds the arena's unused region space, the"
                      " initializers and inputs on the GPU and the CUDA context",
    Runtime.TORCH_CUDA: "torch.cuda.max_memory_allocated: blocks in use (512-byte rounding,"
                        " whole blocks where not split), parameters, optimizer state, inputs"
                        " and the cuBLAS workspaces ({workspaces:,} B) included; the"
                        " allocator's cached free blocks and the CUDA context left out",
    Runtime.TORCH_CPU: "bytes allocated on the CPU above the residents (parameters, buffers,"
                       " optimizer state, inputs), kernels' scratch included: the allocator's"
                       " peak `graphmem verify` measures",
}


def part_label(part: FitPart) -> str:
    """The one label of `part`: its code's words and the numbers of its detail."""
    from graphmem.passes.fit import KvPool, Split, WeightsApart

    detail = part.detail
    if isinstance(detail, WeightsApart):
        return ACTIVATIONS_AT_PEAK
    label = PART_LABELS[part.part]
    if isinstance(detail, Split):
        tp = f", tensor parallel / {detail.tensor_parallel}" if detail.tensor_parallel > 1 else ""
        split = f"sharded / {detail.shards}" if detail.shards > 1 else "whole"
        return f"{label} ({split}{tp})"
    if isinstance(detail, KvPool):
        if detail.blocks is None:
            return f"{label}, one sequence of {detail.tokens:,} tokens"
        return f"{label}, {detail.blocks:,} blocks"
    return label


def runtime_name(runtime: str) -> str:
    """A runtime model in a few words (`runtime`: its code)."""
    return RUNTIME_NAMES[Runtime(runtime)]


def runtime_title(runtime: str) -> str:
    """A runtime model as a table's title."""
    return RUNTIME_TITLES[Runtime(runtime)]


def caveat_text(caveat: Caveat | None) -> str:
    return "" if caveat is None else CAVEAT_TEXT[caveat]


def counts_text(estimate: RuntimeEstimate) -> str:
    """What the runtime's own peak counts and leaves out, in words."""
    facts = estimate.caching_allocator
    workspaces = 0 if facts is None else facts.workspace_bytes
    return RUNTIME_COUNTS[Runtime(estimate.runtime)].format(workspaces=workspaces)


def runtime_notes(estimate: RuntimeEstimate) -> tuple[str, ...]:
    """The runtime model's notes: its own, then what its typed facts say."""
    facts, largest = estimate.caching_allocator, estimate.largest_scratch
    if facts is not None:
        return (*estimate.notes, *_allocator_notes(facts))
    if largest is not None:
        return (*estimate.notes, *_scratch_notes(estimate, largest))
    return estimate.notes


def _scratch_notes(estimate: RuntimeEstimate, largest: LargestScratch) -> tuple[str, ...]:
    return (
        f"peak while {estimate.workspace_node} runs: its scratch"
        f" {format_bytes(estimate.workspace_bytes)}; the largest kernel scratch is"
        f" {format_bytes(largest.bytes)} ({largest.node})",
        "kernels' scratch: oneDNN's blocked copies in convolutions and their backward, batch"
        " norm backward's temporary, the scratchpads of a strided input gradient and of a"
        " channels-last forward (graphmem/runtime_models/torch_cpu.py); other oneDNN"
        " scratchpads (a weight gradient's) and the allocator's own memory not modelled",
    )


def _allocator_notes(facts: CachingAllocatorFacts) -> tuple[str, ...]:
    named = ", ".join(f"{name} {size:,} B" for name, size in facts.workspaces) or "none"
    released = ((f"near the GPU's limit the allocator freed {facts.released_segment_count}"
                 " cached segments to make room (release_cached_blocks), as PyTorch does"
                 " before an out-of-memory error",) if facts.released_segment_count else ())
    return (
        f"caching allocator: {facts.segment_count} segments"
        f" ({facts.small_segment_count} of 2 MiB), reserved peak"
        f" {facts.reserved_peak_bytes:,} B",
        f"context + workspaces: {facts.context_bytes:,} B outside the allocator"
        f" ({facts.context_source}); inside it: {named} ({facts.workspace_source})",
        "not modelled: cuDNN workspaces and kernels' temporary buffers (allocated and freed"
        " inside one op; a few MiB for convolutions on the H100): the device total may be"
        " low by them",
        *released,
    )
