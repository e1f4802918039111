"""How fast graphmem analyzes large ONNX graphs, and how much memory it takes, next to
onnx's shape inference and onnx-tool's profiler on the same files.

    python benchmarks/speed.py [--quick] [--repeat 3] [--output benchmarks/results/speed.md]

Graphs (benchmarks/llama_graph.py; no torch):
- Llama-3-70B shapes at 2, 8, 32 and 80 layers (80 is the real model: about 20,000 nodes),
  weights never written: the graph points at a `.data` file that does not exist;
- the same decoder at narrow width (hidden 128) and 80 layers, weights written (30 MB), so
  that every tool can run on the same node count;
- Llama-2-7B widths at 2 layers, weights written (1.3 GB), to show which tools' memory
  grows with the weights;
- every samples/*.onnx shipped with the project (batch 1, seq 128 where it has a seq dim).

Each measurement runs in a fresh process: seconds are CPU seconds (the machines this runs on
are shared: wall time would measure the neighbours too), the tool's call inside it (median
over `--repeat` processes, fewer when a run is slow), `process` the whole process's CPU
(interpreter, imports, the call), RSS the process's own peak resident set (VmHWM; not
ru_maxrss, which on Linux includes the parent's RSS from before the exec). `params` and
`MACs` compare the tool's parameter count and MatMul multiply-accumulates with the formulas
of llama_graph.py (`=` exact, else the tool's number).

- graphmem: `analyze_onnx(path, batch=1, dims={"seq": 2048})`, and with `--gpu h100` and the
  batch free (the largest-batch search) where noted;
- onnx: `onnx.shape_inference.infer_shapes` on the model loaded without external data, dims
  symbolic; `unknown` counts node outputs left without a complete shape;
- onnx-tool: `onnx_tool.model_profile(path, {"input_ids": [1, 2048]})`'s steps (Model, shape
  inference, profile) with the same exclusions as model_profile; when it cannot load a model
  the reason is in the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from llama_graph import (  # noqa: E402 - after the path set-up
    PRESETS,
    LlamaConfig,
    build_llama,
    data_file,
    matmul_macs,
    parameter_count,
    write_model,
)

BATCH, SEQ = 1, 2048
SAMPLE_SEQ = 128  # the shipped samples' position tables are short
SLOW_RUN_S = 5.0  # a run slower than this is not repeated
TIMEOUT_S = 900


# ----- the measurements, each in its own process -----------------------------------------------
def _child_graphmem(path: str, seq: int, gpu: str | None) -> dict[str, Any]:
    from graphmem import analyze_onnx

    dims = {"seq": seq} if seq else {}
    start = time.process_time()
    if gpu:
        analysis = analyze_onnx(path, dims=dims, gpu=gpu)
    else:
        analysis = analyze_onnx(path, batch=BATCH, dims=dims)
    seconds = time.process_time() - start
    costs = analysis.costs
    result: dict[str, Any] = {
        "seconds": seconds,
        "params": analysis.params.count,
        # with the batch free (the --gpu run) MACs are formulas in it: evaluate at BATCH
        "matmul_macs": sum(n.macs.evaluate({"batch": BATCH, **dims})
                           for n in costs.nodes if n.op_type == "MatMul"),
        "unsupported": costs.unsupported_ops,
        "unknown": len(costs.shape_unknown_nodes),
        "warnings": list(analysis.model.warnings),
        "shape_inference": analysis.model.shape_inference,
    }
    if analysis.max_batch is not None:
        result["max_batch"] = analysis.max_batch.max_batch
    return result


def _child_onnx(path: str) -> dict[str, Any]:
    import onnx

    start = time.process_time()
    model = onnx.load(path, load_external_data=False)
    inferred = onnx.shape_inference.infer_shapes(model)
    seconds = time.process_time() - start
    known = {v.name for v in (*inferred.graph.value_info, *inferred.graph.output)
             if _complete(v)}
    outputs = [o for n in inferred.graph.node for o in n.output if o]
    return {"seconds": seconds, "unknown": sum(1 for o in outputs if o not in known)}


def _complete(info: Any) -> bool:
    # `unk__3` is how onnx (and onnxruntime) name a dim they could not infer
    tensor_type = info.type.tensor_type
    return tensor_type.HasField("shape") and all(
        d.HasField("dim_value") or (d.dim_param and not d.dim_param.startswith("unk__"))
        for d in tensor_type.shape.dim)


def _child_onnx_tool(path: str, seq: int) -> dict[str, Any]:
    # model_profile's own steps, to read its totals back instead of parsing its printout.
    import onnx
    import onnx_tool

    shapes = _input_shapes(onnx.load(path, load_external_data=False), {"batch": BATCH,
                                                                        "seq": seq})
    start = time.process_time()
    try:
        model = onnx_tool.Model(path, {"verbose": False})
    except Exception as error:  # noqa: BLE001 - the reason goes into the table
        reason = f"Model(path): {_first_line(error)}"
        try:  # the model without its weights, as graphmem reads it
            model = onnx_tool.Model(onnx.load(path, load_external_data=False),
                                    {"verbose": False})
        except Exception as second:  # noqa: BLE001
            return {"error": f"{reason}; Model(proto without data): {_first_line(second)}"}
    graph = model.graph
    graph.graph_reorder_nodes()
    graph.shape_infer(shapes)
    graph.profile(exclude_ops=onnx_tool.NoMacsOps)
    seconds = time.process_time() - start
    matmul = sum(int(n.macs[0]) for n in graph.nodemap.values() if n.op_type == "MatMul")
    return {"seconds": seconds, "params": int(graph.params), "matmul_macs": matmul}


def _input_shapes(model: Any, dims: dict[str, int]) -> dict[str, Any]:
    """onnx-tool needs every input shape concrete: the dims bound, as graphmem binds them."""
    import numpy as np
    import onnx_tool

    weights = {t.name for t in model.graph.initializer}
    shapes = {}
    for value in model.graph.input:
        if value.name in weights:
            continue
        dims_of = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 1)
                   for d in value.type.tensor_type.shape.dim]
        shapes[value.name] = onnx_tool.create_ndarray_int64(np.array(dims_of))
    return shapes


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:200]


def child_main(tool: str, path: str, seq: int) -> None:
    data = data_file(path)
    existed = data.exists()
    if tool == "graphmem":
        result = _child_graphmem(path, seq, None)
    elif tool == "graphmem-gpu":
        result = _child_graphmem(path, seq, "h100")
    elif tool == "onnx":
        result = _child_onnx(path)
    else:
        result = _child_onnx_tool(path, seq)
    if not existed and data.exists():
        result["error"] = f"{tool} wrote {data}"
    result["peak_rss_bytes"] = _peak_rss_bytes()
    print(json.dumps(result))


def _peak_rss_bytes() -> int:
    """This process's own peak RSS (VmHWM).

    Not getrusage's ru_maxrss: on Linux it carries over the RSS of the forked copy of the
    parent from before the exec, so a child of a large parent would look large.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ----- the parent: runs, medians, the table --------------------------------------------------
@dataclass
class Run:
    seconds: float | None
    process_s: float
    rss_bytes: int
    data: dict[str, Any]


def run_child(tool: str, path: Path, seq: int) -> Run:
    """One fresh process; its answer (and its peak RSS) from its last stdout line."""
    command = [sys.executable, __file__, "--child", tool, str(path), str(seq)]
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        timer = threading.Timer(TIMEOUT_S, process.kill)
        timer.start()
        _, status, usage = os.wait4(process.pid, 0)
        timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        process_s = usage.ru_utime + usage.ru_stime  # the child's CPU, imports and all
        out.seek(0)
        text = out.read().decode(errors="replace").strip()
    try:
        data = json.loads(text.splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        tail = text.splitlines()[-1] if text else f"exit code {process.returncode}"
        data = {"error": f"crashed: {tail[:200]}"}
    # a crashed child reports nothing: wait4's ru_maxrss (KiB, an upper bound) stands in
    rss = data.get("peak_rss_bytes", usage.ru_maxrss * 1024)
    return Run(data.get("seconds"), process_s, rss, data)


@dataclass
class Measured:
    runs: list[Run] = field(default_factory=list)

    @property
    def data(self) -> dict[str, Any]:
        return self.runs[0].data

    def cell(self) -> str:
        if "error" in self.data:
            return f"fails: {self.data['error']}"
        seconds = statistics.median(r.seconds for r in self.runs if r.seconds is not None)
        process = statistics.median(r.process_s for r in self.runs)
        return f"{seconds:.2f} s ({process:.1f} s)"

    def rss(self) -> str:
        return f"{max(r.rss_bytes for r in self.runs) / 2**20:,.0f} MiB"


def measure(tool: str, path: Path, seq: int, repeat: int) -> Measured:
    measured = Measured()
    for _ in range(repeat):
        run = run_child(tool, path, seq)
        measured.runs.append(run)
        if "error" in run.data or run.process_s > SLOW_RUN_S:
            break
    return measured


@dataclass(frozen=True)
class Case:
    label: str
    make: Callable[[Path], Path]  # writes the model into a folder, returns its path
    config: LlamaConfig | None = None  # for the checks against the formulas
    tools: tuple[str, ...] = ("graphmem", "onnx", "onnx-tool")
    seq: int = SEQ  # bound by graphmem and onnx-tool; 0: the model has no `seq` dim


def _never_written(name: str, config: LlamaConfig) -> Callable[[Path], Path]:
    return lambda folder: write_model(folder / f"{name}.onnx", config)


def _with_weights(name: str, config: LlamaConfig) -> Callable[[Path], Path]:
    """The same graph with zero weights in a real `.data` file, written a tensor at a time."""

    def make(folder: Path) -> Path:
        import numpy as np
        import onnx
        from onnx import helper

        path = folder / f"{name}.onnx"
        model = build_llama(config, data_file=path.name + ".data")
        with data_file(path).open("wb") as out:
            for tensor in model.graph.initializer:
                dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
                count = int(np.prod(list(tensor.dims)))
                chunk = np.zeros(min(count, 2**24), dtype).tobytes()
                for done in range(0, count, 2**24):
                    out.write(chunk[: min(2**24, count - done) * dtype.itemsize])
        onnx.save_model(model, str(path))
        return path

    return make


def cases(quick: bool) -> list[Case]:
    big = PRESETS["llama3-70b"]
    narrow = LlamaConfig(layers=80, hidden=128, heads=4, kv_heads=1, intermediate=384,
                         vocab=1000)
    layer_counts = (2, 8) if quick else (2, 8, 32, 80)
    found = [
        Case(f"Llama-3-70B shapes, {n} layers, no weights",
             _never_written(f"llama70b_{n}", replace(big, layers=n)), replace(big, layers=n),
             ("graphmem", "onnx", "onnx-tool") + (("graphmem-gpu",) if n == 80 else ()))
        for n in layer_counts
    ]
    narrow_layers = 8 if quick else 80
    found.append(Case(f"narrow (hidden 128), {narrow_layers} layers, weights written",
                      _with_weights(f"narrow_{narrow_layers}",
                                    replace(narrow, layers=narrow_layers)),
                      replace(narrow, layers=narrow_layers)))
    if not quick:
        seven = replace(PRESETS["llama2-7b"], layers=2)
        found.append(Case("Llama-2-7B widths, 2 layers, weights written (1.3 GB)",
                          _with_weights("llama7b_2", seven), seven))
    for sample in sorted((ROOT / "samples").glob("*.onnx")):
        found.append(Case(f"samples/{sample.name}", lambda _folder, s=sample: s,
                          seq=SAMPLE_SEQ if _has_dim(sample, "seq") else 0))
    return found


def _has_dim(path: Path, name: str) -> bool:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return any(d.dim_param == name for v in model.graph.input
               for d in v.type.tensor_type.shape.dim)


def _check(tool_data: dict[str, Any], config: LlamaConfig | None) -> str:
    if config is None or "error" in tool_data or "params" not in tool_data:
        return ""
    params = "=" if tool_data["params"] == parameter_count(config) else (
        f"{tool_data['params']:,}")
    macs = "=" if tool_data["matmul_macs"] == matmul_macs(config, BATCH, SEQ) else (
        f"{tool_data['matmul_macs']:,}")
    return f"params {params}, MACs {macs}"


def _graphmem_notes(data: dict[str, Any]) -> str:
    if "error" in data:
        return ""
    notes = []
    if data["unsupported"]:
        notes.append(f"unsupported {data['unsupported']}")
    if data["unknown"]:
        notes.append(f"{data['unknown']} nodes of unknown shape")
    notes.extend(data["warnings"])
    return "; ".join(notes)


def run_all(quick: bool, repeat: int, folder: Path) -> tuple[list[str], list[str]]:
    import onnx

    rows, notes = [], []
    for case in cases(quick):
        path = case.make(folder)
        if not path.exists():  # a sample removed while the benchmark ran
            continue
        nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
        size = path.stat().st_size / 2**20
        results = {tool: measure(tool, path, case.seq, repeat) for tool in case.tools}
        cells = [case.label, f"{nodes:,}", f"{size:.1f} MiB"]
        for tool in ("graphmem", "onnx", "onnx-tool"):
            measured = results[tool]
            check = _check(measured.data, case.config)
            extra = (f"; {measured.data['unknown']:,} outputs unknown" if tool == "onnx"
                     and "error" not in measured.data else "")
            cells.append(measured.cell() + (f"; {check}" if check else "") + extra)
            cells.append(measured.rss() if "error" not in measured.data else "")
        rows.append("| " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
        note = _graphmem_notes(results["graphmem"].data)
        if note:
            notes.append(f"- {case.label}: graphmem: {note}")
        if "graphmem-gpu" in results:
            gpu = results["graphmem-gpu"]
            notes.append(f"- {case.label}: graphmem with `gpu='h100'`, batch free (largest"
                         f" batch search): {gpu.cell()}, {gpu.rss()}, max batch"
                         f" {gpu.data.get('max_batch')}")
    return rows, notes


HEADER = (
    "| graph | nodes | graph file | graphmem: call (process) | RSS | onnx infer_shapes |"
    " RSS | onnx-tool profile | RSS |\n|---|---:|---:|---|---:|---|---:|---|---:|"
)


def environment() -> str:
    import onnx
    import onnxruntime

    try:
        from importlib.metadata import version

        onnx_tool = version("onnx-tool")
    except Exception:  # noqa: BLE001
        onnx_tool = "not installed"
    import graphmem

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{date.today().isoformat()}; {platform.machine()}, {os.cpu_count()} cores,"
            f" {memory:.0f} GiB, no GPU; Python {platform.python_version()}, graphmem"
            f" {graphmem.__version__}, onnx {onnx.__version__}, onnxruntime"
            f" {onnxruntime.__version__}, onnx-tool {onnx_tool}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 and 8 layers only, one run")
    parser.add_argument("--repeat", type=int, default=3, help="processes per measurement")
    parser.add_argument("--output", type=Path, help="also write the table there (markdown)")
    parser.add_argument("--child", nargs=3, metavar=("TOOL", "PATH", "SEQ"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child[0], args.child[1], int(args.child[2]))
        return
    repeat = 1 if args.quick else args.repeat
    print(environment())
    print(f"batch {BATCH}, seq {SEQ}; seconds: median of up to {repeat} fresh processes\n")
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory() as folder:
        rows, notes = run_all(args.quick, repeat, Path(folder))
    print("\n" + "\n".join(notes))
    if args.output:
        text = "\n".join([environment(), "", HEADER, *rows, "", *notes, ""])
        args.output.write_text(text)


if __name__ == "__main__":
    main()
