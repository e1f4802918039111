"""Every shipped sample's parameter count, exactly, against the torch model it came from.

`sum(p.numel())` of the model in tests/models.py, adjusted by what the exporter did to the
file (these are properties of the file, and graphmem counts what the file holds):
- BatchNorm folded into the conv before it (TorchScript's eval export, dynamo's
  FuseBatchNormIntoConv): each BatchNorm2d(N) loses its 2N weight and bias and its conv gains
  an N bias, so -N per BatchNorm.
- TorchScript writes a tied weight twice (GPT-2's wte/lm_head, TinyGPT's embedding/head): +
  the tied tensor's size.
- dynamo folds a non-persistent buffer it slices at export into initializers (TinyLlama's
  rotary cos/sin table): + the buffer's size; ONNX cannot tell a buffer from a parameter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from graphmem.frontends.onnx.importer import import_onnx
from graphmem.passes.params import count_params
from tests.models import EXPECTED_PARAMS

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _batchnorm_channels(model: nn.Module) -> int:
    return sum(m.num_features for m in model.modules() if isinstance(m, nn.BatchNorm2d))


def _tied_numel(model: nn.Module) -> int:
    # parameters() yields a shared tensor once; named_parameters(remove_duplicate=False) twice
    every = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    return every - sum(p.numel() for p in model.parameters())


def _buffer_numel(model: nn.Module) -> int:
    return sum(b.numel() for b in model.buffers() if b.is_floating_point()
               and not any(isinstance(m, nn.BatchNorm2d) for m in model.modules()))


ADJUSTMENTS = {
    "resnet50.onnx": ("folded",), "resnet50.dynamo.onnx": ("folded",),
    "mobilenet_v2.onnx": ("folded",),
    "tiny_cnn.onnx": ("folded",), "tiny_cnn.dynamo.onnx": ("folded",), "tiny_cnn.nofold.onnx": (),
    "gpt2.onnx": ("tied",), "gpt2.dynamo.onnx": (),
    "tiny_gpt.onnx": ("tied",), "tiny_gpt.dynamo.onnx": (),
    "tiny_llama.onnx": (), "tiny_llama.dynamo.onnx": ("buffers",),
}


@pytest.mark.parametrize("sample", sorted(ADJUSTMENTS))
@pytest.mark.slow
def test_sample_parameter_count_is_exact(sample: str) -> None:
    build, published = EXPECTED_PARAMS[sample.split(".")[0]]
    model = build()
    assert sum(p.numel() for p in model.parameters()) == published
    expected = published
    for adjustment in ADJUSTMENTS[sample]:
        expected += {"folded": -_batchnorm_channels(model), "tied": _tied_numel(model),
                     "buffers": _buffer_numel(model)}[adjustment]
    assert count_params(import_onnx(SAMPLES / sample).graph).count == expected


def test_every_sample_is_checked() -> None:
    assert sorted(p.name for p in SAMPLES.glob("*.onnx")) == sorted(ADJUSTMENTS)
