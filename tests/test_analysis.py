"""The whole pipeline on exported models, including the fallback when symbolic inference fails."""

from pathlib import Path

import pytest
import torch
from torch import nn

from graphmem.analysis import analyze_onnx


class AttentionBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x, x, need_weights=True)[0]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_shape_inference_gaps_are_merged_and_reported(tmp_path: Path) -> None:
    # onnxruntime's symbolic rules assert on this export's dynamic Reshape; graphmem keeps its
    # results for every other node and merges in onnx's own inference. Neither can follow the
    # Slice of a computed shape inside MultiheadAttention (with the batch bound and re-inferred
    # either), so a few nodes stay unknown: they must be reported, never silently zero.
    path = tmp_path / "mha.onnx"
    torch.onnx.export(AttentionBlock().eval(), (torch.randn(2, 7, 32),), str(path),
                      dynamo=False, opset_version=17, input_names=["x"],
                      dynamic_axes={"x": {0: "batch"}})
    analysis = analyze_onnx(path, batch=3)
    assert any("could not follow" in w for w in analysis.model.warnings)
    unknown = set(analysis.costs.shape_unknown_nodes)
    assert "/attention/MatMul_2" in unknown
    assert all(analysis.graph.values[v].shape_known is False
               for v in analysis.liveness.unknown_size_values)
    # the input projection is known: [7, 3, 32] @ [32, 96] -> 7*3*96*32 = 64512 MACs
    in_proj = next(n for n in analysis.costs.nodes if n.op_type == "MatMul")
    assert int(in_proj.macs) == 64512
