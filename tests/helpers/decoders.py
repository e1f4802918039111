"""A small ONNX decoder-with-past, as Hugging Face Optimum exports them (past_key_values.L.key
and .value inputs, present.L.key and .value outputs): tests/test_kv_cache.py, test_serving.py."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LAYERS, KV_HEADS, HEAD_DIM, WIDTH = 2, 2, 16, 32
# 2 (K and V) x 2 layers x 2 KV heads x 16 head dim x 4 B (float32) = 512 B per token
PER_TOKEN = 2 * LAYERS * KV_HEADS * HEAD_DIM * 4


def decoder_with_past() -> onnx.ModelProto:
    """hidden[batch, seq, 32]; per layer and K/V: MatMul(32 x 32) -> Reshape [b, s, 2, 16] ->
    Transpose [b, 2, s, 16] -> Concat(past_key_values.L.key|value [b, 2, past, 16], axis 2) ->
    present.L.key|value [b, 2, past + seq, 16], as Hugging Face Optimum names them."""
    rng = np.random.default_rng(0)
    nodes, inputs, outputs, weights = [], [], [], [numpy_helper.from_array(
        np.array([0, 0, KV_HEADS, HEAD_DIM], np.int64), "heads_shape")]
    inputs.append(helper.make_tensor_value_info("hidden", TensorProto.FLOAT,
                                                ["batch", "seq", WIDTH]))
    for layer in range(LAYERS):
        for kind in ("key", "value"):
            tag = f"{layer}_{kind}"
            past = f"past_key_values.{layer}.{kind}"
            weights.append(numpy_helper.from_array(
                rng.standard_normal((WIDTH, WIDTH)).astype(np.float32), f"w_{tag}"))
            inputs.append(helper.make_tensor_value_info(
                past, TensorProto.FLOAT, ["batch", KV_HEADS, "past", HEAD_DIM]))
            outputs.append(helper.make_tensor_value_info(
                f"present.{layer}.{kind}", TensorProto.FLOAT,
                ["batch", KV_HEADS, "total", HEAD_DIM]))
            nodes += [
                helper.make_node("MatMul", ["hidden", f"w_{tag}"], [f"p_{tag}"], name=f"mm_{tag}"),
                helper.make_node("Reshape", [f"p_{tag}", "heads_shape"], [f"r_{tag}"],
                                 name=f"reshape_{tag}"),
                helper.make_node("Transpose", [f"r_{tag}"], [f"t_{tag}"], perm=[0, 2, 1, 3],
                                 name=f"transpose_{tag}"),
                helper.make_node("Concat", [past, f"t_{tag}"], [f"present.{layer}.{kind}"],
                                 axis=2, name=f"concat_{tag}"),
            ]
    graph = helper.make_graph(nodes, "decoder_with_past", inputs, outputs, initializer=weights)
    # IR version 10: onnxruntime 1.31 reads up to 13, onnx 1.23 writes 14 by default
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
