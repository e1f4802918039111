"""CUDA's autocast policy, applied while tracing on the CPU.

graphmem traces with fake tensors on the CPU, where only CPU autocast exists (PyTorch refuses
to enable CUDA autocast without a GPU). The two policies agree on the ops that run in lower
precision (matmul, linear, conv, bmm, SDPA), but CUDA also runs a list of ops in fp32 that CPU
autocast leaves in bf16/fp16: softmax, log_softmax, layer_norm, group_norm, exp, log, pow,
rsqrt, sum, cumsum and most losses (PyTorch's aten/src/ATen/autocast_mode.h: AT_FORALL_FP32
and AT_FORALL_FP32_SET_OPT_DTYPE). Those fp32 outputs, and the fp32 copies of their inputs
that the casts make, are what autograd saves on a GPU, so a CPU trace under-counts an AMP
training step (measured on an H200: TinyGPT bf16 training -34%).

`CudaAutocastPolicy` is a TorchFunctionMode that reproduces those two CUDA policies on top of
CPU autocast:
- fp32: half-precision floating inputs are cast to fp32 and the op runs with autocast off;
- fp32_set_opt_dtype: the op runs with dtype=float32 when the caller gave none (softmax of a
  bf16 tensor returns fp32 without a separate copy of its input, as on CUDA).
cross_entropy is composite on CUDA (log_softmax with dtype=float32, then nll_loss); CPU
autocast instead casts the logits to fp32 first, a copy CUDA never makes, so it is rewritten.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

# AT_FORALL_FP32 (functional and Tensor-method names that reach those aten ops)
FP32_NAMES = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "__pow__", "__rpow__", "float_power",
    "softplus", "layer_norm", "group_norm", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss", "kl_div", "l1_loss",
    "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "interpolate", "upsample", "upsample_nearest", "upsample_bilinear",
})
# AT_FORALL_FP32_SET_OPT_DTYPE: name -> index of the positional dtype argument
SET_OPT_DTYPE_POSITION = {"softmax": 3, "log_softmax": 3, "cumsum": 2, "cumprod": 2,
                          "sum": 3, "prod": 3}
_HALF = (torch.float16, torch.bfloat16)


def _to_fp32(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype in _HALF:
        return value.float()
    return value


def _any_half(args: Any, kwargs: dict) -> bool:
    found = []
    tree_map(lambda v: found.append(isinstance(v, torch.Tensor) and v.dtype in _HALF),
             (args, kwargs))
    return any(found)


class CudaAutocastPolicy(TorchFunctionMode):
    """Under CPU autocast, run the ops CUDA autocast runs in fp32 in fp32 (see module doc)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if not torch.is_autocast_enabled("cpu") or not _any_half(args, kwargs):
            return func(*args, **kwargs)
        if name == "cross_entropy":
            return _cross_entropy(*args, **kwargs)
        if name in SET_OPT_DTYPE_POSITION:
            given = len(args) > SET_OPT_DTYPE_POSITION[name] or kwargs.get("dtype") is not None
            if not given and _is_half_tensor(args[0] if args else kwargs.get("input")):
                kwargs["dtype"] = torch.float32
            return func(*args, **kwargs)
        if name in FP32_NAMES:
            with torch.autocast("cpu", enabled=False):
                return func(*tree_map(_to_fp32, args), **tree_map(_to_fp32, kwargs))
        return func(*args, **kwargs)


def _is_half_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype in _HALF


def _cross_entropy(logits: torch.Tensor, target: torch.Tensor, weight: Any = None,
                   size_average: Any = None, ignore_index: int = -100, reduce: Any = None,
                   reduction: str = "mean", label_smoothing: float = 0.0) -> torch.Tensor:
    functional = torch.nn.functional
    plain = (weight is None and size_average is None and reduce is None
             and label_smoothing == 0.0 and target.dtype == torch.long)
    if not plain:  # probabilities as targets, weights, smoothing: fp32 inputs as a whole
        with torch.autocast("cpu", enabled=False):
            return functional.cross_entropy(
                _to_fp32(logits), target, weight=_to_fp32(weight), size_average=size_average,
                ignore_index=ignore_index, reduce=reduce, reduction=reduction,
                label_smoothing=label_smoothing)
    log_probs = torch.log_softmax(logits, dim=1 if logits.dim() > 1 else 0, dtype=torch.float32)
    with torch.autocast("cpu", enabled=False):
        return functional.nll_loss(log_probs, target, ignore_index=ignore_index,
                                   reduction=reduction)
