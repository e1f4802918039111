"""CUDA's autocast policy, applied while tracing on the CPU.

graphmem traces with fake tensors on the CPU, where only CPU autocast exists (PyTorch refuses
to enable CUDA autocast without a GPU). The two policies agree on the ops that run in lower
precision (matmul, linear, conv, bmm, SDPA), but CUDA also runs a list of ops in fp32 that CPU
autocast leaves in bf16/fp16: softmax, log_softmax, layer_norm, group_norm, exp, log, pow,
rsqrt, sum, cumsum and most losses (PyTorch's aten/src/ATen/autocast_mode.h: AT_FORALL_FP32
and AT_FORALL_FP32_SET_OPT_DTYPE). Those fp32 outputs, and the fp32 copies of their inputs
that the casts make, are what autograd saves on a GPU, so a CPU trace under-counts an AMP
training step (measured on an H200: TinyGPT bf16 training -34%).

`CudaAutocastPolicy` registers CUDA's kernels for those ops at CPU autocast's dispatch key
(AutocastCPU), as CUDA registers them at its own, for as long as it is entered:
- fp32: half-precision floating inputs are cast to fp32, the op runs below autocast;
- fp32_set_opt_dtype: the op runs with dtype=float32 when the caller gave none (softmax of a
  bf16 tensor returns fp32 without a separate copy of its input, as on CUDA);
- cross_entropy is composite on CUDA (log_softmax with dtype=float32, then nll_loss); CPU
  autocast instead casts the logits to fp32 first, a copy CUDA never makes, so it is
  rewritten.
Being part of autocast, the policy holds wherever autocast does: in the forward, and in a
checkpointed layer's recomputation in backward, for which torch.utils.checkpoint restores
the autocast state (a Python-level mode would not: autograd runs backward without them).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import torch

# AT_FORALL_FP32: aten ops (every functional overload)
FP32_OPS = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm",
    "rms_norm", "group_norm", "frobenius_norm", "nuclear_norm", "cosine_similarity",
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm",
    "logsumexp", "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
    "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa",
    "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)
# AT_FORALL_FP32_SET_OPT_DTYPE: ops with a `dtype` argument, set to float32 when not given
SET_OPT_DTYPE_OPS = ("prod", "softmax", "log_softmax", "cumprod", "cumsum",
                     "linalg_vector_norm", "linalg_matrix_norm", "sum")
_HALF = (torch.float16, torch.bfloat16)
_AUTOCAST_CPU = torch._C.DispatchKey.AutocastCPU


class CudaAutocastPolicy:
    """While entered, CPU autocast runs CUDA's fp32 op lists too (see module doc)."""

    def __init__(self) -> None:
        self._library: torch.library.Library | None = None

    def __enter__(self) -> CudaAutocastPolicy:
        library = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():  # "overriding a previously registered kernel": CPU's
            warnings.simplefilter("ignore")
            for name, overload in _overloads(FP32_OPS):
                library.impl(name, _fp32_kernel(overload), "AutocastCPU")
            for name, overload in _overloads(SET_OPT_DTYPE_OPS):
                if any(a.name == "dtype" for a in overload._schema.arguments):
                    library.impl(name, _fp32_dtype_kernel(overload), "AutocastCPU")
            library.impl("cross_entropy_loss", _cross_entropy, "AutocastCPU")
        self._library = library
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._library is not None:
            self._library._destroy()  # CPU autocast's own kernels are back
            self._library = None


def _overloads(names: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    """(qualified name, OpOverload) of each functional overload that takes a tensor: the
    out= and in-place forms, and TorchScript's scalar forms, are not autocast's business."""
    for name in names:
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:  # not in this torch
            continue
        for overload_name in packet.overloads():
            overload = getattr(packet, overload_name)
            schema = overload._schema
            takes_tensor = any(isinstance(a.type, torch.TensorType) for a in schema.arguments)
            if takes_tensor and not schema.is_mutable:
                yield (name if overload_name == "default" else f"{name}.{overload_name}",
                       overload)


def _below_autocast() -> torch._C._ExcludeDispatchKeyGuard:
    return torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_AUTOCAST_CPU))


def _to_fp32(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype in _HALF:
        return value.float()
    if isinstance(value, list | tuple):
        return type(value)(_to_fp32(item) for item in value)
    return value


def _fp32_kernel(op: Any) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        with _below_autocast():
            return op(*_to_fp32(args), **{k: _to_fp32(v) for k, v in kwargs.items()})

    return kernel


def _fp32_dtype_kernel(op: Any) -> Callable[..., Any]:
    """CUDA's fp32_set_opt_dtype: dtype=float32 when none was given and the first argument is
    a floating tensor (not fp64); the inputs are not cast."""
    position = next(i for i, a in enumerate(op._schema.arguments) if a.name == "dtype")

    def kernel(*args: Any, **kwargs: Any) -> Any:
        first = args[0] if args else None
        given = (args[position] if len(args) > position else kwargs.get("dtype")) is not None
        eligible = (isinstance(first, torch.Tensor) and first.is_floating_point()
                    and first.dtype != torch.float64)
        if eligible and not given:
            if len(args) > position:
                args = (*args[:position], torch.float32, *args[position + 1:])
            else:
                kwargs = {**kwargs, "dtype": torch.float32}
        with _below_autocast():
            return op(*args, **kwargs)

    return kernel


def _cross_entropy(logits: torch.Tensor, target: torch.Tensor, weight: Any = None,
                   reduction: int = 1, ignore_index: int = -100,
                   label_smoothing: float = 0.0) -> torch.Tensor:
    """aten.cross_entropy_loss as CUDA runs it: log_softmax(logits, dtype=float32), then
    nll_loss on those fp32 log-probabilities."""
    aten = torch.ops.aten
    plain = weight is None and label_smoothing == 0.0 and target.dtype == torch.long
    if not plain:  # probabilities as targets, weights, smoothing: fp32 inputs as a whole
        with _below_autocast():
            return aten.cross_entropy_loss(_to_fp32(logits), target, _to_fp32(weight),
                                           reduction, ignore_index, label_smoothing)
    log_probs = aten.log_softmax.int(logits, 1 if logits.dim() > 1 else 0, torch.float32)
    with _below_autocast():
        return aten.nll_loss_nd(log_probs, target, None, reduction, ignore_index)
