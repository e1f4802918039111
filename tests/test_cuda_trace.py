"""The CUDA trace: a PyTorch step traced as PyTorch's CUDA backend runs it, with no GPU.

graphmem/frontends/torch/cuda_kernels.py runs scaled_dot_product_attention on the kernel
CUDA picks (graphmem/frontends/torch/sdpa_select.py, a port of sdp_utils.cpp), dropout on the
fused kernel and records cuDNN batch norm. What each kernel saves for backward is PyTorch's
own rule: the tests compare the traced graph with the autograd node the kernel's meta
function and derivatives.yaml give (`grad_fn._saved_*`).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.attention import SDPBackend, sdpa_kernel

from graphmem.core.conventions import TrainingOptions
from graphmem.core.ir import DType, Graph, Node, Role
from graphmem.devices.gpus import find_gpu
from graphmem.frontends.torch.import_step import import_torch
from graphmem.frontends.torch.kernel_choice import CudaTarget, cuda_target
from graphmem.frontends.torch.sdpa_select import Backend, SdpaCall, select_backend

pytestmark = pytest.mark.torch
aten = torch.ops.aten
H100, A100, T4, RTX3090 = (cuda_target(find_gpu(name))
                           for name in ("h100-sxm", "a100-80gb", "t4", "rtx-3090"))


class SelfAttention(nn.Module):
    """x [b, s, w] -> Q, K, V [b, h, s, w/h] -> F.scaled_dot_product_attention -> projection."""

    def __init__(self, width: int = 64, heads: int = 4, dropout: float = 0.0,
                 causal: bool = True) -> None:
        super().__init__()
        self.heads, self.dropout, self.causal = heads, dropout, causal
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training
                                           else 0.0, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, s, w))


def traced(model: nn.Module, spec: str, target: CudaTarget | None, amp: str | None = None,
           optimizer: str = "adam", train: bool = True) -> tuple[Graph, tuple]:
    training = TrainingOptions(optimizer, amp) if train else None  # type: ignore[arg-type]
    imported = import_torch(model, [spec], "test", training, cuda=target)
    return imported.graph, imported.kernels


def nodes_named(graph: Graph, packet: str) -> list[Node]:
    return [n for n in graph.nodes if n.op_type.split(".")[1] == packet]


# ----- which kernel (sdp_utils.cpp select_sdp_backend) ----------------------------------------
def call(dtype: torch.dtype = torch.bfloat16, head_dim: int = 64, mask: bool = False,
         dropout: float = 0.0, causal: bool = True, grad: bool = True) -> SdpaCall:
    with FakeTensorMode():
        q, k, v = (torch.empty(2, 8, 128, head_dim, dtype=dtype, requires_grad=grad)
                   for _ in range(3))
        attn_mask = torch.ones(2, 1, 128, 128, dtype=torch.bool) if mask else None
    return SdpaCall(q, k, v, attn_mask, dropout, causal and not mask, False)


@pytest.mark.parametrize("target, sdpa, expected", [
    # sm90: cuDNN first (cuDNN > 9.15, PyTorch >= 2.11 wheels), half types only
    (H100, call(), Backend.CUDNN),
    (H100, call(mask=True), Backend.CUDNN),  # cuDNN takes a mask, flash does not
    (H100, call(dropout=0.1), Backend.FLASH),  # cuDNN: dropout a multiple of 1/16 only
    (H100, call(dropout=0.125), Backend.CUDNN),
    (H100, call(torch.float32), Backend.EFFICIENT),  # fp32: memory-efficient only
    (H100, call(head_dim=256), Backend.FLASH),  # cuDNN's head dim limit is 128
    # sm80: flash, then memory-efficient
    (A100, call(), Backend.FLASH),
    (A100, call(mask=True), Backend.EFFICIENT),
    (A100, call(head_dim=20), Backend.FLASH),  # the composite pads 20 to 24 for flash
    (A100, call(torch.float32, head_dim=20), Backend.EFFICIENT),  # fp32: a multiple of 4
    (A100, call(torch.float32, head_dim=6), Backend.MATH),
    # sm86 trains flash with head dims up to 192 or, without dropout, above 224
    (RTX3090, call(head_dim=208), Backend.EFFICIENT),
    (RTX3090, call(head_dim=208, grad=False), Backend.FLASH),
    (RTX3090, call(head_dim=256), Backend.FLASH),
    (RTX3090, call(head_dim=256, dropout=0.1), Backend.EFFICIENT),
    # sm75: no flash; memory-efficient has no bf16 before sm80
    (T4, call(torch.float16), Backend.EFFICIENT),
    (T4, call(torch.bfloat16), Backend.MATH),
])
def test_the_backend_cuda_picks(target: CudaTarget, sdpa: SdpaCall, expected: Backend) -> None:
    assert select_backend(sdpa, target)[0] is expected


def test_cudnn_goes_first_only_where_sdp_utils_prefers_it() -> None:
    # check_prefer_cudnn_attention: major 9 or 10 with minor 0 or 3 (sm90, sm100, sm103)
    from graphmem.frontends.torch.sdpa_select import priority_order

    for major, minor, first in ((9, 0, Backend.CUDNN), (10, 3, Backend.CUDNN),
                                (10, 1, Backend.FLASH), (12, 0, Backend.FLASH),
                                (8, 0, Backend.FLASH)):
        assert priority_order(CudaTarget("gpu", major, minor))[0] is first


def test_the_users_switches_are_honoured() -> None:
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        assert select_backend(call(), A100)[0] is Backend.EFFICIENT
    backend, refused = select_backend(call(mask=True), A100)
    assert backend is Backend.EFFICIENT and refused == "flash: an attention mask"


# ----- what each kernel saves: PyTorch's rule, and the traced graph ---------------------------
KERNEL_OF = {Backend.FLASH: "_scaled_dot_product_flash_attention",
             Backend.EFFICIENT: "_scaled_dot_product_efficient_attention",
             Backend.CUDNN: "_scaled_dot_product_cudnn_attention"}
CASES = [(A100, "bf16", 0.1, Backend.FLASH), (H100, "bf16", 0.0, Backend.CUDNN),
         (H100, None, 0.1, Backend.EFFICIENT)]


def autograd_saved(backend: Backend, dtype: torch.dtype, dropout: float) -> set[tuple]:
    """(shape, dtype) of what the kernel's autograd node saves besides Q, K, V: PyTorch's
    derivatives.yaml on the kernel's meta outputs, for Q, K, V [2, 4, 16, 16]."""
    with FakeTensorMode():
        q, k, v = (torch.empty(2, 4, 16, 16, dtype=dtype, requires_grad=True) for _ in range(3))
        args = {Backend.FLASH: (q, k, v, dropout, True),
                Backend.EFFICIENT: (q, k, v, None, True, dropout, True),
                Backend.CUDNN: (q, k, v, None, True, dropout, True, False)}[backend]
        out = getattr(aten, KERNEL_OF[backend])(*args)[0]
        node = out.grad_fn
        saved = [getattr(node, name) for name in dir(node) if name.startswith("_saved_")]
        return {(tuple(t.shape), t.dtype) for t in saved
                if isinstance(t, torch.Tensor) and not any(t is x for x in (q, k, v))}


@pytest.mark.parametrize("target, amp, dropout, backend", CASES)
def test_the_attention_kernel_saves_what_pytorch_says(target: CudaTarget, amp: str | None,
                                                      dropout: float, backend: Backend) -> None:
    # x [2, 16, 64], 4 heads: Q, K, V [2, 4, 16, 16]; the scores would be [2, 4, 16, 16] too,
    # so shapes alone cannot tell them: the saved outputs of the kernel node are compared
    graph, kernels = traced(SelfAttention(dropout=dropout), "2x16x64", target, amp)
    (node,) = nodes_named(graph, KERNEL_OF[backend])
    saved = {(tuple(int(d) for d in v.shape), v.dtype) for v in node.outputs
             if v.role is Role.SAVED_ACTIVATION}
    dtype = torch.bfloat16 if amp else torch.float32
    expected = autograd_saved(backend, dtype, dropout)
    to_ir = {torch.bfloat16: DType.BFLOAT16, torch.float32: DType.FLOAT32,
             torch.int64: DType.INT64, torch.uint64: DType.UINT64}
    assert expected and saved == {(shape, to_ir[t]) for shape, t in expected}
    assert all(v.dtype.has_known_size for n in graph.nodes for v in n.outputs)
    assert str(kernels[0]).startswith(f"attention: {backend} ({target.sm}")


def test_math_on_cuda_saves_a_bool_dropout_mask_not_float_noise() -> None:
    # T4 with bf16: no fused kernel; the math backend's dropout is CUDA's fused kernel
    graph, kernels = traced(SelfAttention(dropout=0.1), "2x16x64", T4, "bf16")
    assert not nodes_named(graph, "bernoulli_")
    (dropout,) = nodes_named(graph, "native_dropout")
    assert dropout.outputs[1].dtype is DType.BOOL and dropout.outputs[1].role is (
        Role.SAVED_ACTIVATION)
    assert str(kernels[0]).startswith("attention: math (sm75, bf16")


def test_dropout_is_the_fused_kernel_with_a_bool_mask() -> None:
    model = nn.Sequential(nn.Linear(32, 64), nn.Dropout(0.1), nn.Linear(64, 8))
    cpu, _ = traced(model, "4x32", None)
    cuda, kernels = traced(model, "4x32", A100)
    assert nodes_named(cpu, "bernoulli_") and not nodes_named(cpu, "native_dropout")
    (dropout,) = nodes_named(cuda, "native_dropout")
    assert [v.dtype for v in dropout.outputs] == [DType.FLOAT32, DType.BOOL]
    assert "dropout: fused native_dropout (saves a bool mask)" in map(str, kernels)


def autograd_saved_tensors(node: object, inputs: tuple[torch.Tensor, ...]) -> set[tuple]:
    """(shape, dtype) of the tensors an autograd node saves, other than `inputs`, and not
    empty (a 0-element tensor holds no memory)."""
    saved = [getattr(node, name) for name in dir(node) if name.startswith("_saved_")]
    return {(tuple(t.shape), t.dtype) for t in saved if isinstance(t, torch.Tensor)
            and t.numel() and not any(t is x for x in inputs)}


def saved_outputs(node: Node) -> set[tuple]:
    """The saved outputs of a kernel besides its result (which the next op may save)."""
    to_torch = {DType.FLOAT32: torch.float32, DType.BOOL: torch.bool}
    return {(tuple(int(d) for d in v.shape), to_torch[v.dtype]) for v in node.outputs[1:]
            if v.role is Role.SAVED_ACTIVATION}


def test_the_dropout_mask_is_what_native_dropouts_autograd_node_saves() -> None:
    # derivatives.yaml: native_dropout saves result1, the mask; its meta gives it bool
    with FakeTensorMode():
        x = torch.empty(4, 64, requires_grad=True)
        out = aten.native_dropout(x, 0.1, True)[0]
        expected = autograd_saved_tensors(out.grad_fn, (x,))
    model = nn.Sequential(nn.Linear(32, 64), nn.Dropout(0.1), nn.Linear(64, 8))
    graph, _ = traced(model, "4x32", A100)
    (dropout,) = nodes_named(graph, "native_dropout")
    assert expected == {((4, 64), torch.bool)} == saved_outputs(dropout)


def test_cudnn_batch_norm_saves_what_the_traced_native_kernel_saves() -> None:
    # cudnn_batch_norm's meta and derivatives.yaml: the input, weight and running stats (held
    # anyway) and result1, result2, fp32 [C] mean and inverse std; result3, cuDNN's reserve,
    # is 0 elements in the meta function (no fused activation: cuDNN asks for none)
    with FakeTensorMode():
        x = torch.empty(2, 8, 14, 14, requires_grad=True)
        weight, bias = torch.ones(8, requires_grad=True), torch.zeros(8, requires_grad=True)
        mean, var = torch.zeros(8), torch.ones(8)
        out = aten.cudnn_batch_norm(x, weight, bias, mean, var, True, 0.1, 1e-5)
        assert tuple(out[3].shape) == (0,) and out[3].dtype == torch.uint8
        expected = autograd_saved_tensors(out[0].grad_fn, (x, weight, bias, mean, var))
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
    graph, kernels = traced(model, "2x3x16x16", A100)
    (norm,) = nodes_named(graph, "native_batch_norm")
    assert expected == {((8,), torch.float32)} == saved_outputs(norm)
    (backward,) = nodes_named(graph, "native_batch_norm_backward")
    assert norm.inputs[0] in backward.inputs  # the input is saved too, as cuDNN's node does
    assert any(str(k).startswith("batch norm: cudnn (training") for k in kernels)


# ----- a Hugging Face GPT-2 training step -----------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("amp", ["bf16", None])
def test_gpt2_on_cuda_holds_no_probabilities_and_no_float_dropout_masks(amp: str | None) -> None:
    """GPT-2 (attention and residual dropout 0.1) on an H100: with bf16 flash attention runs,
    in fp32 memory-efficient; neither saves the [b, h, s, s] probabilities, and every dropout
    keeps a bool mask. The CPU trace of the same step keeps both (the CPU flash kernel
    refuses dropout: math backend, float noise)."""
    pytest.importorskip("transformers")
    from tests.torch_models import hf

    probabilities = (4, 4, 64, 64)  # batch 4, 4 heads, 64 x 64 positions

    def held(graph: Graph) -> tuple[int, int]:
        probs = sum(1 for v in graph.values.values()
                    if tuple(int(d) for d in v.shape) == probabilities
                    and v.role is Role.SAVED_ACTIVATION)
        noise = len(nodes_named(graph, "bernoulli_"))
        return probs, noise

    cpu, _ = traced(hf.gpt2(), "4x64:int64", None, amp)
    cuda, kernels = traced(hf.gpt2(), "4x64:int64", H100, amp)
    assert held(cpu)[0] > 0 and held(cpu)[1] > 0
    assert held(cuda) == (0, 0)
    kernel = "flash" if amp else "memory-efficient"
    assert any(str(k).startswith(f"attention: {kernel} (sm90") for k in kernels)
    masks = [n.outputs[1] for n in nodes_named(cuda, "native_dropout")]
    assert masks and all(m.dtype is DType.BOOL for m in masks)


# ----- batch norm, the optimizer, the loss scaler ---------------------------------------------
def test_batch_norm_on_cudnn_is_recorded_and_saves_what_the_native_kernel_saves() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
    cpu, _ = traced(model, "2x3x16x16", None)
    cuda, kernels = traced(model, "2x3x16x16", A100)
    saved = [(n.op_type, [(v.dtype, tuple(int(d) for d in v.shape)) for v in n.outputs])
             for n in nodes_named(cpu, "native_batch_norm")]
    assert saved == [(n.op_type, [(v.dtype, tuple(int(d) for d in v.shape))
                                  for v in n.outputs])
                     for n in nodes_named(cuda, "native_batch_norm")]
    assert any(str(k).startswith("batch norm: cudnn (training") for k in kernels)


def test_fp16_on_cuda_trains_through_a_grad_scaler() -> None:
    graph, kernels = traced(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)),
                            "8x16", A100, "fp16", optimizer="sgd")
    state = {v.name: v for v in graph.values.values() if v.role is Role.OPTIMIZER_STATE}
    assert state["grad_scaler.scale"].dtype is DType.FLOAT32
    assert state["grad_scaler.growth_tracker"].dtype is DType.INT32
    assert nodes_named(graph, "_amp_foreach_non_finite_check_and_unscale_")
    assert nodes_named(graph, "_amp_update_scale_")
    assert "loss scaling: GradScaler" in {f"{k.op}: {k.kernel}" for k in kernels}
    bf16, _ = traced(nn.Linear(16, 4), "8x16", A100, "bf16", optimizer="sgd")
    assert not nodes_named(bf16, "_amp_update_scale_")  # bf16 needs no loss scaling


def test_a_cpu_trace_assumes_no_cuda_kernel() -> None:
    graph, kernels = traced(SelfAttention(dropout=0.1), "2x16x64", None)
    assert kernels == ()
    assert nodes_named(graph, "_safe_softmax")  # the CPU's math fallback for dropout


def test_the_efficient_kernels_mask_is_aligned_to_16() -> None:
    # a [b, 1, s, l] additive mask with l = 20: padded to [b, h, s, 32] before the kernel
    class Masked(SelfAttention):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, w = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, 4, w // 4).permute(2, 0, 3, 1, 4)
            mask = torch.zeros(b, 1, s, s, dtype=x.dtype)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum((1, 3))

    graph, _ = traced(Masked(), "2x20x64", A100, train=False)
    (pad,) = nodes_named(graph, "constant_pad_nd")
    assert tuple(int(d) for d in pad.outputs[0].shape) == (2, 4, 20, 32)


# ----- the pipeline: --gpu NAME / gpu= traces for that GPU ------------------------------------
def test_the_json_model_section_lists_the_kernels_assumed() -> None:
    import dataclasses

    from graphmem import analyze_torch
    from graphmem.frontends.torch.kernel_choice import KernelChoice

    cpu = analyze_torch(nn.Linear(4, 2), ["2x4"], plan=False, suggest=False)
    assert cpu.model.kernels == () and cpu.to_dict()["model"]["kernels"] == []
    flash = KernelChoice("attention", "flash", "sm90, bf16, head dim 64", count=12)
    cuda = dataclasses.replace(cpu, model=dataclasses.replace(cpu.model, kernels=(flash,)))
    assert cuda.to_dict()["model"]["kernels"] == [
        {"op": "attention", "kernel": "flash", "detail": "sm90, bf16, head dim 64", "count": 12,
         "text": "attention: flash (sm90, bf16, head dim 64, 12 calls)"}]


def test_a_request_naming_a_cuda_gpu_traces_its_kernels_and_reports_them() -> None:
    from graphmem import analyze_torch

    result = analyze_torch(SelfAttention(dropout=0.1), ["2x16x64"], train=True,
                           gpu="a100-80gb", plan=False, suggest=False)
    texts = [str(k) for k in result.model.kernels]
    assert any(text.startswith("attention: memory-efficient (sm80, fp32") for text in texts)
    assert [k["text"] for k in result.to_dict()["model"]["kernels"]] == texts
    assert not any(n.op_type.startswith("aten.bernoulli_") for n in result.graph.nodes)
    cpu = analyze_torch(SelfAttention(dropout=0.1), ["2x16x64"], train=True, plan=False,
                        suggest=False)
    assert cpu.model.kernels == ()


@pytest.mark.slow
def test_a_checkpointed_layer_recomputes_with_the_same_cuda_kernels() -> None:
    """Activation checkpointing under the CUDA trace: the recomputation in backward runs the
    fused dropout again (a bool mask, as in the forward). Before, autograd's engine dropped the
    kernel choices in backward and torch.utils.checkpoint refused the float mask it then made
    ("Recomputed values ... have different metadata"), which broke --suggest with --gpu."""
    pytest.importorskip("transformers")
    from graphmem import analyze_torch
    from tests.torch_models import hf

    plain = analyze_torch(hf.gpt2(), ["2x32:int64"], train=True, gpu="h100-sxm", plan=False)
    wrapped = analyze_torch(hf.gpt2(), ["2x32:int64"], train=True, gpu="h100-sxm", plan=False,
                            checkpoints=["transformer.h.0"])
    dropouts = nodes_named(wrapped.graph, "native_dropout")
    # the checkpointed layer's dropouts run twice: once in forward, once recomputed
    assert len(dropouts) > len(nodes_named(plain.graph, "native_dropout"))
    assert all(n.outputs[1].dtype is DType.BOOL for n in dropouts)
    assert not nodes_named(wrapped.graph, "bernoulli_")
