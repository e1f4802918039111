"""Fused attention and the ops around it, priced on the torch path (graphmem/ops/attention.py's
formulas through graphmem/frontends/torch/costs.py, FUSED_ATTENTION in graphmem/ops/aten.py).

Every kernel of scaled-dot-product attention, CPU flash or CUDA's flash, memory-efficient and
cuDNN, costs the MACs of the math backend's matmuls (FlopCounterMode's count of the same call
with SDPBackend.MATH): forward l * (numel(Q) + numel(out)), backward twice that.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from graphmem.frontends.torch.costs import imported_cost
from graphmem.ops.aten import FUSED_ATTENTION, NO_ARITHMETIC, PER_ELEMENT
from graphmem.ops.attention import SCORE_BACKWARD_FLOPS, SCORE_FLOPS

pytestmark = pytest.mark.torch
aten = torch.ops.aten


def priced(fn: Callable[..., object], *args: torch.Tensor) -> dict[str, tuple[int, int]]:
    """aten packet -> (MACs, FLOPs) summed over the traced nodes of `fn` (fake tensors)."""
    graph_module = make_fx(fn, tracing_mode="fake")(*args)
    found: dict[str, tuple[int, int]] = {}
    for fx_node in graph_module.graph.nodes:
        packet = getattr(fx_node.target, "overloadpacket", None)
        if fx_node.op != "call_function" or packet is None:
            continue
        cost = imported_cost(fx_node)
        assert cost is not None, f"{fx_node.target} is not priced"
        macs, flops = found.get(packet.__name__, (0, 0))
        found[packet.__name__] = (macs + cost.macs, flops + cost.flops)
    return found


def qkv(dtype: torch.dtype = torch.float32, kv_heads: int = 4) -> tuple[torch.Tensor, ...]:
    # Q [2, 4, 8, 16], K [2, kv, 10, 16], V [2, kv, 10, 32]: out [2, 4, 8, 32]
    return (torch.randn(2, 4, 8, 16, dtype=dtype, requires_grad=True),
            torch.randn(2, kv_heads, 10, 16, dtype=dtype, requires_grad=True),
            torch.randn(2, kv_heads, 10, 32, dtype=dtype, requires_grad=True))


# forward: l * (numel(Q) + numel(out)) = 10 * (2*4*8*16 + 2*4*8*32) = 10 * (1024 + 2048)
FORWARD_MACS = 30_720
SCORES = 2 * 4 * 8 * 10  # b*h*s*l = 640


def test_cpu_flash_forward_costs_the_math_backends_matmuls() -> None:
    q, k, v = qkv()
    found = priced(lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v)[0], q.detach(), k.detach(), v.detach())
    macs, flops = found["_scaled_dot_product_flash_attention_for_cpu"]
    assert macs == FORWARD_MACS
    # 2 FLOPs per MAC, + softmax and scale on each of the 640 scores: 61,440 + 640 * 6
    assert flops == 2 * FORWARD_MACS + SCORES * SCORE_FLOPS == 65_280
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach())
    assert counter.get_total_flops() == 2 * macs


def test_cpu_flash_backward_is_twice_the_forward() -> None:
    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
        out = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)[0]
        return torch.autograd.grad(out.sum(), (q, k, v))

    found = priced(step, *qkv())
    macs, flops = found["_scaled_dot_product_flash_attention_for_cpu_backward"]
    # dP, dV: l * numel(out) each; dQ, dK: l * numel(Q) each = 2 * 30,720
    assert macs == 2 * FORWARD_MACS == 61_440
    assert flops == 2 * macs + SCORES * SCORE_BACKWARD_FLOPS  # 122,880 + 640 * 5
    # the math backend's forward and backward matmuls: FlopCounterMode counts 6 x 15,360 MACs
    q, k, v = qkv()
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        F.scaled_dot_product_attention(q, k, v).sum().backward()
    assert counter.get_total_flops() == 2 * (FORWARD_MACS + macs)


@pytest.mark.parametrize("op, args", [
    ("_scaled_dot_product_flash_attention", lambda q, k, v: (q, k, v, 0.0, False)),
    ("_scaled_dot_product_efficient_attention", lambda q, k, v: (q, k, v, None, True)),
    ("_scaled_dot_product_cudnn_attention",
     lambda q, k, v: (q, k, v, None, True, 0.0, False, False)),
])
def test_cuda_kernels_cost_what_the_cpu_kernel_costs(op: str, args: Callable[..., tuple]) -> None:
    # CUDA's kernels run on fake CPU tensors through their meta functions; the same Q, K, V
    # (head dims equal, as flash requires) cost the same MACs forward and backward
    q, k, v = (torch.randn(2, 4, 8, 16, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))

    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
        out = getattr(aten, op)(*args(q, k, v))[0]
        return torch.autograd.grad(out.sum(), (q, k, v))

    found = priced(step, q, k, v)
    # l * (numel(Q) + numel(out)) = 8 * (1024 + 1024) = 16,384; backward twice that
    assert found[op][0] == 16_384
    assert found[f"{op}_backward"][0] == 32_768


def test_grouped_kv_heads_change_bytes_not_macs() -> None:
    # Q has 4 heads, K and V 2: each query head still attends over l = 10 keys
    q, k, v = (t.detach() for t in qkv(kv_heads=2))
    found = priced(lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v)[0], q, k, v)
    assert found["_scaled_dot_product_flash_attention_for_cpu"][0] == FORWARD_MACS


def test_safe_softmax_and_slice_backward_are_priced() -> None:
    # the math backend's _safe_softmax: 5 FLOPs per element as softmax (2*4*8*10 = 640 -> 3200)
    scores = torch.randn(2, 4, 8, 10)
    found = priced(lambda x: aten._safe_softmax(x, -1), scores)
    assert found["_safe_softmax"] == (0, 640 * 5)
    assert PER_ELEMENT["_safe_softmax"] == PER_ELEMENT["_softmax"]

    def sliced(x: torch.Tensor) -> object:
        return torch.autograd.grad(x[:, 2:5].sum() + x[:, 0].sum(), (x,))

    found = priced(sliced, torch.randn(4, 8, requires_grad=True))
    assert found["slice_backward"] == (0, 0) and found["select_backward"] == (0, 0)


def test_every_fused_attention_name_is_an_aten_op() -> None:
    for name in (*FUSED_ATTENTION, *NO_ARITHMETIC):
        assert hasattr(torch.ops.aten, name), name
