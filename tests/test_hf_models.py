"""Hugging Face models (random weights from a config) through the torch.fx path, checked
against a real CPU step: decoders' outputs hold a KV cache object, their logits are large."""

from __future__ import annotations

import functools

import pytest

from graphmem import analyze_torch
from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.verify.runners.torch_runner import measure_step

pytest.importorskip("transformers")

from tests.torch_models import hf

pytestmark = [pytest.mark.slow, pytest.mark.torch]


@pytest.mark.parametrize(("build", "train", "optimizer"), [
    (hf.gpt2, True, "adam"), (hf.llama, True, "sgd"), (hf.llama, False, None),
    (hf.bert, True, "adamw"),
])
def test_transformers_peak_matches_a_real_cpu_step(build, train: bool, optimizer: str) -> None:
    # The logits ([4*64, 1000] float32 = 1,024,000 bytes) stay referenced through backward in
    # both the traced and the measured step; an inference decoder returns its KV cache
    # (a DynamicCache object), whose tensors are graph outputs. Measured on this CPU: equal
    # to the byte or within 64 bytes (the profiler's scalar temporaries); tolerance 1%.
    spec = [parse_tensor_spec("4x64:int64")]
    analysis = analyze_torch(build(), spec, train=train, optimizer=optimizer or "adam")
    measured = measure_step(build(), spec, train, optimizer or "adam")
    assert int(analysis.liveness.activation_peak_bytes) == pytest.approx(
        measured.peak_bytes, rel=0.01)
    # parameters exact against sum(p.numel()) of the same model
    assert analysis.params.count == sum(p.numel() for p in build().parameters())


# ----- every op priced: MACs against FlopCounterMode ------------------------------------------
# (builder, example inputs): transformers' default attention (SDPA) throughout, so the CPU
# trace holds the CPU flash kernel and its backward (or, with dropout in training, the math
# backend's _safe_softmax), slice/select backward, the encoder-decoders' cross attention.
FLOP_MODELS = {
    "gpt2": (hf.gpt2, ("4x64:int64",)), "llama": (hf.llama, ("4x64:int64",)),
    "bert": (hf.bert_sdpa, ("4x64:int64",)), "vit": (hf.vit_sdpa, ("4x3x64x64",)),
    "t5": (hf.t5, ("4x64:int64", "4x32:int64")),
    "whisper": (hf.whisper, ("4x16x64", "4x32:int64")),
}


@functools.cache
def math_backend_macs(name: str, train: bool) -> int:
    """FlopCounterMode's MACs for the model's step with attention in the math backend (whose
    bmm's it counts; it has no formula for the CPU flash kernel)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from graphmem.frontends.torch.trace import cross_entropy_loss
    from graphmem.verify.runners.torch_runner import random_inputs

    build, texts = FLOP_MODELS[name]
    torch.manual_seed(0)
    model = build().train(train)
    inputs = random_inputs([parse_tensor_spec(text) for text in texts], "cpu")
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        if train:
            cross_entropy_loss(model(*inputs)).backward()
        else:
            with torch.no_grad():
                model(*inputs)
    return counter.get_total_flops() // 2  # FlopCounterMode: 2 FLOPs per MAC


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("name", sorted(FLOP_MODELS))
def test_every_op_is_priced_and_macs_match_flop_counter(name: str, train: bool) -> None:
    """No unsupported op, and the step's MACs equal FlopCounterMode's for the same step run
    with attention in the math backend: graphmem prices fused attention as the math backend's
    matmuls (tolerance 1%; measured: equal to the MAC on all twelve)."""
    build, texts = FLOP_MODELS[name]
    specs = [parse_tensor_spec(text) for text in texts]
    analysis = analyze_torch(build(), specs, train=train, plan=False, suggest=False)
    assert analysis.costs.unsupported_ops == {}
    assert int(analysis.costs.total_macs) == pytest.approx(math_backend_macs(name, train),
                                                           rel=0.01)


@pytest.mark.parametrize(("gpu", "amp"), [("h100-sxm", "bf16"), ("a100-80gb", None)])
@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("name", sorted(FLOP_MODELS))
def test_the_cuda_trace_prices_every_op_and_matches_flop_counter(
        name: str, train: bool, gpu: str, amp: str | None) -> None:
    """The same steps traced as CUDA runs them (graphmem/frontends/torch/cuda_kernels.py):
    flash, cuDNN and memory-efficient attention and their backwards, fused dropout, all
    priced; MACs the math backend's (measured: equal to the MAC on all 24; H100 bf16
    training picks flash for GPT-2 and BERT, cuDNN for Llama, ViT and Whisper,
    memory-efficient for T5, whose learned position bias is a mask needing a gradient)."""
    from graphmem.core.conventions import TrainingOptions
    from graphmem.devices.gpus import find_gpu
    from graphmem.frontends.torch.import_step import import_torch
    from graphmem.frontends.torch.kernel_choice import cuda_target
    from graphmem.passes.costs import compute_costs

    build, texts = FLOP_MODELS[name]
    training = TrainingOptions("adam", amp) if train else None  # type: ignore[arg-type]
    imported = import_torch(build(), [parse_tensor_spec(text) for text in texts], name,
                            training, cuda=cuda_target(find_gpu(gpu)))
    assert any(k.op == "attention" and k.kernel != "math" for k in imported.kernels)
    costs = compute_costs(imported.graph)
    assert costs.unsupported_ops == {}
    assert int(costs.total_macs) == pytest.approx(math_backend_macs(name, train), rel=0.01)
