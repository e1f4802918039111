"""torch.nn's fused inference kernels, traced where eager runs them.

`nn.MultiheadAttention.forward` runs one fused kernel, `torch._native_multi_head_attention`,
when every condition of its fast path holds (torch/nn/modules/activation.py
`why_not_fast_path`): self-attention on a batched, batch-first input, the module in eval
mode, no tensor argument requiring a gradient while grad is on, even heads, no bias_k /
bias_v / add_zero_attn, one packed in-projection, the query's dtype the weights', no float
mask, autocast off. Each is decided on the module and the (fake) tensors, as in eager. One
more refuses it under graphmem's trace only: `_is_make_fx_tracing()`, which is true whenever
make_fx's dispatch mode is on the stack (an exported graph wants the Python path's aten ops).
graphmem's trace is not an export: it plans the memory of the step eager runs, and eager
runs the fused kernel. The kernel's projections, scores and weights live and die inside it
(eager's live tensors after the kernel: its output and the weights; +154% on the zoo's
`nn_mha` before), and the torch-cpu runtime model adds them as its scratch
(graphmem/runtime_models/torch_cpu.py `native_multi_head_attention`).

While tracing for the CPU, that one check answers as it would outside make_fx (an export,
`torch.compiler.is_exporting()`, still refuses). A trace for a CUDA target keeps the Python
path: CUDA's kernel picks among scaled-dot-product backends inside itself, whose scratch the
CUDA runtime model does not price, so the Python path's tensors stay the bound there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.nn.modules import activation


@contextlib.contextmanager
def eager_fast_paths(enabled: bool = True) -> Iterator[None]:
    """nn.MultiheadAttention's fast path decided as in eager while tracing (`enabled`)."""
    if not enabled:
        yield
        return
    original = activation._is_make_fx_tracing
    activation._is_make_fx_tracing = _exporting
    try:
        yield
    finally:
        activation._is_make_fx_tracing = original


def _exporting() -> bool:
    # torch.compiler.is_exporting is torch 2.6's; before it no export sets the flag it reads
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return bool(is_exporting is not None and is_exporting())
