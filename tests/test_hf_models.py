"""Hugging Face models (random weights from a config) through the torch.fx path, checked
against a real CPU step: decoders' outputs hold a KV cache object, their logits are large."""

from __future__ import annotations

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
