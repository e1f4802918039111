"""A 4-bit NF4 Linear as bitsandbytes runs it, made of ops a fake-tensor trace can follow.

Nf4Linear holds what `bnb.nn.Linear4bit` holds on the device (graphmem/frontends/torch/nf4.py
gives the sizes): the packed codes as a frozen uint8 parameter `weight` [(n + 1) // 2, 1], and
its quantization constants as buffers. Its forward is `Linear4bit.forward`: the input cast to
the compute dtype, `matmul_4bit`, the result cast back.

`matmul_4bit` (bitsandbytes' MatMul4Bit, and its dequantize + F.linear path) dequantizes the
whole weight to the compute dtype for the matmul and frees it after; backward dequantizes it
again to compute the input's gradient (`grad_output @ W`) and saves nothing else: not the
input (no weight gradient). `_dequantize` makes tensors of exactly those sizes: the absmax as
fp32 [blocks] (dequantize_blockwise of the uint8 codes, then `+= offset`), and the weight
[out, in] in the compute dtype, its codes scaled in place by each block's absmax. The values
are not bitsandbytes' (the NF4 table lookup is not traced), the bytes and their lifetimes are.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from graphmem.frontends.torch.finetune import QloraOptions
from graphmem.frontends.torch.nf4 import (
    DYNAMIC_CODE_ENTRIES,
    NF4_CODE_ENTRIES,
    Nf4Bytes,
    blocks,
    ceil_div,
    nf4_bytes,
)
from graphmem.frontends.torch.nf4 import NESTED_BLOCKSIZE as _NESTED

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def conv1d_class() -> type[nn.Module] | None:
    """transformers' Conv1D (GPT-2's Linear with the weight stored [in, out]), if installed."""
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:
        return None
    return Conv1D


def linear_shape(module: nn.Module) -> tuple[int, int]:
    """(in_features, out_features) of an nn.Linear, a Conv1D ([in, out] weight) or an
    Nf4Linear."""
    if isinstance(module, nn.Linear | Nf4Linear):
        return module.in_features, module.out_features
    weight = module.weight
    assert isinstance(weight, torch.Tensor), type(weight)
    rows, columns = weight.shape  # Conv1D: [in, out]
    return int(rows), int(columns)


class Nf4Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias_dtype: torch.dtype | None,
                 options: QloraOptions) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.compute_dtype = _DTYPES[options.compute_dtype]
        self.blocksize, self.double_quant = options.blocksize, options.double_quant
        numel = in_features * out_features
        first = blocks(numel, self.blocksize)
        with torch.device("meta"):
            self.weight = nn.Parameter(torch.empty(((numel + 1) // 2, 1), dtype=torch.uint8),
                                       requires_grad=False)
            # bitsandbytes casts the bias to the compute dtype on the first forward
            self.bias = None if bias_dtype is None else nn.Parameter(
                torch.empty(out_features, dtype=self.compute_dtype), requires_grad=False)
            absmax_dtype = torch.uint8 if self.double_quant else torch.float32
            self.register_buffer("absmax", torch.empty(first, dtype=absmax_dtype))
            self.register_buffer("code", torch.empty(NF4_CODE_ENTRIES))
            if self.double_quant:
                self.register_buffer("nested_absmax", torch.empty(ceil_div(first, _NESTED)))
                self.register_buffer("nested_code", torch.empty(DYNAMIC_CODE_ENTRIES))
                self.register_buffer("offset", torch.empty(()))

    @classmethod
    def like(cls, linear: nn.Module, options: QloraOptions) -> Nf4Linear:
        """The 4-bit layer transformers makes of `linear` (nn.Linear or Conv1D)."""
        in_features, out_features = linear_shape(linear)
        bias = getattr(linear, "bias", None)
        return cls(in_features, out_features, None if bias is None else bias.dtype, options)

    @property
    def layout_bytes(self) -> Nf4Bytes:
        return nf4_bytes(self.in_features * self.out_features, self.blocksize,
                         self.double_quant)

    @property
    def dequantized_bytes(self) -> int:
        """The transient weight of one matmul: [out, in] in the compute dtype."""
        return self.in_features * self.out_features * self.compute_dtype.itemsize

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        input_dtype = x.dtype
        x = x.to(self.compute_dtype)  # a no-op when x is already in the compute dtype
        offset = self.offset if self.double_quant else None
        output = _Nf4Matmul.apply(x, self.weight, self.absmax, offset, self.code, self.bias,
                                  (self.out_features, self.in_features), self.blocksize)
        return output.to(input_dtype)


class _Nf4Matmul(torch.autograd.Function):
    """bitsandbytes' MatMul4Bit: y = x W^T + b with W dequantized, dx = dy W; no dW."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, packed: torch.Tensor, absmax: torch.Tensor,
                offset: torch.Tensor | None, code: torch.Tensor, bias: torch.Tensor | None,
                shape: tuple[int, int], blocksize: int) -> torch.Tensor:
        # the constants are saved, not the input: they are resident anyway (no extra bytes)
        ctx.save_for_backward(packed, absmax, code, *(() if offset is None else (offset,)))
        ctx.shape, ctx.blocksize = shape, blocksize
        weight = _dequantize(packed, absmax, offset, code, shape, blocksize, x.dtype)
        return nn.functional.linear(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        packed, absmax, code, *offset = ctx.saved_tensors
        grad_x = None
        if ctx.needs_input_grad[0]:
            weight = _dequantize(packed, absmax, offset[0] if offset else None, code,
                                 ctx.shape, ctx.blocksize, grad.dtype)
            grad_x = torch.matmul(grad, weight)  # [.., out] @ [out, in] -> [.., in]
        return grad_x, None, None, None, None, None, None, None


def _dequantize(packed: torch.Tensor, absmax: torch.Tensor, offset: torch.Tensor | None,
                code: torch.Tensor, shape: tuple[int, int], blocksize: int,
                dtype: torch.dtype) -> torch.Tensor:
    """A weight of `shape` in `dtype` from its packed codes, one fresh tensor of that size."""
    scales = absmax.to(torch.float32)  # double quant: a new fp32 [blocks]; else absmax itself
    if offset is not None:
        scales.add_(offset)  # dequantize_4bit: absmax += quant_state.offset
    pair = code[:2].to(dtype)  # the two codes of a byte: [P, 1] x [2] -> [P, 2], in `dtype`
    weight = torch.mul(packed, pair).view(-1)
    numel = math.prod(shape)
    if weight.numel() != numel:  # an odd element count: the last byte holds one code
        weight = weight[:numel]
    if numel % blocksize == 0:
        weight.view(-1, blocksize).mul_(scales.view(-1, 1))
    return weight.view(shape)
