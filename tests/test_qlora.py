"""QLoRA: the base's Linear layers in 4-bit NF4 as bitsandbytes stores them, LoRA on top.

NF4 bytes are worked by hand from bitsandbytes' layout (graphmem/frontends/torch/nf4.py);
the trace must hold exactly those bytes, and the dequantized weight only while a matmul
needs it, in forward and again in backward.
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip("transformers")

import torch
from torch import nn

from graphmem import analyze
from graphmem.core.conventions import TrainingOptions
from graphmem.core.ir import DType, Role
from graphmem.frontends.torch.finetune import (
    FinetuneOptions,
    LoraOptions,
    QloraOptions,
    parse_qlora_spec,
)
from graphmem.frontends.torch.hf_config import build_hf_model
from graphmem.frontends.torch.nf4 import nf4_bytes
from graphmem.frontends.torch.nf4_linear import Nf4Linear
from graphmem.frontends.torch.peft import fine_tuned
from graphmem.pipeline.request import Request
from tests.helpers.cli import Run, assert_one_error_line
from tests.helpers.llm_configs import LLAMA3_8B, TINY_LLAMA

pytestmark = pytest.mark.torch

QLORA = FinetuneOptions(lora=LoraOptions(targets=("0",)), qlora=QloraOptions())


def test_nf4_bytes_by_hand() -> None:
    # A 4,096 x 4,096 weight, n = 16,777,216 elements, blocksize 64, double quantization:
    #   packed codes, 2 per byte:       16,777,216 / 2        = 8,388,608
    #   absmax, one uint8 per block:    16,777,216 / 64       =   262,144
    #   nested absmax, fp32 per 256:    262,144 / 256 x 4     =     4,096
    #   nested code table, 256 x fp32                          =     1,024
    #   offset, one fp32                                       =         4
    #   NF4 code table, 16 x fp32                              =        64
    #   total                                                  = 8,655,940
    layout = nf4_bytes(4096 * 4096)
    assert (layout.packed, layout.absmax, layout.nested_absmax, layout.nested_code,
            layout.offset, layout.code) == (8_388_608, 262_144, 4_096, 1_024, 4, 64)
    assert layout.total == 8_655_940
    # without double quantization the absmax stay fp32: 262,144 x 4 = 1,048,576, and no
    # nested constants: 8,388,608 + 1,048,576 + 64 = 9,437,248
    assert nf4_bytes(4096 * 4096, double_quant=False).total == 9_437_248
    # 15 elements: 8 bytes of codes (the last holds one), 1 block, 1 nested block:
    # 8 + 1 + 4 + 1,024 + 4 + 64 = 1,105
    assert nf4_bytes(15).total == 1_105


def test_the_4bit_layer_holds_exactly_those_bytes() -> None:
    layer = Nf4Linear(4096, 14336, None, QloraOptions())
    held = sum(t.numel() * t.element_size() for t in (*layer.parameters(), *layer.buffers()))
    assert held == nf4_bytes(4096 * 14336).total
    assert layer.weight.dtype == torch.uint8 and not layer.weight.requires_grad
    # the dequantized weight of one matmul: 14,336 x 4,096 bf16 = 117,440,512 bytes
    assert layer.dequantized_bytes == 117_440_512


def test_what_transformers_quantizes_in_llama3_8b() -> None:
    # Every Linear of the 32 layers; lm_head stays bf16 (get_keys_to_not_convert).
    # Per layer: q, o 4,096^2; k, v 4,096 x 1,024; gate, up, down 4,096 x 14,336
    # = 218,103,808 weights; 32 layers: 6,979,321,856.
    shapes = [(4096, 4096)] * 2 + [(4096, 1024)] * 2 + [(4096, 14336)] * 3
    options = FinetuneOptions(lora=LoraOptions(), qlora=QloraOptions())
    with fine_tuned(build_hf_model(LLAMA3_8B).module, options, "adam") as report:
        assert report is not None and report.nf4 is not None
        nf4 = report.nf4
        assert (nf4.modules, nf4.skipped) == (224, ("lm_head",))
        assert nf4.bytes.weights == 6_979_321_856 == report.params.quantized
        assert nf4.bytes.packed == 6_979_321_856 // 2
        assert nf4.bytes.total == sum(
            nf4_bytes(a * b).total for a, b in shapes) * 32
        # the rest stays bf16: embed and lm_head 2 x 128,256 x 4,096 + 65 norms of 4,096
        assert report.params.frozen_bytes == nf4.bytes.total + 2 * (
            2 * 128_256 * 4_096 + 65 * 4_096)
        # peft's defaults for llama: r=8 on q_proj (4,096 -> 4,096) and v_proj
        # (4,096 -> 1,024): 32 x 8 x (8,192 + 5,120) = 3,407,872 trainable, fp32
        assert report.params.trainable == 3_407_872
        assert report.params.total == 8_030_261_248 + 3_407_872
        # the largest dequantized weight: 4,096 x 14,336 in bf16
        assert nf4.largest_dequantized_bytes == 117_440_512


def test_upcast_is_peft_prepare_model_for_kbit_training() -> None:
    # the non-4-bit weights (embed, lm_head, norms of TINY_LLAMA) become fp32: their bytes
    # double, the tied or untied parameters each once
    plain = FinetuneOptions(lora=LoraOptions(), qlora=QloraOptions())
    upcast = FinetuneOptions(lora=LoraOptions(), qlora=QloraOptions(upcast_frozen=True))
    module = build_hf_model(TINY_LLAMA).module
    with fine_tuned(module, plain, None) as low:
        pass
    with fine_tuned(module, upcast, None) as high:
        assert module.lm_head.weight.dtype == torch.float32
    assert module.lm_head.weight.dtype == torch.bfloat16  # restored
    assert low is not None and high is not None and low.nf4 is not None
    kept = low.params.frozen_bytes - low.nf4.bytes.total
    assert high.params.frozen_bytes - low.nf4.bytes.total == 2 * kept


def _dequantized(result: object, shape: tuple[int, int]) -> list[object]:
    """The fresh bf16 tensors of a weight's size (the codes times the table, [n / 2, 2],
    viewed as `shape` by the matmul)."""
    graph = result.graph  # type: ignore[attr-defined]
    numel = shape[0] * shape[1]
    return [value for node in graph.nodes for value in node.outputs
            if value.alias_of is None and value.dtype is DType.BFLOAT16
            and math.prod(int(d) for d in value.shape) == numel]


def test_inference_dequantizes_the_weight_for_its_matmul() -> None:
    # One 256 -> 512 Linear in NF4: the trace holds its 65,536 packed bytes and constants,
    # and makes the bf16 weight [512, 256] (262,144 bytes) once, for the matmul only.
    model = nn.Sequential(nn.Linear(256, 512, bias=False))
    result = analyze(Request(model, ("8x256:bfloat16",), finetune=QLORA, plan=False))
    weights = _dequantized(result, (512, 256))
    assert len(weights) == 1
    resident = result.breakdown["parameters"] + result.breakdown.get("buffers", 0)
    # adapters r=8: 8 x 256 + 512 x 8 fp32 = 6,144 x 4 bytes
    assert resident == nf4_bytes(256 * 512).total + 6_144 * 4
    assert int(result.liveness.peak_bytes) >= resident + 262_144


@pytest.mark.slow
def test_training_dequantizes_it_again_in_backward_and_trains_the_adapters() -> None:
    # Two 4-bit layers with adapters: the second's backward needs the gradient of its input
    # (the first layer's adapters train), so it dequantizes its weight again; the first
    # layer's input is the model's, which needs none: no second dequantization there.
    model = nn.Sequential(nn.Linear(256, 512, bias=False), nn.Linear(512, 256, bias=False))
    options = FinetuneOptions(lora=LoraOptions(targets=("0", "1")), qlora=QloraOptions())
    result = analyze(Request(model, ("8x256:bfloat16",), training=TrainingOptions(),
                             finetune=options, plan=False))
    weights = _dequantized(result, (512, 256))
    assert sorted((w.producer.phase.value, w.producer.module_path)  # type: ignore[attr-defined]
                  for w in weights) == [("backward", "1.base_layer"), ("forward", "0.base_layer"),
                                        ("forward", "1.base_layer")]
    # Adam state for the adapters only: 2 layers x 8 x (256 + 512) = 12,288 fp32 parameters,
    # 2 states each: 98,304 bytes
    assert result.breakdown.get("optimizer_state", 0) == 2 * 12_288 * 4
    gradients = [v for v in result.graph.values.values() if v.role is Role.GRADIENT]
    assert len(gradients) == 4  # lora_A and lora_B of each layer: the 4-bit base gets none


@pytest.mark.slow
def test_a_qlora_llama_step_traces() -> None:
    result = analyze(Request(TINY_LLAMA, dims={"seq": 64}, training=TrainingOptions(),
                             finetune=FinetuneOptions(lora=LoraOptions(), qlora=QloraOptions(),
                                                      gradient_checkpointing=True),
                             plan=False))
    assert any(note.startswith("QLoRA: 14 Linear layers in NF4") for note in
               result.model.notes)
    assert not result.costs.unsupported_ops or all(
        "flash_attention" in op or "slice_backward" in op
        for op in result.costs.unsupported_ops)


@pytest.mark.parametrize(("text", "expected"), [
    ("", QloraOptions()),
    ("compute=fp16,blocksize=128,double-quant=no,upcast=yes",
     QloraOptions("float16", 128, False, True)),
])
def test_the_qlora_spec(text: str, expected: QloraOptions) -> None:
    assert parse_qlora_spec(text) == expected


@pytest.mark.parametrize(("args", "fragment"), [
    (["--qlora", "compute=fp8"], "--qlora compute=fp8: choose bf16, fp16 or fp32"),
    (["--qlora", "blocksize=48"], "--qlora blocksize=48: bitsandbytes takes"),
    (["--qlora", "upcast=maybe"], "--qlora upcast=maybe: give yes or no"),
])
def test_bad_qlora_flags_are_one_error_line(run: Run, args: list[str], fragment: str) -> None:
    code, _, err = run("analyze", "tests/torch_models/small.py:mlp", "--no-html", *args)
    assert_one_error_line(code, err, fragment)


def test_qlora_implies_lora_on_both_front_doors() -> None:
    from graphmem.api import build_request
    from graphmem.cli.analyze import request_from_args
    from graphmem.cli.main import build_parser

    args = build_parser().parse_args(["analyze", "m.py:fn", "--qlora"])
    expected = FinetuneOptions(LoraOptions(), QloraOptions(), False)
    assert request_from_args(args).finetune == expected
    assert build_request("m.py:fn", qlora=True).finetune == expected
