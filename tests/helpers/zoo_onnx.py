"""One zoo architecture (tests/zoo_models.py) exported to ONNX and run on onnxruntime:
graphmem's ort-cpu prediction next to onnxruntime's measured `mem_in_use_peak`
(benchmarks/zoo_onnx.py prints the table, tests/test_zoo_onnx.py checks a subset)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import onnx
import torch

from graphmem.frontends.torch.loader import parse_tensor_spec
from graphmem.verify.runners.torch_runner import random_inputs
from tests.helpers.ort import measure_all
from tests.helpers.zoo import built
from tests.zoo_models import ZooModel

LEVELS = ("disabled", "all")


class FirstTensor(torch.nn.Module):
    """The zoo model's one output an exporter can hold: `logits`, else its first tensor (a
    transformers output also carries a KV cache object, which neither exporter takes)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        out = self.model(*args)
        if isinstance(out, torch.Tensor):
            return out
        logits = getattr(out, "logits", None)
        return logits if isinstance(logits, torch.Tensor) else out[0]


@dataclass(frozen=True)
class Exported:
    path: Path
    exporter: str  # "torchscript" or "dynamo"


def export(entry: ZooModel, folder: Path) -> Exported:
    """The architecture at its zoo inputs (static shapes, opset 18), with the TorchScript
    exporter, else dynamo; re-used when the file exists. Raises the dynamo exporter's error
    when neither exports."""
    for exporter in ("torchscript", "dynamo"):
        path = folder / f"{entry.name}.{exporter}.onnx"
        if path.exists():
            return Exported(path, exporter)
    torch.manual_seed(0)
    model = FirstTensor(built(entry)).eval()
    inputs = tuple(random_inputs([parse_tensor_spec(t) for t in entry.inputs], "cpu"))
    path = folder / f"{entry.name}.torchscript.onnx"
    try:
        exported = _export(model, inputs, path, False)
        # a file onnx's strict inference refuses, onnxruntime refuses too (Mamba-2's
        # TorchScript export: a Transpose whose perm does not fit its input)
        onnx.shape_inference.infer_shapes(onnx.load(str(path)), strict_mode=True)
        return exported
    except Exception:  # noqa: BLE001 (the TorchScript exporter fails on some: try dynamo)
        path.unlink(missing_ok=True)
        return _export(model, inputs, folder / f"{entry.name}.dynamo.onnx", True)


def _export(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], path: Path,
            dynamo: bool) -> Exported:
    names = [f"input_{i}" for i in range(len(inputs))]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the exporters' deprecation and tracer notices
        torch.onnx.export(model, inputs, str(path), dynamo=dynamo, opset_version=18,
                          input_names=names, output_names=["out"], external_data=False)
    return Exported(path, "dynamo" if dynamo else "torchscript")


@dataclass(frozen=True)
class OrtRow:
    name: str
    exporter: str
    level: str
    predicted_bytes: int  # graphmem's ort-cpu mem_in_use_peak above the weights
    measured_bytes: int  # onnxruntime's, one thread

    @property
    def error(self) -> float:
        return self.predicted_bytes / self.measured_bytes - 1 if self.measured_bytes else 0.0


def measure(entry: ZooModel, folder: Path, level: str) -> OrtRow:
    exported = export(entry, folder)
    predicted, measured = measure_all(exported.path, None, level)
    return OrtRow(entry.name, exported.exporter, level, predicted, measured)


def run_counts(path: Path, folder: Path, seed: int = 0) -> dict[str, int]:
    """{each NonZero output tensor of `path`: its count} in one onnxruntime run (every
    optimization off) at the inputs verify makes up at `seed`: what the router chose."""
    import numpy as np
    import onnxruntime as ort

    from graphmem.api import analyze_onnx
    from graphmem.verify.onnx_run import input_specs
    from graphmem.verify.runners.onnxruntime_runner import random_feeds

    model = onnx.load(str(path))
    names = [n.output[0] for n in model.graph.node if n.op_type == "NonZero"]
    known = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(name)
                              for name in names if name not in known)
    copy = folder / f"{path.stem}.counts.onnx"
    onnx.save(model, str(copy))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(copy), options, providers=["CPUExecutionProvider"])
    feeds = random_feeds(input_specs(analyze_onnx(path, plan=False)), seed)
    outputs = session.run(names, feeds)
    return {name: int(np.shape(out)[1]) for name, out in zip(names, outputs, strict=True)}
