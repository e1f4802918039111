"""The codes of a GPU verdict's parts and caveats, without the verdict behind them
(passes/fit.py hands the same names on): the reports' words (graphmem/report/words.py) and
the pipeline's signatures read these, so an analysis given no GPU imports neither the GPU fit
nor the GPU table."""

from __future__ import annotations

from enum import StrEnum

LIVE_PEAK_BASIS = "live-tensor peak + CUDA context"


class DevicePart(StrEnum):
    """What one part of a device total is: its code (the key of the JSON's `gpu.parts`); the
    words for it are graphmem/report/words.py's, shared by every report."""

    # a runtime model's device total (graphmem/pipeline/device_total.py runtime_parts)
    TENSORS = "tensors"  # the tensors the runtime holds at its peak
    RUNTIME_WEIGHTS = "runtime_weights"  # weights the runtime copied into its pool
    RESIDENT = "resident"  # weights and inputs held outside the runtime's pool
    ALLOCATOR = "allocator"  # rounding, cached segments or regions beyond the tensors
    CONTEXT = "context"  # the CUDA context and the libraries' workspaces
    SCRATCH = "scratch"  # a CPU runtime: the running kernel's scratch (im2col, oneDNN copies)
    # no runtime model (dims free): graphmem's live-tensor peak + the context
    LIVE_PEAK = "live_peak"
    # a distributed job's rank (graphmem/distributed/strategies.py per_gpu_parts)
    PARAMETERS = "parameters"
    GRADIENTS = "gradients"
    OPTIMIZER_STATE = "optimizer_state"
    TEMPORARIES = "temporaries"
    ACTIVATIONS = "activations"  # the rank's micro-batch
    GATHERED = "gathered"
    BUCKETS = "buckets"
    RING_ATTENTION = "ring_attention"
    NCCL = "nccl"
    # a serving plan (graphmem/distributed/serving.py)
    WEIGHTS = "weights"
    STEP = "step"
    CUDA_GRAPHS = "cuda_graphs"
    KV_CACHE = "kv_cache"


class Caveat(StrEnum):
    """Which way a verdict's number may be wrong: its code (the JSON's `gpu.caveat_code`); the
    words are graphmem/report/words.py's."""

    ORT_CUDA_MODEL = "ort_cuda_model"  # a model, cuDNN's convolution workspaces left out
    TORCH_CUDA_WORKSPACES = "torch_cuda_workspaces"  # cuDNN and kernels' temporaries left out
    LIVE_PEAK = "live_peak"  # the live-tensor peak leaves out the allocator: a floor
    PER_RANK_PLAN = "per_rank_plan"  # the distributed plan's tensors, one GPU's allocator
