"""One Einsum as an ONNX model (tests/test_runtime_ort_einsum.py measures it on onnxruntime's
CPU provider; tests/test_ort_cuda_einsum.py runs graphmem's CUDA model on it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx
from onnx import TensorProto, helper


def einsum_graph(tmp_path: Path, name: str, equation: str,
                 shapes: Sequence[Sequence[int]]) -> Path:
    """Each input through Neg (a tensor of the plan, not the caller's), Einsum, Neg."""
    names = [f"x{i}" for i in range(len(shapes))]
    nodes = [helper.make_node("Neg", [x], [f"n{x}"]) for x in names]
    nodes += [helper.make_node("Einsum", [f"n{x}" for x in names], ["e"], equation=equation),
              helper.make_node("Neg", ["e"], ["y"])]
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, list(s))
              for x, s in zip(names, shapes, strict=True)]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(model), path)
    return path
