"""Trace a step as PyTorch's CUDA backend runs it, on the CPU with fake tensors.

A CPU-only PyTorch cannot make fake CUDA tensors (autograd aborts on a device it was not
built for), and a CPU trace records the CPU kernels, which keep other tensors than CUDA's:
the CPU flash attention kernel refuses dropout, so training falls back to the math backend
with its probabilities and float dropout noise saved; CPU dropout saves a float noise
tensor where CUDA's fused kernel saves a bool mask. `CudaKernels` is a TorchFunctionMode
that, while the step is traced, runs those ops as CUDA would:

- scaled_dot_product_attention: the backend CUDA picks for the GPU (sdpa_select.py) called
  directly. PyTorch's CUDA kernels (`_scaled_dot_product_flash_attention`, `..._efficient_...`,
  `..._cudnn_...` and their backward) have meta implementations, so they run on fake CPU
  tensors, and autograd saves exactly what derivatives.yaml says they save: Q, K, V, the
  output, the logsumexp and the RNG state, never the probabilities. The steps around them
  are those of the CUDA branch of attention.cpp's composite: the head dim padded to a
  multiple of 8 for flash, the mask made additive and aligned to 16 for memory-efficient,
  autocast's cast of the inputs (SDPA is on CUDA autocast's lower-precision list);
- dropout: `native_dropout`, CUDA's fused kernel (Dropout.cpp `is_fused_kernel_acceptable`),
  which saves a bool mask;
- batch norm: cuDNN where `_select_batch_norm_backend` picks it; its saved tensors are those
  of the native kernel (input, fp32 mean and inverse std per channel), so it runs unchanged
  and is only recorded.
Every choice is recorded (kernel_choice.py) for the report.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from graphmem.frontends.torch.kernel_choice import CudaTarget, KernelChoice
from graphmem.frontends.torch.sdpa_select import Backend, SdpaCall, select_backend

aten = torch.ops.aten
FLASH_HEAD_ALIGNMENT = 8  # attention.cpp: pad_last_dim<8> before the flash kernel
EFFICIENT_MASK_ALIGNMENT = 16  # attention.cpp preprocess_mask: mem_eff_alignment
CUDNN_BN_MAX_BATCH = {True: 880801, False: 65535}  # Normalization.cpp, training / eval
SAVED = {
    Backend.FLASH: "saves out, fp32 logsumexp [b,h,s], RNG state",
    Backend.EFFICIENT: "saves out, fp32 logsumexp [b,h,s up to a multiple of 32], RNG seed"
                       " and offset",
    Backend.CUDNN: "saves out, fp32 softmax stats [b,h,s,1], RNG seed and offset",
    Backend.MATH: "saves the attention probabilities",
}


class CudaKernels(TorchFunctionMode):
    """Run attention, dropout and batch norm as CUDA would on `target` (module docstring)."""

    def __init__(self, target: CudaTarget) -> None:
        super().__init__()
        self.target = target
        self.choices: list[KernelChoice] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is F.scaled_dot_product_attention:
            return self._attention(*args, **kwargs)
        if func is F.dropout or func is torch.dropout:
            return self._dropout(func, *args, **kwargs)
        if func is F.batch_norm:
            self._note_batch_norm(*args, **kwargs)
        return func(*args, **kwargs)

    # ----- dropout ----------------------------------------------------------------------------
    def _dropout(self, func: Any, input: torch.Tensor, p: float = 0.5, training: bool = True,
                 inplace: bool = False, **kwargs: Any) -> torch.Tensor:
        train = kwargs.get("train", training)
        # Dropout.cpp: the fused kernel for 0 < p < 1 in training, not for dropout_ (in place)
        if not train or inplace or not 0 < p < 1 or input.numel() == 0:
            return func(input, p, train, inplace) if func is F.dropout else func(input, p, train)
        self.choices.append(KernelChoice("dropout", "fused native_dropout",
                                         "saves a bool mask"))
        return aten.native_dropout(input, p, True)[0]

    # ----- batch norm -------------------------------------------------------------------------
    def _note_batch_norm(self, input: torch.Tensor, running_mean: Any, running_var: Any,
                         weight: Any = None, bias: Any = None, training: bool = False,
                         *_: Any, **__: Any) -> None:
        kernel = "cudnn" if _cudnn_batch_norm(input, weight, bias, running_mean, running_var,
                                              training) else "native"
        mode = "training" if training else "eval"
        self.choices.append(KernelChoice(
            "batch norm", kernel, f"{mode}; saves the input, fp32 mean and 1/std per channel"))

    # ----- attention --------------------------------------------------------------------------
    def _attention(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                   is_causal: bool = False, scale: float | None = None,
                   enable_gqa: bool = False) -> torch.Tensor:
        query, key, value, attn_mask = _autocast_inputs(query, key, value, attn_mask)
        call = SdpaCall(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
        backend, refused = select_backend(call, self.target)
        self.choices.append(KernelChoice("attention", str(backend),
                                         _attention_detail(call, backend, self.target, refused)))
        with torch.autocast("cpu", enabled=False):  # the composite's ops run below autocast
            return _RUN[backend](call, scale)


def _cudnn_batch_norm(input: torch.Tensor, weight: Any, bias: Any, running_mean: Any,
                      running_var: Any, training: bool) -> bool:
    """Normalization.cpp `_select_batch_norm_backend` (cuDNN compiled in and enabled)."""
    half_input_ok = input.dtype != torch.float16 or (
        weight is not None and weight.dtype == torch.float32)
    stats = (running_mean is not None and running_var is not None) or (
        running_mean is None and running_var is None and training)
    return (input.dtype != torch.bfloat16 and getattr(weight, "dtype", None) != torch.bfloat16
            and half_input_ok and weight is not None and bias is not None and stats
            and input.dim() >= 3 and input.shape[0] <= CUDNN_BN_MAX_BATCH[bool(training)]
            and input.numel() < 2**31 - 1 and torch.backends.cudnn.enabled)


def _autocast_inputs(*tensors: torch.Tensor | None) -> tuple[Any, ...]:
    """CUDA autocast's lower_precision_fp policy for SDPA: floating inputs to the half type."""
    if not torch.is_autocast_enabled("cpu"):
        return tensors
    half = torch.get_autocast_dtype("cpu")
    return tuple(t.to(half) if isinstance(t, torch.Tensor) and t.is_floating_point()
                 and t.dtype not in (half, torch.float64) else t for t in tensors)


def _attention_detail(call: SdpaCall, backend: Backend, target: CudaTarget,
                      refused: str) -> str:
    dtype = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(
        call.query.dtype, str(call.query.dtype))
    parts = [target.sm, dtype, f"head dim {call.head_dim}"]
    parts += [flag for flag, on in (("causal", call.is_causal),
                                    ("mask", call.attn_mask is not None),
                                    (f"dropout {call.dropout_p:g}", call.dropout_p > 0)) if on]
    if backend is Backend.MATH and call.dropout_p > 0:
        saved = f"{SAVED[backend]} and a bool dropout mask"
    else:
        saved = SAVED[backend]
    why = f"; not {refused}" if refused else ""
    return f"{', '.join(parts)}; {saved}{why}"


# ----- the CUDA branches of attention.cpp `scaled_dot_product_attention` ----------------------
def _additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """convert_boolean_attn_mask: a bool mask becomes 0 / -inf in the query's dtype."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.where(mask, 0.0, torch.scalar_tensor(-math.inf, dtype=dtype))


def _run_flash(call: SdpaCall, scale: float | None) -> torch.Tensor:
    head_dim = call.head_dim
    pad = -head_dim % FLASH_HEAD_ALIGNMENT
    q, k, v = ((F.pad(t, (0, pad)) if pad else t) for t in (call.query, call.key, call.value))
    og_scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    out = aten._scaled_dot_product_flash_attention(q, k, v, call.dropout_p, call.is_causal,
                                                   False, scale=og_scale)[0]
    return out[..., :head_dim] if pad else out


def _run_efficient(call: SdpaCall, scale: float | None) -> torch.Tensor:
    q, k, v = call.query, call.key, call.value
    if k.shape[1] != q.shape[1]:  # grouped KV heads: the kernel reads one K, V per Q head
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    mask = _additive_mask(call.attn_mask, q.dtype)
    if mask is not None:
        mask = _aligned_mask(mask, q, k)
    return aten._scaled_dot_product_efficient_attention(
        q, k, v, mask, call.requires_grad, call.dropout_p, call.is_causal, scale=scale)[0]


def _aligned_mask(mask: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """attention.cpp preprocess_mask: expanded to [b, h, s, l]; a key length that is not a
    multiple of 16 is padded (a new [b, h, s, l16] tensor, sliced back); strides not
    multiples of 16 are made contiguous (a new [b, h, s, l] tensor)."""
    mask = mask.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    length = mask.shape[-1]
    pad = -length % EFFICIENT_MASK_ALIGNMENT
    if pad:
        return F.pad(mask, (0, pad))[..., :length]
    if any(stride % EFFICIENT_MASK_ALIGNMENT for stride in mask.stride()[:3]):
        return mask.contiguous()
    return mask


def _run_cudnn(call: SdpaCall, scale: float | None) -> torch.Tensor:
    mask = _additive_mask(call.attn_mask, call.query.dtype)
    return aten._scaled_dot_product_cudnn_attention(
        call.query, call.key, call.value, mask, call.requires_grad, call.dropout_p,
        call.is_causal, False, scale=scale)[0]


def _run_math(call: SdpaCall, scale: float | None) -> torch.Tensor:
    mask = _additive_mask(call.attn_mask, call.query.dtype)
    if call.dropout_p == 0:
        return aten._scaled_dot_product_attention_math(
            call.query, call.key, call.value, mask, 0.0, call.is_causal, None, scale=scale,
            enable_gqa=call.enable_gqa)[0]
    return _math_with_fused_dropout(call, mask, scale)


def _math_with_fused_dropout(call: SdpaCall, mask: torch.Tensor | None,
                             scale: float | None) -> torch.Tensor:
    """attention.cpp `_scaled_dot_product_attention_math` step by step, its at::dropout
    being CUDA's fused kernel (a bool mask saved) where the CPU draws float noise."""
    q, k, v = call.query, call.key, call.value
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):  # kept in fp32 for accuracy, cast back
        q, k, v = q.float(), k.float(), v.float()
    root = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(call.head_dim))
    q = q * root
    if call.is_causal:
        causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        mask = _additive_mask(causal, q.dtype)
    if call.enable_gqa and k.shape[-3] != q.shape[-3]:
        k, v = (t.repeat_interleave(q.shape[-3] // t.shape[-3], dim=-3) for t in (k, v))
    scores = torch.matmul(q, k.transpose(-2, -1) * root)
    if mask is not None:
        scores = scores + mask
    weights = aten._safe_softmax(scores, -1)
    weights = aten.native_dropout(weights, call.dropout_p, True)[0]
    return torch.matmul(weights, v).to(dtype)


_RUN = {Backend.FLASH: _run_flash, Backend.EFFICIENT: _run_efficient,
        Backend.CUDNN: _run_cudnn, Backend.MATH: _run_math}
