"""The benchmark's Llama-shaped graphs (benchmarks/llama_graph.py): graphmem analyzes them
completely and exactly, without the weights, and the graphs compute what Llama computes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from graphmem import analyze_onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from llama_graph import (  # benchmarks/ is not a package: found through sys.path
    PRESETS,
    LlamaConfig,
    build_llama,
    check_graph,
    data_file,
    matmul_macs,
    parameter_count,
    write_model,
)

# 2 layers, hidden 64, 4 heads of 16, 2 key/value heads (repeat_kv doubles them), SwiGLU 128,
# vocab 100, float32
TINY = PRESETS["tiny"]


def test_published_parameter_counts() -> None:
    # Llama-2-70B: embed 32000*8192 = 262,144,000; per layer q 8192*8192 + k, v 2*8192*1024
    # + o 8192*8192 + MLP 3*8192*28672 + 2 norms 2*8192 = 855,654,400, times 80;
    # final norm 8,192; lm_head (untied) 262,144,000
    assert parameter_count(PRESETS["llama2-70b"]) == 68_976_648_192
    assert parameter_count(PRESETS["llama2-7b"]) == 6_738_415_616
    assert parameter_count(PRESETS["llama3-70b"]) == 70_553_706_496


def test_tiny_decoder_is_analyzed_exactly_without_its_weights(tmp_path: Path) -> None:
    path = write_model(tmp_path / "tiny.onnx", TINY)
    analysis = analyze_onnx(path, batch=2, dims={"seq": 16})

    # embed 100*64 = 6,400; per layer q 64*64 = 4,096, k and v 64*32 = 2,048 each, o 4,096,
    # gate/up/down 3*64*128 = 24,576, 2 norms 128: 36,992, times 2 = 73,984; final norm 64;
    # lm_head 64*100 = 6,400: 6,400 + 73,984 + 64 + 6,400 = 86,848
    assert analysis.params.count == parameter_count(TINY) == 86_848
    assert analysis.costs.unsupported_ops == {}
    assert analysis.costs.shape_unknown_nodes == ()

    # t = batch*seq = 32 tokens. Per layer: q 32*64*64 = 131,072; k and v 32*64*32 = 65,536
    # each; o 131,072; scores [2,4,16,16] @ [2,4,16,16] = 2*4*16*16*16 = 32,768; weighted
    # values 32,768; gate, up, down 3*32*64*128 = 786,432: 1,245,184, times 2 = 2,490,368.
    # lm_head 32*64*100 = 204,800. Total 2,695,168.
    matmuls = [n for n in analysis.costs.nodes if n.op_type == "MatMul"]
    assert len(matmuls) == 2 * 9 + 1
    assert sum(int(n.macs) for n in matmuls) == matmul_macs(TINY, 2, 16) == 2_695_168
    assert int(analysis.costs.total_macs) == 2_695_168  # no other op multiply-accumulates
    scores = next(n for n in matmuls if n.name == "/model/layers.0/self_attn/MatMul")
    assert int(scores.macs) == 32_768

    assert not data_file(path).exists()  # the weights were never read, nor written


def test_node_count_and_checker() -> None:
    one, two = (build_llama(LlamaConfig(**{**TINY.__dict__, "layers": n})) for n in (1, 2))
    per_layer = len(two.graph.node) - len(one.graph.node)
    # what torch.onnx.export (TorchScript, opset 17) writes for a transformers-4.36 layer with
    # grouped-query attention: 89 Constant nodes and 158 others
    assert per_layer == 247
    check_graph(two)
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in two.graph.initializer)


@pytest.mark.ort
@pytest.mark.slow
def test_graph_computes_llama() -> None:
    # With real weights the graph runs in onnxruntime and gives a plain numpy Llama's logits.
    model = build_llama(TINY)
    rng = np.random.default_rng(0)
    weights: dict[str, np.ndarray] = {}
    for tensor in model.graph.initializer:
        weights[tensor.name] = (rng.standard_normal(tuple(tensor.dims)) * 0.2).astype(np.float32)
        tensor.CopyFrom(numpy_helper.from_array(weights[tensor.name], tensor.name))
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    ids = rng.integers(0, TINY.vocab, (3, 11))
    (logits,) = session.run(None, {"input_ids": ids})
    np.testing.assert_allclose(logits, _reference_logits(weights, TINY, ids), atol=1e-4)


def _reference_logits(w: dict[str, np.ndarray], config: LlamaConfig,
                      ids: np.ndarray) -> np.ndarray:
    batch, seq = ids.shape
    heads, kv_heads, d = config.heads, config.kv_heads, config.head_dim
    inv_freq = 1.0 / config.rope_theta ** (np.arange(0, d, 2) / d)
    angles = np.outer(np.arange(seq), inv_freq)
    angles = np.concatenate([angles, angles], axis=-1)
    cos, sin = np.cos(angles), np.sin(angles)  # [seq, d]
    mask = np.triu(np.full((seq, seq), -1e9, np.float32), 1)

    def norm(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return weight * x / np.sqrt((x**2).mean(-1, keepdims=True) + config.rms_eps)

    def split(x: np.ndarray, count: int) -> np.ndarray:  # [b, s, count*d] -> [b, count, s, d]
        return x.reshape(batch, seq, count, d).transpose(0, 2, 1, 3)

    def rope(x: np.ndarray) -> np.ndarray:
        rotated = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], axis=-1)
        return x * cos + rotated * sin

    x = w["model.embed_tokens.weight"][ids]
    for index in range(config.layers):
        p = f"model.layers.{index}."
        y = norm(x, w[p + "input_layernorm.weight"])
        q = rope(split(y @ w[p + "self_attn.q_proj.weight"], heads))
        k = rope(split(y @ w[p + "self_attn.k_proj.weight"], kv_heads))
        v = split(y @ w[p + "self_attn.v_proj.weight"], kv_heads)
        k, v = (np.repeat(t, heads // kv_heads, axis=1) for t in (k, v))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + mask
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attended = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, config.hidden)
        x = x + attended @ w[p + "self_attn.o_proj.weight"]
        y = norm(x, w[p + "post_attention_layernorm.weight"])
        gate = y @ w[p + "mlp.gate_proj.weight"]
        x = x + (gate / (1 + np.exp(-gate)) * (y @ w[p + "mlp.up_proj.weight"])) @ w[
            p + "mlp.down_proj.weight"]
    return norm(x, w["model.norm.weight"]) @ w["lm_head.weight"]
