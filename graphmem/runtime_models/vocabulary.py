"""The words and defaults of the runtime options, without the runtime models behind them:
the option table (graphmem/options/table.py), the Request and the pipeline's signatures read
these, so an analysis that models no runtime (no --gpu, no --runtime) imports none of the
runtime models, the GPU fit or the GPU table (runtime_models/base.py and bfc_arena.py hand
the same names on)."""

from __future__ import annotations

from enum import StrEnum


class Runtime(StrEnum):
    ORT_CPU = "ort-cpu"  # onnxruntime, CPU execution provider
    ORT_CUDA = "ort-cuda"  # onnxruntime, CUDA execution provider
    TORCH_CUDA = "torch-cuda"  # eager PyTorch and its CUDA caching allocator
    TORCH_CPU = "torch-cpu"  # eager PyTorch on the CPU, kernels' scratch included

    @property
    def on_cpu(self) -> bool:
        """No CUDA context: what the device total adds to the tensors is kernels' scratch."""
        return self in (Runtime.ORT_CPU, Runtime.TORCH_CPU)


RUNTIMES: tuple[str, ...] = tuple(r.value for r in Runtime)
# onnxruntime's graph optimization levels (GraphOptimizationLevel)
ORT_OPTIMIZATION_LEVELS = ("disabled", "basic", "extended", "all")
# Without an optimization level graphmem models onnxruntime's default ("all", what `graphmem
# verify` runs too), but builds the optimizing session (synthetic weights of the model's size
# in memory: graphmem never reads weights) only for models whose tensors (initializers,
# Constant values, tensor attributes, in bodies and functions, sparse ones dense) come to at
# most this; above it, the graph as written is planned and the note says how to ask for the
# optimized one. The session costs about 4x those bytes at its peak (the copy's bytes, then
# onnxruntime's parse, initializers and folding: 200 MB of Constant took the whole command to
# 845 MiB; 248 MiB of int64 as a Constant's value_ints, 1,074 MiB): the bound keeps the
# optimized plan, 25% and more nearer the measured peak, for the models people bring
# (ResNet-50's 97.4 MiB, ResNet-101's 170 MiB, EfficientNets, ViT-S) while any file stays
# under the hostile-input contract's 1 GiB, and a file declaring more (a sparse 2 GB one) is
# planned as written in under 300 MiB (issue 26).
AUTO_OPTIMIZE_INITIALIZER_BYTES = 192 << 20


class ArenaExtend(StrEnum):
    """How the arena sizes a new region (onnxruntime's ArenaExtendStrategy)."""

    NEXT_POWER_OF_TWO = "next-power-of-two"  # kNextPowerOfTwo (0), onnxruntime's default
    SAME_AS_REQUESTED = "same-as-requested"  # kSameAsRequested (1)
