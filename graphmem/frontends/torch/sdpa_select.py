"""Which kernel `scaled_dot_product_attention` runs on a CUDA GPU: PyTorch's choice, ported.

A port of `select_sdp_backend` (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp and
sdp_utils_cpp.h, PyTorch 2.10-2.13) for dense inputs: the backends are tried in priority
order and the first whose checks all pass runs. The order is flash, memory-efficient, math
(cuDNN last, behind math, so never), except where `check_prefer_cudnn_attention` puts cuDNN
first: sm90/93/100/103 with cuDNN newer than 9.15 (PyTorch's wheels from 2.11 on bundle one:
huggingface/transformers#48163 found the default already cuDNN there).
Each check below names the C++ function it ports. The user's switches are honoured
(`torch.nn.attention.sdpa_kernel`, `torch.backends.cuda.enable_flash_sdp(False)`...).

Assumed, since no GPU is asked: cuDNN >= 9.15.1 (no old-version limits; head dim <= 128 for
cuDNN), flash attention 2 (FA3 is opt-in), no deterministic mode, dense (not nested) inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import torch

from graphmem.frontends.torch.kernel_choice import CudaTarget


class Backend(StrEnum):
    FLASH = "flash"
    EFFICIENT = "memory-efficient"
    CUDNN = "cudnn"
    MATH = "math"


@dataclass(frozen=True)
class SdpaCall:
    """The arguments `scaled_dot_product_attention` was called with (tensors are fake)."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attn_mask: torch.Tensor | None
    dropout_p: float
    is_causal: bool
    enable_gqa: bool

    @property
    def requires_grad(self) -> bool:
        """sdp_utils `input_requires_grad`: an input needs a gradient and grad mode is on."""
        needs = any(t.requires_grad for t in (self.query, self.key, self.value))
        return needs and torch.is_grad_enabled()

    @property
    def head_dim(self) -> int:
        return int(self.query.shape[-1])


Check = Callable[[SdpaCall, CudaTarget], str]  # "" when it passes, else why not
_HALF = (torch.float16, torch.bfloat16)


def select_backend(call: SdpaCall, target: CudaTarget) -> tuple[Backend, str]:
    """The backend CUDA would run, and why the preferred one before it was refused."""
    refused = ""
    for backend in priority_order(target):
        if not _enabled(backend):
            continue
        if backend is Backend.MATH:
            return backend, refused
        why = next((reason for check in _CHECKS[backend] if (reason := check(call, target))),
                   "")
        if not why:
            return backend, refused
        refused = refused or f"{backend}: {why}"
    return Backend.MATH, refused  # PyTorch raises when math is disabled too; trace math


def priority_order(target: CudaTarget) -> tuple[Backend, ...]:
    """sdp_utils `priority_order`: cuDNN first where `check_prefer_cudnn_attention` holds:
    cuDNN newer than 9.15 (assumed) on sm90, sm93, sm100 or sm103 (major 9 or 10, minor 0
    or 3)."""
    if target.major in (9, 10) and target.minor in (0, 3):
        return (Backend.CUDNN, Backend.FLASH, Backend.EFFICIENT, Backend.MATH)
    return (Backend.FLASH, Backend.EFFICIENT, Backend.MATH)


def _enabled(backend: Backend) -> bool:
    cuda = torch.backends.cuda
    switches = {Backend.FLASH: cuda.flash_sdp_enabled, Backend.CUDNN: cuda.cudnn_sdp_enabled,
                Backend.EFFICIENT: cuda.mem_efficient_sdp_enabled,
                Backend.MATH: cuda.math_sdp_enabled}
    return switches[backend]()


# ----- checks shared by the fused kernels (sdp_utils_cpp.h) -----------------------------------
def four_dims(call: SdpaCall, target: CudaTarget) -> str:
    """check_tensor_shapes."""
    return "" if all(t.dim() == 4 for t in (call.query, call.key, call.value)) else "not 4-D"


def nonzero_lengths(call: SdpaCall, target: CudaTarget) -> str:
    """check_nonzero_sequence_lengths_dense."""
    return "" if call.query.shape[-2] and call.key.shape[-2] else "a sequence of length 0"


def _last_dim_stride_1(ignore_singleton: bool) -> Check:
    def check(call: SdpaCall, target: CudaTarget) -> str:
        """check_last_dim_stride_equals_1_dense."""
        unit = all(t.stride(-1) == 1 for t in (call.query, call.key, call.value))
        unit = unit or (ignore_singleton and call.head_dim == 1)
        mask = call.attn_mask is None or call.attn_mask.stride(-1) == 1
        return "" if unit and mask else "last dim not contiguous"

    return check


def heads_and_batch(call: SdpaCall, target: CudaTarget) -> str:
    """check_batch_size_and_num_heads_dense (grouped KV heads with enable_gqa)."""
    q, k, v = call.query, call.key, call.value
    if not q.shape[0] == k.shape[0] == v.shape[0]:
        return "batch sizes differ"
    if call.enable_gqa:
        same_kv = k.shape[-3] == v.shape[-3]
        return "" if same_kv and q.shape[-3] % k.shape[-3] == 0 else "KV heads do not divide Q's"
    return "" if q.shape[-3] == k.shape[-3] == v.shape[-3] else "head counts differ"


def _dtypes(allowed: Callable[[CudaTarget], tuple[torch.dtype, ...]]) -> Check:
    def check(call: SdpaCall, target: CudaTarget) -> str:
        """check_tensor_dtype."""
        dtype = call.query.dtype
        same = dtype == call.key.dtype == call.value.dtype
        return "" if same and dtype in allowed(target) else f"{_dtype_name(dtype)} inputs"

    return check


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(
        dtype, str(dtype).removeprefix("torch."))


def _sm_range(low: tuple[int, int], high: tuple[int, int]) -> Check:
    def check(call: SdpaCall, target: CudaTarget) -> str:
        """check_*_hardware_support."""
        return "" if target.within(low, high) else f"{target.sm} unsupported"

    return check


# ----- flash (can_use_flash_attention) --------------------------------------------------------
def no_mask(call: SdpaCall, target: CudaTarget) -> str:
    """check_for_attn_mask."""
    return "" if call.attn_mask is None else "an attention mask"


def flash_head_dim(call: SdpaCall, target: CudaTarget) -> str:
    """check_head_dim_size_flash: equal head dims, at most 256."""
    dims = {t.shape[-1] for t in (call.query, call.key, call.value)}
    return "" if len(dims) == 1 and call.head_dim <= 256 else "head dims over 256 or unequal"


def flash_training_head_dim(call: SdpaCall, target: CudaTarget) -> str:
    """check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120."""
    small_smem = target.within((8, 6), (8, 9)) or target.within((12, 0), (12, 1))
    if not (call.requires_grad and small_smem):
        return ""
    supported = call.head_dim <= 192 or (call.dropout_p == 0 and call.head_dim > 224)
    return "" if supported else f"training head dim {call.head_dim} on {target.sm}"


def causal_square(call: SdpaCall, target: CudaTarget) -> str:
    """check_flash_causal_non_square_seqlens."""
    square = call.query.shape[-2] == call.key.shape[-2]
    return "" if not call.is_causal or square else "causal with seq_q != seq_k"


# ----- memory-efficient (can_use_mem_efficient_attention) -------------------------------------
def gemm_alignment(call: SdpaCall, target: CudaTarget) -> int:
    """minimum_gemm_alignment, in elements: 8 for half types on tensor cores, else 4 on
    sm80+ (1 before sm80 without tensor cores)."""
    half = call.query.dtype in _HALF
    tensor_cores = target.major >= 8 or (target.major >= 7 and half)
    alignment = 4 if target.major >= 8 else 1
    return max(alignment, 128 // (16 if half else 32)) if tensor_cores else alignment


def efficient_head_dim(call: SdpaCall, target: CudaTarget) -> str:
    """check_head_dim_size_mem_efficient: Q and K dims equal, Q and V dims aligned."""
    align = gemm_alignment(call, target)
    q_dim, k_dim, v_dim = (int(t.shape[-1]) for t in (call.query, call.key, call.value))
    ok = q_dim == k_dim and q_dim % align == 0 and v_dim % align == 0 and q_dim > 0 < v_dim
    return "" if ok else f"head dim not a multiple of {align}"


def efficient_pointer_alignment(call: SdpaCall, target: CudaTarget) -> str:
    """check_data_ptr_alignment_mem_efficient: storage offsets aligned on sm80+."""
    if target.major < 8:
        return ""
    align = gemm_alignment(call, target)
    misaligned = [t for t in (call.query, call.key, call.value)
                  if t.numel() and t.storage_offset() % align]
    return "misaligned storage offsets" if misaligned else ""


# ----- cuDNN (can_use_cudnn_attention) --------------------------------------------------------
CUDNN_MAX_BATCH_OR_HEADS = 65535
CUDNN_MAX_HEAD_DIM = 128  # PyTorch's limit unless cuDNN > 9.22 with frontend >= 1.24 on sm90/10x


def cudnn_dropout(call: SdpaCall, target: CudaTarget) -> str:
    """check_cudnn_dropout: a multiple of 1/16."""
    sixteenths = call.dropout_p * 16.0
    return "" if sixteenths == math.floor(sixteenths) else "dropout not a multiple of 1/16"


def cudnn_mask_shape(call: SdpaCall, target: CudaTarget) -> str:
    """check_attn_mask_shape: 2-D, or 4-D broadcasting over batch and heads."""
    mask = call.attn_mask
    if mask is None:
        return ""
    q, k = call.query, call.key
    rows_ok = mask.shape[-2] in (q.shape[2], 1) and mask.shape[-1] in (k.shape[2], 1)
    if mask.requires_grad or not rows_ok:
        return "mask shape"
    if mask.dim() == 2:
        return ""
    lead_ok = mask.dim() == 4 and mask.shape[0] in (1, q.shape[0]) and mask.shape[1] in (
        1, q.shape[1])
    return "" if lead_ok else "mask shape"


def cudnn_heads(call: SdpaCall, target: CudaTarget) -> str:
    """check_batch_size_and_num_heads_dense<gqa, not same heads, mqa>."""
    q, k, v = call.query, call.key, call.value
    same_batch = q.shape[0] == k.shape[0] == v.shape[0]
    grouped = k.shape[1] == v.shape[1] and q.shape[1] % k.shape[1] == 0
    return "" if same_batch and grouped else "batch or head counts"


def cudnn_shapes(call: SdpaCall, target: CudaTarget) -> str:
    """check_cudnn_tensor_shapes (cuDNN >= 9.15)."""
    q, k, v = call.query, call.key, call.value
    if max(q.shape[0], q.shape[1]) > CUDNN_MAX_BATCH_OR_HEADS:
        return "batch or heads over 65535"
    dims = (int(q.shape[3]), int(v.shape[3]))
    if max(dims) > CUDNN_MAX_HEAD_DIM or any(d % 8 for d in dims):
        return f"head dim over {CUDNN_MAX_HEAD_DIM} or not a multiple of 8"
    if k.shape[2] == 1 or (call.dropout_p and q.shape[2] == 1):
        return "sequence length 1"
    return ""


def _low_precision(target: CudaTarget) -> tuple[torch.dtype, ...]:
    return _HALF if target.major >= 8 else (torch.float16,)


def _efficient_dtypes(target: CudaTarget) -> tuple[torch.dtype, ...]:
    return (torch.float16, torch.float32, torch.bfloat16) if target.major >= 8 else (
        torch.float16, torch.float32)


_CHECKS: dict[Backend, tuple[Check, ...]] = {
    Backend.FLASH: (four_dims, no_mask, flash_head_dim, _sm_range((8, 0), (12, 1)),
                    flash_training_head_dim, causal_square, _dtypes(_low_precision),
                    heads_and_batch, nonzero_lengths, _last_dim_stride_1(True)),
    Backend.EFFICIENT: (_sm_range((5, 0), (12, 1)), four_dims, efficient_head_dim,
                        efficient_pointer_alignment, nonzero_lengths, _last_dim_stride_1(False),
                        heads_and_batch, _dtypes(_efficient_dtypes)),
    Backend.CUDNN: (four_dims, _dtypes(_low_precision), cudnn_mask_shape,
                    _sm_range((8, 0), (12, 1)), cudnn_dropout, nonzero_lengths,
                    _last_dim_stride_1(True), cudnn_heads, cudnn_shapes),
}
