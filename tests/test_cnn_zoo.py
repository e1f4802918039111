"""Standard CNNs (tests/cnn_zoo.py) through both front doors, at batch 1 and the standard input
size (224, Inception-v3 299): every op of the TorchScript ONNX export is supported with known
shapes, the parameter count is exact, the contractions' MACs equal FlopCounterMode's (FLOPs =
2 x MACs), and the totals match the figures in torchvision's model docs
(https://pytorch.org/vision/stable/models.html, each builder's "num_params" and "GFLOPS";
torchvision's GFLOPS are GMACs).

Parameters against the file: the TorchScript exporter (eval mode) folds a BatchNorm that
directly follows a conv into it: the BatchNorm2d(N)'s 2N weight and bias go, the conv gains an
N bias, so -N each. A BatchNorm after a ReLU or a Concat (DenseNet's pre-activation norms)
stays a BatchNormalization node: its scale and bias are parameters, its running mean and var
(2N) are buffers. The exporter also merges initializers of equal value, so the weights are
filled with distinct random values first, as trained weights would be.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from graphmem.core.symbolic import SymInt
from tests import cnn_zoo

pytestmark = pytest.mark.slow

CONTRACTION_OPS = frozenset({"Conv", "Gemm", "MatMul"})


def inception_v3_eval() -> nn.Module:
    return cnn_zoo.InceptionV3(aux_logits=False)


# name, builder, input side, published params, published GMACs (torchvision's model docs)
ZOO: list[tuple[str, Callable[[], nn.Module], int, int, float]] = [
    ("vgg16", cnn_zoo.VGG16, 224, 138_357_544, 15.47),
    ("squeezenet1_1", cnn_zoo.SqueezeNet11, 224, 1_235_496, 0.35),
    ("densenet121", cnn_zoo.DenseNet121, 224, 7_978_856, 2.83),
    # inception_v3's 27,161,264 includes the aux head (3,326,696), which eval does not run
    ("inception_v3", inception_v3_eval, 299, 27_161_264 - 3_326_696, 5.71),
    ("efficientnet_b0", cnn_zoo.EfficientNetB0, 224, 5_288_548, 0.39),
    ("convnext_tiny", cnn_zoo.ConvNeXtTiny, 224, 28_589_128, 4.46),
]


def zoo_cases() -> list[object]:
    return [pytest.param(*case, id=case[0]) for case in ZOO]


def build(make_model: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    model = make_model().eval()
    with torch.no_grad():  # distinct values, so the exporter merges no initializers
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.is_floating_point():
                tensor.copy_(torch.rand_like(tensor) + 0.5)
    return model


def flop_counter_macs(model: nn.Module, x: torch.Tensor) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops() // 2


def folded_batchnorm_channels(model: nn.Module, x: torch.Tensor) -> int:
    """Channels of the BatchNorms whose input is a conv's output (the exporter folds those)."""
    conv_outputs: list[torch.Tensor] = []  # held, so no id is reused by a later tensor
    folded: list[int] = []

    def check(bn: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        if any(args[0] is out for out in conv_outputs):
            folded.append(bn.num_features)

    hooks = [m.register_forward_hook(lambda _m, _i, out: conv_outputs.append(out))
             for m in model.modules() if isinstance(m, nn.Conv2d)]
    hooks += [m.register_forward_pre_hook(check)
              for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        model(x)
    for hook in hooks:
        hook.remove()
    return sum(folded)


def batchnorm_channels(model: nn.Module) -> int:
    return sum(m.num_features for m in model.modules() if isinstance(m, nn.BatchNorm2d))


def test_published_parameter_counts() -> None:
    """The definitions are torchvision's: every count as its docs list it."""
    published = {name: params for name, _, _, params, _ in ZOO}
    published["inception_v3"] = 27_161_264  # with the aux head, as torchvision lists it
    models = {name: make() for name, make, *_ in ZOO}
    models["inception_v3"] = cnn_zoo.InceptionV3(aux_logits=True)
    counts = {name: sum(p.numel() for p in model.parameters()) for name, model in models.items()}
    assert counts == published


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the TorchScript exporter
@pytest.mark.parametrize(("name", "make_model", "side", "params", "gmacs"), zoo_cases())
@pytest.mark.torch
def test_onnx_export(tmp_path: Path, name: str, make_model: Callable[[], nn.Module], side: int,
                     params: int, gmacs: float) -> None:
    from graphmem.frontends.onnx.importer import load_onnx
    from graphmem.passes.costs import compute_costs
    from graphmem.passes.params import count_params

    model = build(make_model)
    x = torch.randn(1, 3, side, side)
    path = tmp_path / f"{name}.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17,
                      input_names=["x"])
    graph = load_onnx(path)
    report = compute_costs(graph)

    assert report.unsupported_ops == {}
    assert report.shape_unknown_nodes == ()
    folded = folded_batchnorm_channels(model, x)
    held = count_params(graph)
    assert held.count == params - folded
    assert held.buffer_count == 2 * (batchnorm_channels(model) - folded)
    contraction_macs = sum(
        (n.macs for n in report.nodes if n.op_type in CONTRACTION_OPS), SymInt())
    assert contraction_macs == report.total_macs
    assert report.total_macs.evaluate({}) == flop_counter_macs(model, x)
    assert report.total_macs.evaluate({}) / 1e9 == pytest.approx(gmacs, rel=0.02)


@pytest.mark.parametrize(("name", "make_model", "side", "params", "gmacs"), zoo_cases())
@pytest.mark.torch
def test_torch_path(name: str, make_model: Callable[[], nn.Module], side: int, params: int,
                    gmacs: float) -> None:
    from graphmem import analyze_torch

    model = make_model().eval()
    analysis = analyze_torch(model, [f"1x3x{side}x{side}"], plan=False)
    assert analysis.costs.unsupported_ops == {}
    assert analysis.costs.shape_unknown_nodes == ()
    assert analysis.params.count == params  # no export, no folding: the module's own tensors
    macs = analysis.costs.total_macs.evaluate({})
    assert macs == flop_counter_macs(model, torch.randn(1, 3, side, side))
    assert macs / 1e9 == pytest.approx(gmacs, rel=0.02)
