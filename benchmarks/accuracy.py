"""ONNX path: graphmem's predicted activation peak vs onnxruntime's measured one (CPU).

    python benchmarks/accuracy.py [--batches 1,8] [--seq 64] [--out benchmarks/results/accuracy.md]

Models: every samples/*.onnx whose weights are there (graph-only samples, whose external data
file is not shipped, are skipped with a note), plus ResNet-18 and MobileNetV2 from
tests/models.py exported here (TorchScript exporter, opset 17, dynamic batch) into a temporary
folder. Each runs through `graphmem.verify.onnx_run.verify_onnx` at each batch (token models at
seq = --seq): one onnxruntime run with ORT_DISABLE_ALL (the graph graphmem analyzed) and one
with ORT_ENABLE_ALL, each against graphmem's ORT-CPU model at that level. The table goes to
stdout and, with the date and machine, to --out.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `python benchmarks/accuracy.py` finds tests/ and graphmem/

from graphmem.errors import GraphmemError  # noqa: E402 (needs the path above)
from graphmem.verify.onnx_run import Verification, percent_error, verify_onnx  # noqa: E402
from graphmem.verify.runners.onnxruntime_runner import (  # noqa: E402
    check_external_data,
    with_random_weights,
)

DATE = "2026-11-23"
MACHINE = f"2 cores, no GPU, onnxruntime {ort.__version__} CPU"


@dataclass(frozen=True)
class Case:
    name: str
    path: Path


def sample_cases(folder: Path, notes: list[str]) -> list[Case]:
    """Every sample; a graph-only one (external weights not shipped) runs with random weights
    written inline into a copy in `folder` (memory does not depend on the values)."""
    cases = []
    for path in sorted((ROOT / "samples").glob("*.onnx")):
        name = path.name.removesuffix(".onnx")
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


def exported_cases(folder: Path, notes: list[str]) -> list[Case]:
    """ResNet-18 and MobileNetV2 from tests/models.py, exported with a dynamic batch."""
    try:
        import torch

        from tests import models
    except ImportError as error:
        notes.append(f"no models exported from tests/models.py ({error})")
        return []
    warnings.filterwarnings("ignore")
    cases = []
    for name, build in (("resnet18 (exported)", models.ResNet18),
                        ("mobilenet_v2 (exported)", models.MobileNetV2)):
        torch.manual_seed(0)
        model = build().eval()
        path = folder / f"{name.split()[0]}.onnx"
        torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), str(path), dynamo=False,
                          opset_version=17, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
        cases.append(Case(name, path))
    return cases


def dims_for(case: Case, batch: int, seq: int) -> dict[str, int]:
    from graphmem.frontends.onnx.importer import import_onnx

    names = import_onnx(case.path).graph.input_dims_in_order()
    return {name: (batch if i == 0 else seq) for i, name in enumerate(names)}


def rows(cases: list[Case], batches: list[int], seq: int) -> Iterator[str]:
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


def _bytes(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


HEADER = [
    "| model | dims | ORT mem_in_use_peak (ENABLE_ALL, default) | graphmem ORT-CPU model"
    " (ENABLE_ALL) | error"
    " | ORT mem_in_use_peak | graphmem ORT-CPU model | error"
    " | ORT peak - weights | graphmem model - weights | error"
    " | ORT mem_arena_held | graphmem arena held"
    " | graphmem live-tensor peak | error vs peak - weights | graphmem in ORT's order"
    " | ORT requested at kernel end | error, same order"
    " | ORT peak - weights (ENABLE_ALL) | error vs live peak | node outputs equal |",
    "|---|---|" + "---:|" * 19,
]

EXPLANATION = """\
Bytes. The first three columns are the session users run, ORT_ENABLE_ALL (onnxruntime's
default): its measured `mem_in_use_peak` against `memory.runtime_peak_bytes` of `graphmem
analyze --runtime ort-cpu` (default `--ort-optimization all`), which plans the graph
onnxruntime saves after optimizing the model at that level (graphmem/frontends/onnx/
ort_optimized.py: fusions, constant folding, the NCHWc layout, in the order the optimized
session runs its nodes). The other columns are ORT_DISABLE_ALL unless said.
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
  rules) and Where's two broadcast selections.

- the weights in the arena before the run: MatMul/Gemm weights prepacked for MLAS's SGEMM (N
  rounded up to 16 columns, x K x 4 bytes, 64-byte aligned) and initializers of 127 bytes or
  less, which onnxruntime copies (larger ones it uses in place, uncounted).

- at ORT_ENABLE_ALL: the optimized graph as onnxruntime saves it, shaped through standard
  stand-ins for its contrib ops, its node list taken as the execution order, and
  com.microsoft.nchwc Conv writing its output over its fused residual input (MayInplace).

Not modelled: the memory pattern onnxruntime builds for later runs of the
same shapes. Each measurement is the first run of a fresh session."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--seq", type=int, default=64, help="seq for token models")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/accuracy.md")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    notes: list[str] = []
    lines = [f"# ONNX path: predicted vs measured activation peak ({DATE}, {MACHINE})", "",
             f"`python benchmarks/accuracy.py` on {platform.machine()} Linux, Python"
             f" {platform.python_version()}; intra-op threads: onnxruntime's default.", ""]
    with tempfile.TemporaryDirectory(prefix="graphmem-accuracy-") as folder:
        cases = sample_cases(Path(folder), notes) + exported_cases(Path(folder), notes)
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
