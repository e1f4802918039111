"""Regenerate every ONNX sample in samples/ from the architectures in tests/models.py.

    python samples/make_samples.py

Seeded and deterministic. Small models ship with their weights; resnet50, mobilenet_v2 and gpt2
ship as graphs only: their initializers point at a `<name>.onnx.data` file that is deleted
after export (and git-ignored), so the .onnx keeps every initializer's dims and dtype but not
its bytes. Load those with `onnx.load(path, load_external_data=False)`.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # so `python samples/make_samples.py` finds tests/

from tests.models import (  # noqa: E402 (needs the path above)
    GPT2,
    MobileNetV2,
    ResNet50,
    RMSNorm,
    TinyCNN,
    count_params,
    tiny_gpt,
    tiny_llama,
)

SEED = 0
TS_OPSET = 17  # TorchScript exporter: LayerNormalization needs 17
# The dynamo exporter builds opset 18 and converts from there (its default is 20, which emits
# Gelu; 23 also fuses RMSNorm into RMSNormalization). 18 keeps the decomposed forms.
DYNAMO_OPSET = 18
INLINE_BYTES = 1024  # graph-only files keep tensors under 1 KiB inline (onnx's default)


@dataclass(frozen=True)
class Sample:
    name: str
    build: Callable[[], nn.Module]
    example: Callable[[], torch.Tensor]  # the input traced at export
    check: Callable[[], torch.Tensor]  # another batch (and seq) to prove the dims stay dynamic
    dims: dict[int, str]  # input axis -> dim name; the output shares them
    dynamo: bool  # also export with the dynamo exporter
    full_weights: bool  # False: graph only, external data deleted


def image(batch: int, size: int) -> Callable[[], torch.Tensor]:
    return lambda: torch.randn(batch, 3, size, size)


def tokens(batch: int, seq: int, vocab: int = 512) -> Callable[[], torch.Tensor]:
    return lambda: torch.randint(0, vocab, (batch, seq))


IMAGE_DIMS = {0: "batch"}
TOKEN_DIMS = {0: "batch", 1: "seq"}

SAMPLES = [
    Sample("tiny_cnn", TinyCNN, image(2, 32), image(3, 32), IMAGE_DIMS, True, True),
    Sample("tiny_gpt", tiny_gpt, tokens(2, 16), tokens(3, 9), TOKEN_DIMS, True, True),
    Sample("tiny_llama", tiny_llama, tokens(2, 16), tokens(3, 9), TOKEN_DIMS, True, True),
    # Graph-only samples are never run; batch 2 still keeps torch.export from specializing 1.
    Sample("resnet50", ResNet50, image(2, 224), image(3, 224), IMAGE_DIMS, True, False),
    Sample("mobilenet_v2", MobileNetV2, image(2, 224), image(3, 224), IMAGE_DIMS, False, False),
    Sample("gpt2", GPT2, tokens(2, 16, 50257), tokens(3, 9, 50257), TOKEN_DIMS, True, False),
]


def perturb_norms(model: nn.Module) -> None:
    """Give norm layers trained-looking values.

    Fresh init makes every norm scale 1 and every shift 0; both exporters then merge
    equal-valued initializers into one (TorchScript through Identity nodes, onnxscript
    silently), which no trained checkpoint would show.
    """
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.normal_(0.0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
            if isinstance(module, nn.BatchNorm2d | nn.LayerNorm | RMSNorm):
                module.weight.normal_(1.0, 0.1)
            if isinstance(module, nn.BatchNorm2d | nn.LayerNorm):
                module.bias.normal_(0.0, 0.1)


def build(sample: Sample) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(SEED)
    model = sample.build().eval()
    perturb_norms(model)
    return model, sample.example()


def input_name(sample: Sample) -> str:
    return "input_ids" if sample.dims == TOKEN_DIMS else "x"


def export_torchscript(sample: Sample, model: nn.Module, x: torch.Tensor, path: Path,
                       fold: bool = True) -> None:
    """fold=False keeps BatchNormalization nodes (eval-mode constant folding merges them)."""
    name = input_name(sample)
    torch.onnx.export(
        model, (x,), str(path), dynamo=False, opset_version=TS_OPSET,
        input_names=[name], output_names=["logits"],
        dynamic_axes={name: sample.dims, "logits": sample.dims}, do_constant_folding=fold,
    )


def export_dynamo(sample: Sample, model: nn.Module, x: torch.Tensor, path: Path) -> None:
    name = input_name(sample)
    shapes = {name: {axis: torch.export.Dim(dim) for axis, dim in sample.dims.items()}}
    torch.onnx.export(
        model, (x,), str(path), dynamo=True, opset_version=DYNAMO_OPSET,
        input_names=[name], output_names=["logits"], dynamic_shapes=shapes,
        external_data=False,  # every sample is under protobuf's 2 GB; split it ourselves
        verbose=False,
    )


Exporter = Callable[[Sample, nn.Module, torch.Tensor, Path], None]


def exporters(sample: Sample) -> dict[str, Exporter]:
    """File suffix -> exporter; the suffix names the exporter in the file name."""
    chosen: dict[str, Exporter] = {".onnx": export_torchscript}
    if sample.dynamo:
        chosen[".dynamo.onnx"] = export_dynamo
    if sample.name == "tiny_cnn":
        chosen[".nofold.onnx"] = partial(export_torchscript, fold=False)
    return chosen


def drop_stack_traces(model: onnx.ModelProto) -> None:
    """Remove the dynamo exporter's per-node stack traces.

    They hold absolute paths of the checkout that ran the export, so the file would differ on
    every machine; the path-free metadata (namespace, class hierarchy, name scopes) stays.
    """
    for node in model.graph.node:
        kept = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)


def save_graph_only(model: onnx.ModelProto, target: Path) -> None:
    """Save with the big initializers as external data, then drop the data file."""
    with tempfile.TemporaryDirectory() as scratch:
        # The data file lands in the scratch dir and disappears with it; the graph keeps dims,
        # dtype and the (now dangling) external_data location/offset/length of each tensor.
        onnx.save_model(model, str(Path(scratch) / target.name), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=target.name + ".data",
                        size_threshold=INLINE_BYTES)
        target.write_bytes((Path(scratch) / target.name).read_bytes())


def max_abs_error(model: nn.Module, path: Path, x: torch.Tensor) -> float:
    """Run the ONNX file in onnxruntime on a new batch/seq and compare with torch."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x.numpy()}
    (got,) = session.run(None, feed)
    with torch.no_grad():
        want = model(x).numpy()
    return float(np.abs(got - want).max())


def float_initializer_numel(path: Path) -> int:
    """Elements of floating-point initializers with more than one element (no data read)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
              onnx.TensorProto.DOUBLE}
    sizes = (int(np.prod(t.dims)) for t in graph.initializer if t.data_type in floats)
    return sum(n for n in sizes if n > 1)


def write_sample(sample: Sample, suffix: str, export: Exporter) -> Path:
    model, x = build(sample)
    target = HERE / f"{sample.name}{suffix}"
    with tempfile.TemporaryDirectory() as scratch:
        export(sample, model, x, Path(scratch) / target.name)
        proto = onnx.load(str(Path(scratch) / target.name))
    drop_stack_traces(proto)
    if sample.full_weights:
        onnx.save_model(proto, str(target))
        x_check = sample.check()
        error = max_abs_error(model, target, x_check)
        check = f"ort max|err| {error:.1e} at {tuple(x_check.shape)}"
    else:
        save_graph_only(proto, target)
        check = "graph only"
    print(f"{target.relative_to(HERE.parent)!s:34} {target.stat().st_size:>9,} B  "
          f"torch params {count_params(model):>11,}  "
          f"onnx float initializers {float_initializer_numel(target):>11,}  {check}")
    return target


def main() -> None:
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # "legacy TorchScript"
    warnings.filterwarnings("ignore", category=FutureWarning)
    # The dynamo exporter logs one warning per torchvision op it cannot register.
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    written = [write_sample(s, suffix, export) for s in SAMPLES
               for suffix, export in exporters(s).items()]
    total = sum(p.stat().st_size for p in written)
    print(f"{len(written)} files, {total:,} B in {HERE.relative_to(HERE.parent)}/")


if __name__ == "__main__":
    main()
