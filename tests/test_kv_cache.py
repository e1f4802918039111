"""Decoder KV cache: the formula, detection (ONNX past inputs, PyTorch attention modules) and the
longest context that fits (graphmem/distributed/kv_cache.py, graphmem/distributed/attach.py).

The formula is checked against real tensors: the present outputs onnxruntime returns for a
tiny decoder-with-past, and the K and V projections a PyTorch Llama computes.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

from graphmem import analyze_onnx, analyze_torch
from graphmem.cli.main import main
from graphmem.distributed.attach import kv_shape
from graphmem.distributed.kv_cache import find_past_inputs, kv_cache_formula, parse_kv_option
from graphmem.errors import GraphmemError
from graphmem.frontends.torch.kv import detect_kv_shape
from graphmem.pipeline.extras import with_kv_cache
from tests.helpers.decoders import HEAD_DIM, KV_HEADS, LAYERS, PER_TOKEN, WIDTH, decoder_with_past
from tests.models import tiny_gpt, tiny_llama


@pytest.fixture(scope="module")
def decoder_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kv") / "decoder_with_past.onnx"
    onnx.save(decoder_with_past(), str(path))
    return path


def test_formula_is_two_layers_batch_heads_head_dim_context_bytes() -> None:
    shape = kv_shape(LAYERS, KV_HEADS, HEAD_DIM, "float32", "test")
    assert shape.per_token_bytes == PER_TOKEN == 512
    assert kv_cache_formula(shape).formula() == "512*batch*context"
    # Llama-2-7B in fp16: 2 x 32 layers x 32 heads x 128 x 2 B = 512 KiB per token
    assert kv_shape(32, 32, 128, "float16", "").per_token_bytes == 512 * 1024
    assert kv_shape(32, 32, 128, "float16", "").per_token_bytes * 4096 == 2 * 2**30


def test_onnx_past_inputs_are_found(decoder_path: Path) -> None:
    past = find_past_inputs(analyze_onnx(decoder_path, plan=False).graph)
    assert past is not None
    assert (past.shape.layers, past.shape.kv_heads, past.shape.head_dim) == (2, 2, 16)
    assert past.shape.dtype == "float32" and len(past.values) == 4 and len(past.presents) == 4


@pytest.mark.ort
@pytest.mark.slow
def test_formula_matches_onnxruntime_present_outputs(decoder_path: Path) -> None:
    # batch 2, 5 cached tokens + 3 new: the cache after the step holds 8 tokens:
    # 512 B x 2 x 8 = 8192 B over the four present outputs
    session = ort.InferenceSession(str(decoder_path), providers=["CPUExecutionProvider"])
    feeds = {"hidden": np.zeros((2, 3, WIDTH), np.float32)}
    for layer in range(LAYERS):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{layer}.{kind}"] = np.zeros((2, KV_HEADS, 5, HEAD_DIM),
                                                                np.float32)
    presents = session.run(None, feeds)
    shape = kv_shape(LAYERS, KV_HEADS, HEAD_DIM, "float32", "test")
    assert sum(p.nbytes for p in presents) == kv_cache_formula(shape).evaluate(
        {"batch": 2, "context": 8}) == 8192


def analyze_decoder(path: Path, past: int, gpu: str | None = "t4"):
    analysis = analyze_onnx(path, batch=2, dims={"past": past, "seq": 1},
                            gpu=gpu, plan=False)
    return with_kv_cache(analysis)


def test_base_bytes_do_not_depend_on_the_cached_length(decoder_path: Path) -> None:
    # base = peak - past inputs - present outputs: weights, the new token's hidden state and
    # projections; the same at 4 and at 400 cached tokens
    short, long = analyze_decoder(decoder_path, 4), analyze_decoder(decoder_path, 400)
    assert short.kv_cache is not None and long.kv_cache is not None
    assert short.kv_cache.base_bytes == long.kv_cache.base_bytes
    # weights 4 x 32 x 32 x 4 B = 16384 are part of it
    assert short.kv_cache.base_bytes is not None and short.kv_cache.base_bytes > 16384


def test_longest_context_that_fits(decoder_path: Path) -> None:
    report = analyze_decoder(decoder_path, 4).kv_cache
    assert report is not None and report.batch == 2 and report.copies == 2
    assert report.max_context is not None and report.usable_bytes is not None
    # base + 2 copies (past in, present out) x 512 B x batch 2 x context <= usable
    per_context = 2 * PER_TOKEN * 2
    assert report.base_bytes is not None
    assert report.base_bytes + per_context * report.max_context <= report.usable_bytes
    assert report.base_bytes + per_context * (report.max_context + 1) > report.usable_bytes
    assert report.bytes.formula() == "1024*context"  # 512 x batch 2


def test_max_context_needs_a_gpu_and_a_batch(decoder_path: Path) -> None:
    report = analyze_decoder(decoder_path, 4, gpu=None).kv_cache
    assert report is not None and report.max_context is None
    assert "--gpu" in (report.max_context_reason or "")
    free = with_kv_cache(analyze_onnx(decoder_path, gpu="t4", plan=False)).kv_cache
    assert free is not None and free.batch is None and free.max_context is None
    assert free.bytes.formula() == "512*batch*context"


def stacked_past_graph() -> onnx.ModelProto:
    """onnxruntime's GPT-2 layout: past_L [2, batch, heads, past, head_dim] (K and V stacked)."""
    inputs = [helper.make_tensor_value_info(f"past_{layer}", TensorProto.FLOAT16,
                                            [2, "batch", 12, "past", 64]) for layer in range(3)]
    outputs = [helper.make_tensor_value_info(f"out_{layer}", TensorProto.FLOAT16,
                                             [2, "batch", 12, "past", 64]) for layer in range(3)]
    nodes = [helper.make_node("Identity", [f"past_{layer}"], [f"out_{layer}"])
             for layer in range(3)]
    graph = helper.make_graph(nodes, "gpt2_past", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_stacked_past_layout(tmp_path: Path) -> None:
    path = tmp_path / "gpt2_past.onnx"
    onnx.save(stacked_past_graph(), str(path))
    report = with_kv_cache(analyze_onnx(path, batch=4, dims={"past": 10}, plan=False)).kv_cache
    assert report is not None
    # 2 x 3 layers x 12 heads x 64 x 2 B (float16) = 9216 B per token; no present outputs
    assert report.shape.per_token_bytes == 9216 and report.copies == 1 and report.batch == 4


def test_torch_detection_from_attention_modules() -> None:
    # tiny_llama: 2 LlamaAttention modules, n_heads 4, head_dim 16; tiny_gpt: n_head 4
    assert detect_kv_shape(tiny_llama())[:3] == (2, 4, 16)
    assert detect_kv_shape(tiny_gpt())[:3] == (2, 4, 16)


def test_torch_detection_from_a_hugging_face_config() -> None:
    model = nn.Linear(2, 2)
    model.config = SimpleNamespace(num_hidden_layers=32, num_attention_heads=32,  # type: ignore[assignment]
                                   num_key_value_heads=8, hidden_size=4096)
    assert detect_kv_shape(model) == (32, 8, 128, "model.config")


def test_torch_detection_failure_is_a_clear_error() -> None:
    with pytest.raises(GraphmemError, match="--kv-cache LAYERS,KV_HEADS,HEAD_DIM"):
        detect_kv_shape(nn.Sequential(nn.Linear(2, 2)))


@pytest.mark.torch
def test_formula_matches_the_keys_and_values_a_llama_computes() -> None:
    """The K and V projections of every layer for 16 tokens of 3 sequences are exactly what a
    cache holds after 16 tokens."""
    model = tiny_llama().eval()
    kv_bytes = []
    hooks = [module.register_forward_hook(lambda _m, _i, out: kv_bytes.append(
        out.numel() * out.element_size()))
        for name, module in model.named_modules() if name.endswith((".wk", ".wv"))]
    with torch.no_grad():
        model(torch.randint(0, 512, (3, 16)))
    for hook in hooks:
        hook.remove()
    layers, heads, head_dim, _ = detect_kv_shape(model)
    shape = kv_shape(layers, heads, head_dim, "float32", "test")
    assert sum(kv_bytes) == kv_cache_formula(shape).evaluate({"batch": 3, "context": 16})


def test_parse_option() -> None:
    assert parse_kv_option("32,8,128") == (32, 8, 128)
    for bad in ("32,8", "a,b,c", "32,0,128"):
        with pytest.raises(GraphmemError, match="LAYERS,KV_HEADS,HEAD_DIM"):
            parse_kv_option(bad)


@pytest.mark.torch
def test_cli_torch_auto_and_explicit_agree(capsys: pytest.CaptureFixture[str]) -> None:
    results = []
    for option in ("auto", "2,4,16"):
        code = main(["analyze", "tests/models.py:tiny_llama", "--input", "1x16:int64",
                     "--kv-cache", option, "--gpu", "t4", "--no-html", "--json", "-"])
        assert code == 0
        results.append(json.loads(capsys.readouterr().out)["memory"]["kv_cache"])
    auto, explicit = results
    # 2 x 2 layers x 4 heads x 16 x 4 B = 1024 B per token, batch 1
    assert auto["per_token_bytes"] == explicit["per_token_bytes"] == 1024
    assert auto["max_context"] == explicit["max_context"] > 0
    assert auto["formula"] == "1024*batch*context" and auto["bytes"] == "1024*context"


def test_cli_onnx_found_without_a_flag(decoder_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", str(decoder_path), "--batch", "1", "--dim", "past=8", "--dim",
                 "seq=1", "--gpu", "t4", "--no-html", "--json", "-",
                 "--kv-dtype", "float16"])
    assert code == 0
    kv = json.loads(capsys.readouterr().out)["memory"]["kv_cache"]
    assert kv["per_token_bytes"] == PER_TOKEN // 2  # float16 cache
    assert kv["layers"] == 2 and kv["copies"] == 2 and kv["max_context"] > 0


@pytest.mark.parametrize("argv, message", [
    (["--kv-cache", "2,4"], "LAYERS,KV_HEADS,HEAD_DIM"),
    (["--kv-cache", "auto", "--train"], "--kv-cache is for inference"),
    (["--kv-cache", "auto", "--kv-dtype", "int3"], "--kv-dtype int3"),
])
def test_cli_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", "tests/models.py:tiny_llama", "--input", "1x16:int64", "--no-html",
                 *argv])
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.torch
def test_torch_inference_batch_comes_from_the_input() -> None:
    analysis = analyze_torch(tiny_llama(), ["3x16:int64"], gpu="t4")
    report = with_kv_cache(analysis, kv_shape(2, 4, 16, "float32", "test"), batch=3)
    assert report.kv_cache is not None and report.kv_cache.batch == 3
    assert report.kv_cache.base_bytes == int(analysis.liveness.peak_bytes)
