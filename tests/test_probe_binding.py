"""A device-total probe's dims at another batch (graphmem/pipeline/device_total.py
`DeviceTotalProbe.binding`): on a graph without NonZero it is made without routed_dims' walk
over every node, and must be what `rebind` gives; on a mixture of experts (NonZero token
lists) it is `rebind`'s, the routed counts following the batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.devices.gpus import find_gpu
from graphmem.passes.routed_dims import rebind
from graphmem.pipeline.device_total import DeviceModel, DeviceTotalProbe
from graphmem.runtime_models.data_bounds import has_data_sized_ops
from tests.helpers.moe_onnx import moe_model

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _probe_and_rebind(path: Path, dims: dict[str, int], batch_dim: str) -> None:
    analysis = analyze_onnx(path, dims=dims, plan=False)
    probe = DeviceTotalProbe(analysis, batch_dim, DeviceModel("ort-cuda", find_gpu("t4")))
    for value in (1, 2, 7, 64, 1000):
        bound = {**probe.others, batch_dim: value}
        expected = rebind(analysis.graph, analysis.dims, bound, analysis.moe_routing)
        assert probe.binding(bound) == expected, value


@pytest.mark.parametrize(("sample", "dims"), [("tiny_gpt.onnx", {"seq": 64}),
                                             ("tiny_llama.dynamo.onnx", {"seq": 17}),
                                             ("tiny_cnn.onnx", {})])
def test_a_graph_without_nonzero_binds_as_rebind_does(sample: str, dims: dict[str, int]
                                                      ) -> None:
    _probe_and_rebind(SAMPLES / sample, dims, "batch")
    assert not has_data_sized_ops(analyze_onnx(SAMPLES / sample, dims=dims, plan=False).graph)


def test_a_mixture_of_experts_binds_its_routed_counts(tmp_path: Path) -> None:
    path = moe_model(tmp_path / "moe.onnx")
    analysis = analyze_onnx(path, plan=False)
    assert has_data_sized_ops(analysis.graph)
    assert analysis.dims.routed  # the experts' token counts, bound by the policy
    for dim in analysis.dims.bound:
        _probe_and_rebind(path, {}, dim)
