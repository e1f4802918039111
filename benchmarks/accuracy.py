"""ONNX path: graphmem's predicted activation peak vs onnxruntime's measured one (CPU).

    python benchmarks/accuracy.py [--batches 1,8] [--seq 64] [--only vgg16,bert_base]
                                  [--out benchmarks/results/accuracy.md]

Models: every samples/*.onnx (a graph-only sample, whose external data file is not shipped,
runs with random weights written into a copy), then, exported here one at a time into a
temporary folder (TorchScript exporter, opset 17, dynamic batch): the CNN zoo of
tests/cnn_zoo.py (VGG-16, SqueezeNet 1.1, DenseNet-121, Inception-v3 at 299, EfficientNet-B0,
ConvNeXt-T), ResNet-18 and MobileNetV2 from tests/models.py, and BERT-base and GPT-2 from
Hugging Face transformers (default configs, random weights). Each runs through
`graphmem.verify.onnx_run.verify_onnx` at each batch (token models at seq = --seq): one
onnxruntime run with ORT_DISABLE_ALL (the graph graphmem analyzed) and one with
ORT_ENABLE_ALL, each against graphmem's ORT-CPU model at that level. The table goes to stdout
and, with the date and machine, to --out.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `python benchmarks/accuracy.py` finds tests/ and graphmem/

from graphmem.errors import GraphmemError  # noqa: E402 (needs the path above)
from graphmem.verify.onnx_run import Verification, percent_error, verify_onnx  # noqa: E402
from graphmem.verify.runners.onnxruntime_runner import (  # noqa: E402
    MeasuredRun,
    check_external_data,
    with_random_weights,
)

if TYPE_CHECKING:
    import torch

    from graphmem.runtime_models.base import RuntimeEstimate

DATE = "2026-11-23"
MACHINE = f"2 cores, no GPU, onnxruntime {ort.__version__} CPU"


def cpu_line() -> str:
    """The CPU and whether it has AVX-512F: onnxruntime's NCHWc block is 16 channels with it,
    8 with AVX2 only, which changes the ENABLE_ALL graphs of the CNNs."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown CPU"
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                  if line.startswith("model name")), "unknown CPU")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines()
                  if line.startswith("flags")), [])
    return f"{model}, {'AVX-512F: NCHWc block 16' if 'avx512f' in flags else 'NCHWc block 8'}"


@dataclass(frozen=True)
class Case:
    name: str
    path: Path


def wanted(name: str, only: tuple[str, ...]) -> bool:
    """`--only`: no prefixes run every case."""
    return not only or name.startswith(only)


def sample_cases(folder: Path, notes: list[str], only: tuple[str, ...] = ()) -> list[Case]:
    """Every sample; a graph-only one (external weights not shipped) runs with random weights
    written inline into a copy in `folder` (memory does not depend on the values)."""
    cases = []
    for path in sorted((ROOT / "samples").glob("*.onnx")):
        name = path.name.removesuffix(".onnx")
        if not wanted(name, only):
            continue
        try:
            check_external_data(path)
        except GraphmemError:
            copy_folder = folder / name
            copy_folder.mkdir()
            path = with_random_weights(path, copy_folder)
            notes.append(f"`samples/{name}.onnx` is graph only: run with random weights")
            name += " (random weights)"
        cases.append(Case(name, path))
    return cases


def exported_cases(folder: Path, notes: list[str], only: tuple[str, ...] = ()
                   ) -> Iterator[Case]:
    """The CNN zoo (tests/cnn_zoo.py, and ResNet-18 and MobileNetV2 from tests/models.py) and
    BERT and GPT-2 (Hugging Face, random weights from their base configs), exported with the
    TorchScript exporter (opset 17, dynamic batch, and seq for the transformers) one at a time
    into `folder`; each file is deleted once its rows are measured."""
    try:
        import torch

        from tests import cnn_zoo, models
    except ImportError as error:
        notes.append(f"no models exported from tests/ ({error})")
        return
    warnings.filterwarnings("ignore")
    cnns = [("vgg16", cnn_zoo.VGG16, 224), ("squeezenet1_1", cnn_zoo.SqueezeNet11, 224),
            ("densenet121", cnn_zoo.DenseNet121, 224),
            ("inception_v3", lambda: cnn_zoo.InceptionV3(aux_logits=False), 299),
            ("efficientnet_b0", cnn_zoo.EfficientNetB0, 224),
            ("convnext_tiny", cnn_zoo.ConvNeXtTiny, 224),
            ("resnet18", models.ResNet18, 224), ("mobilenet_v2", models.MobileNetV2, 224)]
    for name, build, side in cnns:
        if not wanted(name, only):
            continue
        path = folder / f"{name}.onnx"
        torch.onnx.export(_distinct_weights(build().eval()),
                          (torch.randn(1, 3, side, side),), str(path), dynamo=False,
                          opset_version=17, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
        yield Case(f"{name} (exported)", path)
        path.unlink()
    yield from transformer_cases(folder, notes, only)


def _distinct_weights(model: torch.nn.Module) -> torch.nn.Module:
    """Random values in every float tensor, distinct as trained weights are (the exporter
    merges initializers of equal value, which untrained constant-initialized ones would be)."""
    import torch

    torch.manual_seed(0)
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.is_floating_point():
                tensor.copy_(torch.rand_like(tensor) + 0.5)
    return model


def transformer_cases(folder: Path, notes: list[str], only: tuple[str, ...] = ()
                      ) -> Iterator[Case]:
    """BERT-base (BertForSequenceClassification) and GPT-2 (GPT2LMHeadModel, no KV cache) from
    their default configs with random weights, transformers' default attention, called with
    input_ids and attention_mask [batch, seq] and returning the logits."""
    try:
        import torch
        from transformers import (
            BertConfig,
            BertForSequenceClassification,
            GPT2Config,
            GPT2LMHeadModel,
        )
    except ImportError as error:
        notes.append(f"no transformers exported ({error})")
        return

    class Logits(torch.nn.Module):
        def __init__(self, model: torch.nn.Module, options: dict[str, bool]) -> None:
            super().__init__()
            self.model, self.options = model, options

        def forward(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids, attention_mask=mask, return_dict=False,
                              **self.options)[0]

    for name, build, options, logits_axes in (
            ("bert_base", lambda: BertForSequenceClassification(BertConfig()), {}, {0: "batch"}),
            ("gpt2", lambda: GPT2LMHeadModel(GPT2Config()), {"use_cache": False},
             {0: "batch", 1: "seq"})):
        if not wanted(name, only):
            continue
        torch.manual_seed(0)
        model = Logits(build(), options).eval()
        ids = torch.randint(0, 100, (1, 16))
        path = folder / f"{name}.onnx"
        names = ["input_ids", "attention_mask"]
        axes = {n: {0: "batch", 1: "seq"} for n in names} | {"logits": logits_axes}
        torch.onnx.export(model, (ids, torch.ones_like(ids)), str(path), dynamo=False,
                          opset_version=17, input_names=names, output_names=["logits"],
                          dynamic_axes=axes)
        del model
        yield Case(f"{name} (exported)", path)
        path.unlink()


def dims_for(case: Case, batch: int, seq: int) -> dict[str, int]:
    from graphmem.frontends.onnx.importer import import_onnx

    names = import_onnx(case.path).graph.input_dims_in_order()
    return {name: (batch if i == 0 else seq) for i, name in enumerate(names)}


def rows(cases: Iterable[Case], batches: list[int], seq: int) -> Iterator[str]:
    for case in cases:
        for batch in batches:
            dims = dims_for(case, batch, seq)
            result = verify_onnx(case.path, dims=dims)
            yield row(case, dims, result)


def row(case: Case, dims: dict[str, int], result: Verification) -> str:
    measured = result.measured
    optimized = result.optimized.activation_peak_bytes if result.optimized else 0
    in_order = result.predicted_in_runtime_order_bytes
    equal = sum(1 for n in result.nodes if n.matches)
    model = result.runtime
    all_run, all_model = result.optimized, result.runtime_optimized
    cells = [
        case.name, ", ".join(f"{k}={v}" for k, v in dims.items()),
        _bytes(all_run.peak_bytes if all_run else None),
        _bytes(all_model.runtime_peak_bytes if all_model else None),
        f"**{_pct(result.runtime_model_optimized_error_pct)}**",
        *_own_peak_cells(all_run, all_model),
        f"{measured.peak_bytes:,}", _bytes(model.runtime_peak_bytes if model else None),
        f"**{_pct(result.runtime_model_error_pct)}**",
        f"{measured.activation_peak_bytes:,}", _bytes(result.runtime_model_activation_bytes),
        f"**{_pct(result.runtime_model_activation_error_pct)}**",
        f"{measured.arena_held_bytes:,}", _bytes(model.arena_held_bytes if model else None),
        f"{result.predicted_activation_peak_bytes:,}", _pct(result.error_pct),
        f"{in_order:,}" if in_order is not None else "-",
        f"{measured.max_requested_at_node_end_bytes:,}", _pct(result.runtime_order_error_pct),
        f"{optimized:,}",
        _pct(percent_error(result.predicted_activation_peak_bytes, optimized)),
        f"{equal}/{len(result.nodes)}",
    ]
    return "| " + " | ".join(cells) + " |"


def _own_peak_cells(run: MeasuredRun | None, model: RuntimeEstimate | None) -> list[str]:
    """ENABLE_ALL's peak less the weights in the arena, measured and modelled, and the error:
    the run's own allocations, which the weights (BERT-base: 342 MB) would hide."""
    if run is None or model is None:
        return ["-", "-", "-"]
    predicted = model.runtime_peak_bytes - model.runtime_weights_bytes
    error = percent_error(predicted, run.activation_peak_bytes)
    return [f"{run.activation_peak_bytes:,}", f"{predicted:,}", f"**{_pct(error)}**"]


def _bytes(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


HEADER = [
    "| model | dims | ORT mem_in_use_peak (ENABLE_ALL, default) | graphmem ORT-CPU model"
    " (ENABLE_ALL) | error"
    " | ORT peak - weights (ENABLE_ALL) | graphmem model - weights (ENABLE_ALL) | error"
    " | ORT mem_in_use_peak | graphmem ORT-CPU model | error"
    " | ORT peak - weights | graphmem model - weights | error"
    " | ORT mem_arena_held | graphmem arena held"
    " | graphmem live-tensor peak | error vs peak - weights | graphmem in ORT's order"
    " | ORT requested at kernel end | error, same order"
    " | ORT peak - weights (ENABLE_ALL) | error vs live peak | node outputs equal |",
    "|---|---|" + "---:|" * 22,
]

EXPLANATION = """\
Bytes. The first six columns are the session users run, ORT_ENABLE_ALL (onnxruntime's
default): its measured `mem_in_use_peak` against `memory.runtime_peak_bytes` of `graphmem
analyze --runtime ort-cpu` (default `--ort-optimization all`), which plans the graph
onnxruntime saves after optimizing the model at that level (graphmem/frontends/onnx/
ort_optimized.py: fusions, constant folding, the NCHWc layout, in the order the optimized
session runs its nodes); then the same less the weights in the arena before the first kernel
(measured) and less `runtime_weights_bytes` (graphmem): the run's own allocations, which
large weights would hide. The other columns are ORT_DISABLE_ALL unless said.
*ORT mem_in_use_peak*: onnxruntime's profiler's `mem_in_use_peak` (the CPU arena's high-water
mark, max over the kernel events); *graphmem ORT-CPU model*: `memory.runtime_peak_bytes` with
`--runtime ort-cpu --ort-optimization disabled` (graphmem/runtime_models/ort_cpu.py); *error* =
(graphmem - ORT) / ORT. *ORT peak - weights*: the same less the bytes in use before the first
kernel ran (the weights onnxruntime prepacked or copied into its arena), against graphmem's
prediction less its predicted weights (`memory.runtime.runtime_weights_bytes`): the run's own
allocations, the harder half. *mem_arena_held*: what the arena holds (regions and weights), against
`memory.runtime.arena_held_bytes`. *graphmem live-tensor peak*: `memory.activation_peak_bytes`,
the ideal peak (every tensor freed at its last use, model order, inputs and weights left out),
with its error against the peak - weights. *graphmem in ORT's order*: the live-tensor peak
replayed in the order onnxruntime ran the kernels. *ORT requested at kernel end*: the largest
`mem_bytes_requested_in_use` after a kernel, less the same weights (no arena rounding, no
scratch that lives inside one kernel).
*node outputs equal*: kernels whose `output_size` equals graphmem's output bytes for that node
(ORT_DISABLE_ALL, matched by name).

What the ORT-CPU model reproduces (onnxruntime 1.31 source, checked by these runs):
- the execution order: a reverse depth-first walk from the leaf nodes (`GraphViewer`), not the
  file's order;
- the allocation plan: views for Reshape/Squeeze/Unsqueeze/Flatten/Identity, in place for
  Relu, Sigmoid, Tanh, Softmax, Clip, Cast... (not Add or Mul) where the input dies and both
  shapes are equal as onnxruntime infers them at session creation, and reuse of a freed buffer
  whose inferred shape is equal dim by dim. A reused buffer is freed only after its last
  tensor, so on the dynamo exports (which carry every shape) buffers wait, held, for the next
  layer's tensor of the same shape: tiny_gpt.dynamo holds 2.4x its live-tensor peak. The
  TorchScript exports leave most shapes unknown to onnxruntime, so there it frees at last use;
- the BFC arena: 256-byte rounding, a free chunk handed out whole when it is less than twice
  the request, coalescing, regions of 1 MiB doubling;
- kernel scratch: Conv's im2col buffer (16,384 floats per thread used, by MlasConvPrepare's
  rules), Where's two broadcast selections, and the (x + bias) / 2 buffer of the input's size
  that com.microsoft BiasGelu (and FastGelu with a bias) holds while it runs (BERT's and
  ConvNeXt's MLPs at ENABLE_ALL: without it BERT came out 10-16% low).

- the weights in the arena before the run: MatMul/Gemm weights prepacked for MLAS's SGEMM (N
  rounded up to 16 columns, x K x 4 bytes, 64-byte aligned) and initializers of 127 bytes or
  less, which onnxruntime copies (larger ones it uses in place, uncounted).

- at ORT_ENABLE_ALL: the optimized graph as onnxruntime saves it, shaped through standard
  stand-ins for its contrib ops, its node list taken as the execution order, and
  com.microsoft.nchwc Conv writing its output over its fused residual input (MayInplace).
  The NCHWc reorders are shaped from their input's inferred shape, in rounds until no more
  become known: a squeeze-excitation block's ReorderInput reads a plain Mul of two
  ReorderOutputs (EfficientNet-B0), ConvNeXt's Transposes around its LayerNorm become
  channels-last ReorderOutput/ReorderInput, and nchwc Upsample is a Resize by its scales.
  Before that those tensors had no shape and counted 0 bytes: EfficientNet-B0 and ConvNeXt-T
  at batch 8 came out 65% and 61% low.

Not modelled: the memory pattern onnxruntime builds for later runs of the same shapes (each
measurement is the first run of a fresh session); and where the arena has free chunks of
equal size, onnxruntime takes the lowest address, so the one in the region malloc placed
lower, which depends on what the process allocated before: graphmem lays regions out in the
order they are created. The runs here are exact that way, but a tiny GPT-2 (2 layers, 128
wide, batch 8, seq 64, tensors as small as the arena's first regions) measured 6,319,160 B in
a fresh process and 6,024,248 B after some CNN runs (graphmem: 6,319,160 B)."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--seq", type=int, default=64, help="seq for token models")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/accuracy.md")
    parser.add_argument("--only", default="", help="comma-separated case name prefixes"
                        " (vgg16,bert_base...): run only those")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    notes: list[str] = []
    lines = [f"# ONNX path: predicted vs measured activation peak ({DATE}, {MACHINE})", "",
             f"`python benchmarks/accuracy.py` on {platform.machine()} Linux ({cpu_line()}),"
             f" Python {platform.python_version()}; intra-op threads: onnxruntime's default.",
             ""]
    only = tuple(n for n in args.only.split(",") if n)
    with tempfile.TemporaryDirectory(prefix="graphmem-accuracy-") as folder:
        cases = chain(sample_cases(Path(folder), notes, only),
                      exported_cases(Path(folder), notes, only))
        print("\n".join(lines + HEADER), flush=True)
        table = []
        for line in rows(cases, batches, args.seq):
            print(line, flush=True)
            table.append(line)
    lines += HEADER + table + [""] + [f"- {note}" for note in notes] + ["", EXPLANATION, ""]
    for note in notes:
        print(f"- {note}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
