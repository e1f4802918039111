"""--weights int8|int4: Linear weights stored as torchao's weight-only quantization stores them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphmem.errors import GraphmemError
from graphmem.frontends.torch.weight_layout import (
    WeightQuantOptions,
    int4_bytes,
    int4_tiled_bytes,
    int8_bytes,
    parse_weights,
)
from tests.helpers.cli import assert_one_error_line, run_cli


def test_parse_weights() -> None:
    assert parse_weights("int8") == WeightQuantOptions("int8")
    assert parse_weights("int4:blocks.*.mlp, lm_head") == WeightQuantOptions(
        "int4", ("blocks.*.mlp", "lm_head"))
    assert parse_weights("int4-tiled").scheme == "int4-tiled"
    with pytest.raises(GraphmemError, match="unknown scheme; use int8, int4 or int4-tiled"):
        parse_weights("nf3")
    with pytest.raises(GraphmemError, match="no module after ':'"):
        parse_weights("int4:")


def test_a_pattern_takes_the_module_and_everything_under_it() -> None:
    options = parse_weights("int4:blocks.*.mlp")
    assert options.applies_to("blocks.0.mlp.2") and options.applies_to("blocks.1.mlp")
    assert not options.applies_to("blocks.0.qkv")


def test_int8_layout() -> None:
    # Llama-3-8B q_proj: qdata 4096 * 4096 = 16,777,216 bytes; scale [4096, 1] fp32 and
    # zero_point [4096, 1] int8: 4096 * (4 + 1) = 20,480 bytes in 8,192 elements
    layout = int8_bytes(4096, 4096)
    assert (layout.weights, layout.stored_bytes) == (16_777_216, 16_777_216)
    assert (layout.constant_count, layout.constant_bytes) == (8192, 20_480)


def test_int4_layout() -> None:
    # 4096 x 4096, group 128, bf16: qdata [4096, 2048] = 8,388,608 bytes; scale and zero_point
    # [4096 / 128, 4096] each = 2 * 131,072 = 262,144 elements, 524,288 bytes
    layout = int4_bytes(4096, 4096, 128, 2)
    assert (layout.stored_bytes, layout.constant_count, layout.constant_bytes) == (
        8_388_608, 262_144, 524_288)
    # no padding: [2304, 768] is 2304 * 768 / 2 = 884,736 bytes
    assert int4_bytes(2304, 768, 128, 2).stored_bytes == 884_736


def test_int4_tiled_layout_pads_as_tinygemm_does() -> None:
    # 4096 x 4096: 8,388,608 bytes; scale_and_zero bf16 [32, 4096, 2] = 524,288 bytes
    layout = int4_tiled_bytes(4096, 4096, 128)
    assert (layout.stored_bytes, layout.constant_bytes) == (8_388_608, 524_288)
    # [2304, 768]: in padded to 1024 -> 2304 * 1024 / 2 = 1,179,648 bytes
    assert int4_tiled_bytes(2304, 768, 128).stored_bytes == 1_179_648
    assert int4_tiled_bytes(10, 100, 32).stored_bytes == 16 * 1024 // 2  # out 10 -> 16


@pytest.mark.torch
def test_int8_module_computes_torchaos_int8_weight_only_linear() -> None:
    """The traced module is torchao's `_linear_fp_act_int8_weight_impl`: on real tensors it
    equals F.linear with the weight dequantized (int8 * per-row scale)."""
    import torch

    from graphmem.frontends.torch.weight_quant import Int8WeightOnlyLinear

    linear = torch.nn.Linear(16, 8)
    layer = Int8WeightOnlyLinear(linear)
    codes = torch.randint(-127, 128, (8, 16), dtype=torch.int8)
    scale = torch.rand(8, 1) / 100
    layer.weight = torch.nn.Parameter(codes, requires_grad=False)
    layer.scale = scale
    x = torch.randn(3, 16)
    expected = torch.nn.functional.linear(x, codes.float() * scale, linear.bias)
    torch.testing.assert_close(layer(x), expected)


def _mlp_analysis(weights: str | None) -> object:
    import torch

    from graphmem.api import analyze

    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256))
    return analyze(model, ["4x256"], weights=weights, plan=False)


@pytest.mark.torch
@pytest.mark.slow
def test_int8_weights_in_the_api() -> None:
    plain, int8 = _mlp_analysis(None), _mlp_analysis("int8")
    # the same matmuls: 4 * 256 * 512 + 4 * 512 * 256 = 1,048,576 MACs
    assert int(plain.costs.total_macs) == int(int8.costs.total_macs) == 1_048_576
    assert int8.params.count == plain.params.count  # one int8 element per weight
    assert int8.params.bytes_by_dtype["int8"] == 256 * 512 * 2
    # residents: int8 weights 262,144 + fp32 scales (512 + 256) * 4 + int8 zero points
    # (512 + 256) * 1 + fp32 biases (512 + 256) * 4 + the input 4 * 256 * 4 = 273,152
    assert int(int8.liveness.resident_bytes) == 273_152
    # the largest dequantized weight, [256, 512] fp32 = 524,288 bytes, is live at its matmul
    assert int(int8.liveness.activation_peak_bytes) >= 524_288
    assert any("--weights int8: 2 Linear layers" in w for w in int8.model.notes)


@pytest.mark.torch
@pytest.mark.slow
def test_int4_weights_count_params_by_their_elements() -> None:
    int4 = _mlp_analysis("int4")
    assert int(int4.costs.total_macs) == 1_048_576  # the float matmuls' MACs
    # weights 256 * 512 * 2 = 262,144 (+ biases 768), packed in 131,072 bytes
    (group,) = int4.params.quantized
    assert (group.dtype, group.count, group.bytes) == ("int4", 262_144, 131_072)
    assert int4.params.count == 262_144 + 768
    # scale and zero_point fp32 (the weight's dtype): 2 * (256 / 128 * 512 + 512 / 128 * 256)
    # = 4,096 elements, 16,384 bytes
    assert int4.params.quantization_bytes == 16_384


@pytest.mark.torch
@pytest.mark.slow
def test_int4_tiled_weights_are_padded() -> None:
    tiled = _mlp_analysis("int4-tiled")
    # in padded to 1024: MACs 4 * 1024 * 512 + 4 * 1024 * 256 = 3,145,728 (tinygemm's work)
    assert int(tiled.costs.total_macs) == 3_145_728
    # packed bytes 512 * 1024 / 2 + 256 * 1024 / 2 = 393,216
    (group,) = tiled.params.quantized
    assert (group.count, group.bytes) == (262_144, 393_216)
    # scale_and_zero bf16: (1024 / 128) * 512 * 2 + (1024 / 128) * 256 * 2 = 12,288 elements
    assert tiled.params.quantization_bytes == 12_288 * 2


@pytest.mark.torch
@pytest.mark.slow
def test_per_module_weights_on_the_command_line(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    code, _, _ = run_cli(["analyze", "tests/torch_models/small.py:build_tiny_gpt", "--input",
                          "2x16:int64", "--weights", "int8:blocks.*.mlp", "--no-html",
                          "--json", str(out)], capsys)
    assert code == 0
    report = json.loads(out.read_text())
    # two blocks, each mlp has two Linear layers: 32 * 128 * 2 * 2 = 16,384 int8 weights
    assert report["params"]["bytes_by_dtype"]["int8"] == 16_384
    assert any("4 Linear layers" in w for w in report["model"]["notes"])


@pytest.mark.parametrize(("args", "fragment"), [
    (["tests/torch_models/small.py:build_convnet", "--input", "2x3x8x8", "--weights", "int4:x"],
     "no nn.Linear layer matches x"),
    (["model.onnx", "--weights", "int8"], "--weights apply to PyTorch models"),
    (["tests/torch_models/small.py:build_tiny_gpt", "--input", "2x16:int64", "--weights",
      "int2"], "unknown scheme"),
    (["tests/torch_models/small.py:build_tiny_gpt", "--input", "2x16:int64", "--train",
      "--qlora", "--weights", "int4"], "--weights and --qlora both quantize"),
    (["tests/torch_models/small.py:build_tiny_gpt", "--input", "2x16:int64", "--train",
      "--lora", "--weights", "int8"], "--lora on --weights layers"),
])
def test_bad_weights_are_one_error_line(args: list[str], fragment: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    if args[0] == "model.onnx":
        import onnx

        from tests.onnx_builders import mlp_model

        onnx.save(mlp_model(), tmp_path / "model.onnx")
        args = [str(tmp_path / "model.onnx"), *args[1:]]
    code, _, err = run_cli(["analyze", *args, "--no-html"], capsys)
    assert_one_error_line(code, err, fragment)


@pytest.mark.torch
@pytest.mark.slow
def test_llama3_layer_in_int4_from_its_config() -> None:
    """Llama-3-8B's widths, one layer, from its config: torchao's int4 quantizes every
    nn.Linear (lm_head too); every width is a multiple of 1024 in and 8 out: no padding."""
    from graphmem.api import analyze
    from tests.helpers.llm_configs import LLAMA3_8B, layers

    result = analyze(layers(LLAMA3_8B, 1), dims={"seq": 64}, plan=False, weights="int4")
    # q, o 4096 x 4096; k, v 1024 x 4096; gate, up 14336 x 4096; down 4096 x 14336;
    # lm_head 128256 x 4096
    weights = (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096 + 128256 * 4096)
    (group,) = result.params.quantized
    assert (group.dtype, group.count, group.bytes) == ("int4", weights, weights // 2)
    # scale_and_zero: (in / 128) * out * 2 bf16 per layer = weights / 64 elements, 2 bytes
    assert result.params.quantization_bytes == weights // 64 * 2
    # embedding 128256 x 4096 and the two RMSNorm weights and the final norm stay bf16
    assert result.params.count == weights + 128256 * 4096 + 3 * 4096
