"""A mixture-of-experts layer as an exporter writes transformers' eager experts: the router's
TopK, OneHot over the experts, per expert a Gather of its mask, NonZero, the tokens gathered
and one up-projection (tests/test_data_bounds_routing.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

TOKENS, HIDDEN, EXPERTS, TOP_K, WIDTH = 64, 16, 4, 2, 256


def moe_model(path: Path) -> Path:
    rng = np.random.default_rng(0)

    def const(name: str, array: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(array, name)

    inits = [const("router", rng.standard_normal((HIDDEN, EXPERTS)).astype(np.float32)),
             const("k", np.array([TOP_K], np.int64)), const("depth", np.array(EXPERTS)),
             const("on_off", np.array([0, 1], np.int64)), const("one", np.array(1))]
    nodes = [helper.make_node("MatMul", ["h", "router"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["p"], axis=-1),
             helper.make_node("TopK", ["p", "k"], ["w", "chosen"], axis=-1),
             helper.make_node("OneHot", ["chosen", "depth", "on_off"], ["onehot"]),
             helper.make_node("Transpose", ["onehot"], ["mask"], perm=[2, 1, 0])]
    sums = []
    for e in range(EXPERTS):
        inits += [const(f"e{e}", np.array(e)),
                  const(f"up{e}", rng.standard_normal((HIDDEN, WIDTH)).astype(np.float32))]
        nodes += [helper.make_node("Gather", ["mask", f"e{e}"], [f"m{e}"], axis=0),
                  helper.make_node("NonZero", [f"m{e}"], [f"nz{e}"]),
                  helper.make_node("Gather", [f"nz{e}", "one"], [f"tok{e}"], axis=0),
                  helper.make_node("Gather", ["h", f"tok{e}"], [f"x{e}"], axis=0),
                  helper.make_node("MatMul", [f"x{e}", f"up{e}"], [f"a{e}"]),
                  helper.make_node("Relu", [f"a{e}"], [f"r{e}"]),
                  helper.make_node("ReduceSum", [f"r{e}"], [f"s{e}"], keepdims=0)]
        sums.append(f"s{e}")
    nodes.append(helper.make_node("Sum", sums, ["y"]))
    graph = helper.make_graph(nodes, "moe", [helper.make_tensor_value_info(
        "h", TensorProto.FLOAT, [TOKENS, HIDDEN])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(onnx.shape_inference.infer_shapes(model), path)
    return path
