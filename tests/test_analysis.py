"""The whole pipeline on exported models, including the fallback when symbolic inference fails."""

from pathlib import Path

import numpy as np
import pytest
import torch

from graphmem import analyze_onnx
from tests.helpers.torch_nets import AttentionBlock


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
@pytest.mark.torch
def test_multihead_attention_export_is_fully_shaped(tmp_path: Path) -> None:
    # The TorchScript export of nn.MultiheadAttention computes a slice end with
    # Mod(Constant, Constant), which onnxruntime's symbolic rules cannot evaluate; graphmem
    # folds that arithmetic for inference (frontends/onnx/fold.py), so every shape is known.
    path = tmp_path / "mha.onnx"
    torch.onnx.export(AttentionBlock().eval(), (torch.randn(2, 7, 32),), str(path),
                      dynamo=False, opset_version=17, input_names=["x"],
                      dynamic_axes={"x": {0: "batch"}})
    analysis = analyze_onnx(path, batch=3)
    assert analysis.costs.shape_unknown_nodes == ()
    # the input projection: [7, 3, 32] @ [32, 96] -> 7*3*96*32 = 64512 MACs
    in_proj = next(n for n in analysis.costs.nodes if n.op_type == "MatMul")
    assert int(in_proj.macs) == 64512
    # scores per head: [3*4, 7, 8] @ [3*4, 8, 7] -> 12*7*7*8 = 4704 MACs
    scores = next(n for n in analysis.costs.nodes if n.name == "/attention/MatMul_1")
    assert int(scores.macs) == 4704


def test_shape_inference_gaps_are_reported_never_zero(tmp_path: Path) -> None:
    # A Reshape to a target of unknown length (an input): not even the rank of its output is
    # known, so the MatMul after it has unknown FLOPs and is listed, never counted as zero.
    from onnx import TensorProto, helper, numpy_helper, save

    weight = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
         helper.make_node("MatMul", ["r", "w"], ["y"], name="matmul")],
        "gap",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16]),
         helper.make_tensor_value_info("target", TensorProto.INT64, ["rank"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[weight])
    path = tmp_path / "gap.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    analysis = analyze_onnx(path, batch=2)
    assert "matmul" in set(analysis.costs.shape_unknown_nodes)
    assert all(analysis.graph.values[v].shape_known is False
               for v in analysis.liveness.unknown_size_values)
