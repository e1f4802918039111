"""The torch path's FLOPs (graphmem/frontends/torch/costs.py with graphmem/ops/aten.py's
tables) pinned against the ONNX rules of the same math and against FlopCounterMode.

A traced aten node and the ONNX node of the same op on the same shapes must cost the same:
the per-element numbers are imported from the ONNX rule families, never retyped (changing the
torch-side LayerNorm constant fails test_normalizations_cost_what_the_onnx_rules_say).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from graphmem.core.ir import DType, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.ops import find_rule
from graphmem.ops.aten import (
    CANONICAL,
    GROUPED_CONTRACTIONS,
    INPLACE_FORMS,
    NO_ARITHMETIC,
    PER_ELEMENT,
    POINTWISE_UNTAGGED,
    SAME_CONTRACTION,
    WINDOW_POOLS,
)
from tests.helpers.traced_ops import traced_flops


def onnx_flops(op_type: str, shapes: Sequence[Sequence[int] | None], output: Sequence[int],
               **attributes: int | tuple[int, ...]) -> int:
    """The ONNX rule's FLOPs for `op_type` on inputs of `shapes` (None: a missing input)."""
    def tensor(shape: Sequence[int]) -> Value:
        return Value("t", DType.FLOAT32, tuple(SymInt.const(d) for d in shape), Role.ACTIVATION)

    inputs = [None if shape is None else tensor(shape) for shape in shapes]
    node = Node(f"/onnx/{op_type}", op_type, inputs, [tensor(output)], dict(attributes))
    rule = find_rule(op_type)
    assert rule is not None
    return int(rule(node).flops)


X = torch.randn(4, 8, 16)  # 512 elements
W = torch.randn(16)
IMAGE = torch.randn(2, 8, 5, 5)  # 400 elements, 8 channels
CHANNEL = torch.randn(8)

# (aten packet, traced function and inputs, the ONNX node of the same math, its FLOPs by hand)
CASES = [
    # 512 elements x (5 statistics and apply + 1 scale + 1 bias) = 3584
    ("native_layer_norm", lambda x, w, b: F.layer_norm(x, (16,), w, b), (X, W, W),
     ("LayerNormalization", [(4, 8, 16), (16,), (16,)], (4, 8, 16), {}), 3584),
    # 512 x (max, subtract, exp, sum, divide) = 2560
    ("_softmax", lambda x: torch.softmax(x, -1), (X,), ("Softmax", [(4, 8, 16)], (4, 8, 16), {}),
     2560),
    ("_log_softmax", lambda x: torch.log_softmax(x, -1), (X,),
     ("LogSoftmax", [(4, 8, 16)], (4, 8, 16), {}), 2560),
    # 400 x (5 + 1 scale + 1 bias) = 2800
    ("native_group_norm", lambda x, w, b: F.group_norm(x, 4, w, b), (IMAGE, CHANNEL, CHANNEL),
     ("GroupNormalization", [(2, 8, 5, 5), (8,), (8,)], (2, 8, 5, 5), {"num_groups": 4}), 2800),
    # training: 400 x (4 statistics + 2 folded multiply-add) = 2400
    ("native_batch_norm",
     lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, training=True),
     (IMAGE, CHANNEL, CHANNEL, CHANNEL, CHANNEL.abs()),
     ("BatchNormalization", [(2, 8, 5, 5), (8,), (8,), (8,), (8,)], (2, 8, 5, 5),
      {"training_mode": 1}), 2400),
    # inference: 400 x 2 = 800
    ("native_batch_norm",
     lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, training=False),
     (IMAGE, CHANNEL, CHANNEL, CHANNEL, CHANNEL.abs()),
     ("BatchNormalization", [(2, 8, 5, 5), (8,), (8,), (8,), (8,)], (2, 8, 5, 5), {}), 800),
    # one pick per target: 4
    ("nll_loss_forward", lambda x, t: F.nll_loss(x, t),
     (torch.randn(4, 10), torch.randint(0, 10, (4,))),
     ("NegativeLogLikelihoodLoss", [(4, 10), (4,)], (), {}), 4),
    # one add per input element: 512
    ("sum", lambda x: x.sum(-1), (X,), ("ReduceSum", [(4, 8, 16)], (4, 8), {}), 512),
    ("amax", lambda x: x.amax(-1), (X,), ("ReduceMax", [(4, 8, 16)], (4, 8), {}), 512),
    # MaxPool 3x3 stride 2 on [1, 4, 9, 9]: [1, 4, 4, 4] = 64 windows x 9 compares = 576
    ("max_pool2d_with_indices", lambda x: F.max_pool2d(x, 3, 2), (torch.randn(1, 4, 9, 9),),
     ("MaxPool", [(1, 4, 9, 9)], (1, 4, 4, 4), {"kernel_shape": (3, 3)}), 576),
]


@pytest.mark.torch
@pytest.mark.parametrize(("packet", "fn", "args", "onnx", "by_hand"), CASES,
                         ids=[f"{case[0]}-{case[3][0]}-{case[4]}" for case in CASES])
def test_normalizations_cost_what_the_onnx_rules_say(
        packet: str, fn: Callable[..., object], args: tuple[torch.Tensor, ...],
        onnx: tuple[str, list, tuple, dict], by_hand: int) -> None:
    op_type, shapes, output, attributes = onnx
    assert traced_flops(fn, *args)[packet] == onnx_flops(op_type, shapes, output, **attributes)
    assert onnx_flops(op_type, shapes, output, **attributes) == by_hand


@pytest.mark.torch
def test_a_block_costs_flop_counter_mode_plus_the_onnx_normalization_rules() -> None:
    # x [4, 16] -> Linear(16, 8) -> LayerNorm(8) -> softmax: FlopCounterMode counts the
    # addmm, 2 * 4 * 16 * 8 = 1024; graphmem adds LayerNorm 32 x 7 = 224, softmax 32 x 5 = 160
    x, weight, bias, gamma = torch.randn(4, 16), torch.randn(8, 16), torch.randn(8), torch.randn(8)

    def block(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
              gamma: torch.Tensor) -> torch.Tensor:
        return torch.softmax(F.layer_norm(F.linear(x, weight, bias), (8,), gamma, gamma), -1)

    with FlopCounterMode(display=False) as counter:
        block(x, weight, bias, gamma)
    assert counter.get_total_flops() == 1024
    ours = traced_flops(block, x, weight, bias, gamma)
    assert ours["addmm"] == 1024
    normalizations = (onnx_flops("LayerNormalization", [(4, 8), (8,), (8,)], (4, 8))
                      + onnx_flops("Softmax", [(4, 8)], (4, 8)))
    assert normalizations == 224 + 160
    assert sum(ours.values()) == counter.get_total_flops() + normalizations


@pytest.mark.torch
def test_addbmm_is_priced_as_the_batched_product() -> None:
    # [2, 3, 4] @ [2, 4, 5] summed over the batch: 2 * (2 * 3 * 5 * 4) = 240, bmm's FLOPs
    batch1, batch2 = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    with FlopCounterMode(display=False) as counter:
        torch.bmm(batch1, batch2)
    flops = traced_flops(torch.addbmm, torch.randn(3, 5), batch1, batch2)["addbmm"]
    assert flops == counter.get_total_flops() == 240


# ----- the tables name real aten ops, and every op with a trait is priced --------------------
def overloads(packet: str) -> list[torch._ops.OpOverload]:
    ops = getattr(torch.ops.aten, packet)
    return [getattr(ops, name) for name in ops.overloads()]


ALL_NAMED = sorted({*CANONICAL, *PER_ELEMENT, *WINDOW_POOLS, *NO_ARITHMETIC, *SAME_CONTRACTION,
                    *SAME_CONTRACTION.values(), *INPLACE_FORMS, *(f"{p}_" for p in INPLACE_FORMS),
                    *GROUPED_CONTRACTIONS, *POINTWISE_UNTAGGED})


@pytest.mark.parametrize("packet", ALL_NAMED)
def test_every_packet_named_is_an_aten_op(packet: str) -> None:
    assert overloads(packet)


def priced(packet: str) -> bool:
    ops = overloads(packet)
    returns = ops[0]._schema.returns
    is_view = bool(returns) and returns[0].alias_info is not None \
        and not returns[0].alias_info.is_write
    return (ops[0].overloadpacket in flop_registry or packet in SAME_CONTRACTION
            or packet in GROUPED_CONTRACTIONS
            or packet in PER_ELEMENT or packet in WINDOW_POOLS or packet in NO_ARITHMETIC
            or packet in POINTWISE_UNTAGGED or is_view
            or any(torch.Tag.pointwise in op.tags for op in ops))


def composite(packet: str) -> bool:
    """Decomposed by the dispatcher before make_fx records it (linear, matmul, conv2d); the
    `out=` overloads are never traced (make_fx records functional ops)."""
    return all(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(),
                                                              "CompositeImplicitAutograd")
               for op in overloads(packet) if op._overloadname != "out")


@pytest.mark.parametrize("packet", sorted({*CANONICAL, *(f"{p}_" for p in INPLACE_FORMS)}))
def test_every_aten_op_with_traits_is_priced_where_it_can_be_traced(packet: str) -> None:
    assert composite(packet) or priced(packet)
