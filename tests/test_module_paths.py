"""Module paths of ONNX nodes, from the exporters' scope names, and grouping by module."""

from pathlib import Path

import pytest
from onnx import helper

from graphmem import analyze_onnx
from graphmem.frontends.onnx.importer import module_path_of

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.mark.parametrize(("node_name", "expected"), [
    ("/conv1/Conv", "conv1"),
    ("/layer2/layer2.2/conv1/Conv", "layer2.2.conv1"),  # `layer2.2` refines `layer2`
    ("/layer1/layer1.0/downsample/downsample.0/Conv", "layer1.0.downsample.0"),
    ("/h.0/attn/c_attn/Gemm", "h.0.attn.c_attn"),
    ("/layer1/layer1.0/Add", "layer1.0"),
    ("/Flatten", ""),
    ("Conv_12", ""),  # no scope recorded
])
def test_module_path_from_torchscript_scopes(node_name: str, expected: str) -> None:
    assert module_path_of(helper.make_node("Relu", ["x"], ["y"], name=node_name)) == expected


@pytest.mark.parametrize(("scopes", "expected"), [
    ("['', 'layer2', 'layer2.2', 'layer2.2.bn1', '_native_batch_norm_legit_no_training_18']",
     "layer2.2.bn1"),
    ("['', 'fc', 'linear']", "fc"),
    ("['', 'view']", ""),
    ("['_empty_nn_module_stack_from_metadata_hook', 'sym_size_int_8']", ""),
])
def test_module_path_from_dynamo_name_scopes(scopes: str, expected: str) -> None:
    node = helper.make_node("Relu", ["x"], ["y"], name="node_relu")
    helper.set_metadata_props(node, {"pkg.torch.onnx.name_scopes": scopes})
    assert module_path_of(node) == expected


def test_sample_modules_carry_flops_and_parameters() -> None:
    # ResNet-50's fc is Linear(2048, 1000): 2048*1000 + 1000 = 2,049,000 parameters and
    # 2*2048*1000 = 4,096,000 FLOPs per sample; the TorchScript export renames folded conv
    # weights (`onnx::Conv_497`), which are attributed to the node that reads them.
    analysis = analyze_onnx(SAMPLES / "resnet50.onnx", batch=1, plan=False, module_depth=1)
    rows = {row.module: row for row in analysis.modules.rows}
    assert rows["fc"].params == 2_049_000
    assert int(rows["fc"].flops.evaluate({})) == 4_096_000
    assert sum(row.params for row in rows.values()) == analysis.params.count
    assert rows["layer4"].params > rows["layer1"].params > 0
