"""torch.nn's fused inference kernels traced where eager runs them (graphmem/frontends/torch/
fast_paths.py, module_hooks.py), priced as their Python path's matmuls
(graphmem/ops/attention.py) and their scratch on the CPU as the kernels allocate it
(graphmem/runtime_models/torch_cpu_attention.py), checked against the kernels' own
allocations measured with torch.profiler on shapes the rules were not read from."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graphmem import analyze_torch
from graphmem.core.ir import DType, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.runtime_models.torch_cpu import scratch_bytes
from graphmem.verify.runners import torch_runner

pytestmark = [pytest.mark.torch]

ATTENTION = "aten._native_multi_head_attention.default"
ENCODER_LAYER = "aten._transformer_encoder_layer_fwd.default"


class SelfAttention(nn.Module):
    """nn.MultiheadAttention on x, a key padding mask (the last 3 positions) and/or a causal
    mask, its weights returned where asked for."""

    def __init__(self, width: int = 32, heads: int = 4, need_weights: bool = True,
                 average: bool = True, padding: bool = True, causal: bool = False,
                 batch_first: bool = True) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(width, heads, batch_first=batch_first)
        self.head = nn.Linear(width, 10)
        self.options = (need_weights, average, padding, causal)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        need_weights, average, padding, causal = self.options
        batch, length = (x.shape[0], x.shape[1]) if self.attention.batch_first else (
            x.shape[1], x.shape[0])
        pad = torch.zeros(batch, length, dtype=torch.bool, device=x.device)
        pad[:, -3:] = True
        mask = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        out, weights = self.attention(x, x, x, key_padding_mask=pad if padding else None,
                                      attn_mask=mask if causal else None,
                                      need_weights=need_weights, average_attn_weights=average)
        y = self.head(x + out)
        return y if weights is None else y + weights.sum()


class EncoderLayer(nn.Module):
    """nn.TransformerEncoderLayer called directly (as BetterTransformer-style code does), a
    key padding mask or a causal one, a head."""

    def __init__(self, ffn: int = 64, norm_first: bool = False, activation: str = "relu",
                 causal: bool = False, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(width, heads, ffn, dropout=0.0,
                                                batch_first=True, norm_first=norm_first,
                                                activation=activation)
        self.head = nn.Linear(width, 10)
        self.causal = causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        if self.causal:
            mask = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
            return self.head(self.layer(x, src_mask=mask))
        pad = torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device)
        pad[:, -3:] = True
        return self.head(self.layer(x, src_key_padding_mask=pad))


def traced(model: nn.Module, shape: str = "2x16x32", train: bool = False) -> list[Node]:
    analysis = analyze_torch(model, [parse_tensor_spec(shape)], train=train, plan=False,
                             suggest=False, runtime="torch-cpu")
    return list(analysis.graph.nodes)


def op_types(model: nn.Module, shape: str = "2x16x32", train: bool = False) -> list[str]:
    return [node.op_type for node in traced(model, shape, train)]


def test_eval_attention_is_the_fused_kernel_eager_runs() -> None:
    types = op_types(SelfAttention().eval())
    assert types.count(ATTENTION) == 1
    assert "aten.bmm.default" not in types  # no Python-path scores


@pytest.mark.parametrize("model", [
    SelfAttention(heads=1),  # "self.num_heads is not even"
    SelfAttention(batch_first=False),  # "batch_first was not True"
], ids=["odd-heads", "not-batch-first"])
def test_attention_the_fast_path_refuses_stays_the_python_path(model: nn.Module) -> None:
    shape = "2x16x32" if model.attention.batch_first else "16x2x32"
    types = op_types(model.eval(), shape)
    assert ATTENTION not in types and "aten.bmm.default" in types


def test_training_keeps_the_python_path() -> None:
    # a training step: the module trains ("training is enabled"), and the weights ask for
    # gradients with grad on
    types = op_types(SelfAttention().train(), train=True)
    assert ATTENTION not in types and "aten.bmm.default" in types


def test_the_encoder_layer_is_its_fused_kernel_and_modules_keep_their_labels() -> None:
    # graphmem's module labels are global hooks: the layer's own hook dicts stay empty, so
    # its "forward pre-/hooks are attached" check passes as in eager
    nodes = traced(EncoderLayer().eval())
    assert [n.op_type for n in nodes].count(ENCODER_LAYER) == 1
    fused = next(n for n in nodes if n.op_type == ENCODER_LAYER)
    assert fused.module_path == "layer"
    assert {n.module_path for n in nodes if n.op_type == "aten.addmm.default"} == {"head"}


def test_the_fused_attentions_macs() -> None:
    # b 2, s 16, e 32, 4 heads: in-projection 32 tokens * 32 * 96 = 98,304; scores and
    # context 16 keys * (32*32 + 32*32) = 32,768; out-projection 32 * 32 * 32 = 32,768:
    # 163,840 MACs
    fused = next(n for n in traced(SelfAttention().eval()) if n.op_type == ATTENTION)
    assert fused.imported_cost is not None and fused.imported_cost.macs == 163_840


def test_the_fused_encoder_layers_macs() -> None:
    # the attention's 163,840 and the feed-forward block 32 tokens * 32 * 64 * 2 = 131,072:
    # 294,912 MACs
    fused = next(n for n in traced(EncoderLayer().eval()) if n.op_type == ENCODER_LAYER)
    assert fused.imported_cost is not None and fused.imported_cost.macs == 294_912


@pytest.mark.parametrize("model", [SelfAttention(), EncoderLayer(ffn=128, norm_first=True)],
                         ids=["attention", "encoder-layer"])
def test_fused_macs_are_flop_counter_modes_on_the_python_path(model: nn.Module) -> None:
    # FlopCounterMode has no formula for the fused kernels: it counts the same step with the
    # fast path off, the Python path's matmuls (its attention on SDPA's math backend, whose
    # matmuls FlopCounterMode counts: the encoder layer asks for no weights, so SDPA)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    model.eval()
    analysis = analyze_torch(model, [parse_tensor_spec("2x16x32")], plan=False, suggest=False)
    fast_path = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad(), sdpa_kernel(
                SDPBackend.MATH):
            model(torch.randn(2, 16, 32))
    finally:
        torch.backends.mha.set_fastpath_enabled(fast_path)
    assert int(analysis.costs.total_macs) == counter.get_total_flops() // 2


def _attention_node(b: int, s: int, e: int, heads: int, mask_type: int, need_weights: bool,
                    average: bool) -> Node:
    def value(name: str, *shape: int) -> Value:
        return Value(name, DType.FLOAT32, tuple(SymInt.const(n) for n in shape), Role.ACTIVATION)

    x = value("x", b, s, e)
    weights = (value("w", b, s, s) if average else value("w", b, heads, s, s)) if (
        need_weights) else value("w", 0)
    return Node("attention", ATTENTION, [x, x, x], [value("y", b, s, e), weights],
                attributes={"num_head": heads, "need_weights": int(need_weights),
                            "average_attn_weights": int(average), "mask_type": mask_type},
                domain="aten")


def test_the_attention_rules_working() -> None:
    # b 2, s 16, e 32, 4 heads, a key padding mask, the averaged weights: QKV = Q' =
    # 2*16*96*4 = 12,288; S = P = 8*16*16*4 = 8,192; the mask 32; the running peak
    # Q' + S + 32 + P = 12,288 + 8,192 + 32 + 8,192 = 28,704 over the 4,096 + 2,048 returned:
    # 22,560 B; without the weights the same peak over 4,096: 24,608
    assert scratch_bytes(_attention_node(2, 16, 32, 4, 1, True, True), {}) == 22_560
    assert scratch_bytes(_attention_node(2, 16, 32, 4, 1, False, False), {}) == 24_608


def _measured_scratch(model: nn.Module, shape: tuple[int, ...], kernel: str) -> int:
    x = torch.randn(*shape)
    with torch.no_grad():
        model(x)  # warm up
        with torch_runner._quiet_stderr(), torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as profile:
            model(x)
    found = [k for k in torch_runner.kernel_scratch(profile) if k.kernel == f"aten::{kernel}"]
    assert len(found) == 1, [k.kernel for k in torch_runner.kernel_scratch(profile)]
    return found[0].scratch_bytes


# shapes and options the rules were not read from: wider, longer, more heads, a feed-forward
# block wider than the attention's buffers (its peak moves there), causal masks
HELD_OUT = [
    pytest.param(lambda: SelfAttention(64, 8), id="attention-8-heads"),
    pytest.param(lambda: SelfAttention(64, 2, need_weights=False, padding=False, causal=True),
                 id="attention-causal-no-weights"),
    pytest.param(lambda: SelfAttention(48, 6, average=False, padding=True, causal=True),
                 id="attention-both-masks-per-head-weights"),
    pytest.param(lambda: EncoderLayer(ffn=1024, width=64, heads=8), id="layer-wide-ffn"),
    pytest.param(lambda: EncoderLayer(ffn=512, norm_first=True, activation="gelu",
                                      causal=True, width=64, heads=2),
                 id="layer-pre-norm-gelu-causal"),
]


@pytest.mark.parametrize("build", HELD_OUT)
def test_fused_kernels_scratch_is_the_measured_one(build: object) -> None:
    torch.manual_seed(0)
    model = build().eval()  # type: ignore[operator]
    width = model.head.in_features
    shape = (3, 20, width)
    nodes = traced(model, "x".join(map(str, shape)))
    fused = next(n for n in nodes if n.op_type in (ATTENTION, ENCODER_LAYER))
    kernel = fused.op_type.split(".")[1]
    assert scratch_bytes(fused, {}) == _measured_scratch(model, shape, kernel)


class PaddedEncoder(nn.Module):
    """nn.TransformerEncoder of 2 layers in eval with a key padding mask."""

    def __init__(self, nested: bool) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=nested)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device)
        pad[:, -3:] = True
        return self.encoder(x, src_key_padding_mask=pad)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_the_nested_tensor_path_is_refused_with_its_fix() -> None:
    # eager packs the tokens the mask keeps (a size read from the mask's values)
    from graphmem.errors import GraphmemError

    with pytest.raises(GraphmemError, match="enable_nested_tensor=False"):
        traced(PaddedEncoder(nested=True).eval())


def test_without_the_nested_path_each_layer_is_its_fused_kernel_with_the_mask() -> None:
    fused = [n for n in traced(PaddedEncoder(nested=False).eval()) if n.op_type == ENCODER_LAYER]
    assert [n.attr_int("mask_type", -1) for n in fused] == [1, 1]  # the key padding mask
