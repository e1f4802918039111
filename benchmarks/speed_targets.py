"""The speed and memory targets of issue 17, measured in one run, each against its reference.

    python benchmarks/speed_targets.py [--skip-bert] [--output benchmarks/results/speed.md]

Every measurement is a fresh process. Seconds are CPU seconds (user + system, from wait4's
rusage of the child: the interpreter's start, imports and all), because the machines this
project runs on are shared and wall time there says more about the neighbours than about
graphmem; RSS is the child's own peak resident set (VmHWM, read by the child at its end).

- a 22,052-node decoder (Llama-2-7B widths, 140 layers, weights never written) analysed as
  users run it, `graphmem analyze X --batch 1 --dim seq=4096 --gpu a100-80gb` with JSON and
  HTML written, against onnx's `infer_shapes(data_prop=True)` on the same file, both whole
  processes (the issue's ratios are: its 13.6 s at 34x puts onnx's side at 0.40 s, onnx's
  whole process); the ratio to onnx's bare call is given beside it. Goal: within 10x, under
  5 s, under 1 GiB.
- the 80-layer Llama-3-70B graph (19,832 nodes): the Python call `analyze_onnx(path, batch=1,
  dims={"seq": 2048})` (the call's CPU seconds, as benchmarks/speed.py times it). Goal: 2 s.
- `graphmem analyze samples/resnet50.onnx --gpu t4 --batch 32`: the whole process. Goal: 1.5 s.
- a model with 1.19 GB of weights inside the file (Llama-2-7B widths, 1 layer, vocab 48,000):
  the command's peak RSS. Goal: under 300 MiB.
- `--suggest` on a BERT-base training step (transformers' BertForSequenceClassification at its
  default config: 12 layers, hidden 768; batch 8 x 128 tokens), the whole process. Goal: 30 s.
- issue 27: 22,000-node Llama-shaped decoders built three ways, each analysed as the first
  row's (`--batch 1 --dim seq=4096 --gpu a100-80gb`, JSON and HTML): written with onnx.helper
  (benchmarks/helper_llama.py: no exporter's names, grouped-query attention by Tile), and a
  PyTorch decoder exported by the TorchScript and the dynamo exporter
  (benchmarks/exported_llama.py; the exports are cached under benchmarks/.cache/). Each row
  gives the command's CPU seconds, peak RSS, how often it read and imported the file, and
  onnx's whole-process shape inference on the same file in the same run (`python -c "import
  onnx; onnx.shape_inference.infer_shapes(onnx.load(f, load_external_data=False))"`: the
  onnx.helper graph's weights are absent, the exports hold theirs inside the file). Goal:
  under 4 s, within 5x onnx's process, under 1 GiB, the file read and imported once.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import helper_llama  # noqa: E402 - after the path set-up
from exported_llama import cached_export  # noqa: E402
from llama_graph import PRESETS, build_llama, write_model  # noqa: E402

MiB = 2**20
TIMEOUT_S = 1200
BERT_LIMIT_S = 600  # wall seconds: the search re-traces the model per candidate

# The child: runs one measured thing, then writes its own numbers to the file in argv[1].
_CHILD = r"""
import json, sys, time
def peak_rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) * 1024
out, kind, args = sys.argv[1], sys.argv[2], sys.argv[3:]
result = {}
if kind == 'cli':
    from graphmem.cli.main import run_command  # the console script's entry
    sys.argv = ['graphmem', *args]
    try:
        result['exit'] = run_command()
    except SystemExit as done:  # --version, --help
        result['exit'] = done.code or 0
elif kind == 'cli-counted':  # the command, counting reads and imports of the model file
    from graphmem.frontends.onnx import importer, runtime_inputs
    read, imported = importer.read_model, runtime_inputs.import_onnx
    read_bodies = importer.read_model_bodies  # the importer's own read (with its bodies)
    result['reads'] = result['imports'] = 0
    def counted_read(path):
        result['reads'] += 1
        return read(path)
    def counted_read_bodies(path):
        result['reads'] += 1
        return read_bodies(path)
    def counted_import(*args, **kwargs):
        result['imports'] += 1
        return imported(*args, **kwargs)
    importer.read_model, runtime_inputs.import_onnx = counted_read, counted_import
    importer.read_model_bodies = counted_read_bodies
    from graphmem.cli.main import run_command
    sys.argv = ['graphmem', *args]
    result['exit'] = run_command()
elif kind == 'onnx-load':  # the issue's reference: onnx.load (weights inside the file and
    import onnx           # all; external data absent: not read) and onnx's shape inference
    onnx.shape_inference.infer_shapes(onnx.load(args[0], load_external_data=False))
elif kind == 'onnx':
    import onnx
    start = time.process_time()
    model = onnx.load(args[0], load_external_data=False)
    onnx.shape_inference.infer_shapes(model, data_prop=True)
    result['call_s'] = time.process_time() - start
elif kind == 'api':
    from graphmem import analyze_onnx
    start = time.process_time()
    analysis = analyze_onnx(args[0], batch=1, dims=json.loads(args[1]))
    result['call_s'] = time.process_time() - start
    result['peak_bytes'] = int(analysis.peak_bytes)
result['rss_bytes'] = peak_rss()
with open(out, 'w') as file:
    json.dump(result, file)
if kind.startswith('cli'):  # ended as the console script ends (cli/main.py console_script)
    from graphmem.core.collector import end_process
    end_process(0)
"""


@dataclass(frozen=True)
class Measured:
    cpu_s: float  # the whole child process, user + system
    rss_bytes: int
    data: dict[str, Any]


class TimedOut(RuntimeError):
    """The child ran past its limit and was stopped; `cpu_s` is what it had used."""

    def __init__(self, cpu_s: float) -> None:
        super().__init__(f"stopped after {cpu_s:.0f} CPU s")
        self.cpu_s = cpu_s


def measure(kind: str, *args: str, cwd: Path = ROOT, limit_s: float = TIMEOUT_S) -> Measured:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, "-c", _CHILD, out.name, kind, *args]
        # the bytecode cache on, as an installed package has it (benchmarks/startup.py: this
        # project's sessions set PYTHONDONTWRITEBYTECODE, and every module compiled at every
        # start is 0.2 to 0.4 s more per command)
        env = {key: value for key, value in os.environ.items()
               if key != "PYTHONDONTWRITEBYTECODE"}
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        timer = threading.Timer(limit_s, process.kill)
        timer.start()
        _, status, usage = os.wait4(process.pid, 0)
        timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode == -signal.SIGKILL:
            raise TimedOut(usage.ru_utime + usage.ru_stime)
        text = Path(out.name).read_text()
        if process.returncode != 0 or not text:
            raise RuntimeError(f"{kind} {' '.join(args)} failed (exit {process.returncode})")
        data = json.loads(text)
    if data.get("exit", 0) != 0:
        raise RuntimeError(f"graphmem {' '.join(args)} exited {data['exit']}")
    return Measured(usage.ru_utime + usage.ru_stime, data["rss_bytes"], data)


@dataclass(frozen=True)
class Row:
    target: str
    measured: str
    reference: str
    goal: str
    met: bool


def decoder_row(folder: Path, notes: list[str]) -> Row:
    path = write_model(folder / "decoder_22k.onnx", replace(PRESETS["llama2-7b"], layers=140))
    onnx_run = measure("onnx", str(path))
    run = measure("cli", "analyze", str(path), "--batch", "1", "--dim", "seq=4096", "--gpu",
                  "a100-80gb", "--json", str(folder / "d.json"), "--html",
                  str(folder / "d.html"))
    call = onnx_run.data["call_s"]
    # Both sides as whole processes (interpreter, imports, reading the file), as the issue
    # measured its ratios: its 13.6 s at 34x puts onnx's side at 0.40 s, onnx's whole process
    # here; the ratio to onnx's bare call (no interpreter, no import) is given beside it.
    ratio = run.cpu_s / onnx_run.cpu_s
    notes.append(f"- onnx's infer_shapes on the 22k-node decoder: {onnx_run.cpu_s:.2f} CPU s for"
                 f" its whole process (import of onnx and reading the file included), {call:.2f}"
                 f" s for the call alone; graphmem's whole process is {ratio:.1f}x the first,"
                 f" {run.cpu_s / call:.1f}x the second.")
    return Row("22,052-node decoder, `analyze --batch 1 --dim seq=4096 --gpu a100-80gb`, JSON"
               " + HTML, whole process",
               f"{run.cpu_s:.2f} s, {run.rss_bytes / MiB:,.0f} MiB ({ratio:.1f}x onnx's process,"
               f" {run.cpu_s / call:.1f}x its call)",
               f"onnx infer_shapes, whole process {onnx_run.cpu_s:.2f} s (call {call:.2f} s)",
               "within 10x, < 5 s, < 1 GiB",
               ratio <= 10 and run.cpu_s < 5 and run.rss_bytes < 2**30)


DECODER_NODES = 22_000  # about: each builder's layers are chosen to land near it


def three_decoder_rows(folder: Path, notes: list[str]) -> list[Row]:
    """The issue-27 decoders, built with onnx.helper, by TorchScript and by dynamo."""
    helper_path = helper_llama.write(folder / "helper_22k.onnx", helper_llama.WIDTHS)
    rows = [decoder_made_by("onnx.helper", helper_path)]
    for exporter, layers in (("torchscript", 134), ("dynamo", 150)):
        path, seconds = cached_export(exporter, layers)
        made = (f"exported now in {seconds:.0f} s wall" if seconds is not None
                else "from benchmarks/.cache/")
        notes.append(f"- the {exporter} export ({layers} layers): {made}.")
        rows.append(decoder_made_by(f"{exporter} export", path))
    return rows


def decoder_made_by(origin: str, path: Path) -> Row:
    import onnx

    nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
    reference = measure("onnx-load", str(path))
    with tempfile.TemporaryDirectory() as out:
        run = measure("cli-counted", "analyze", str(path), "--batch", "1", "--dim",
                      "seq=4096", "--gpu", "a100-80gb", "--json", f"{out}/d.json", "--html",
                      f"{out}/d.html")
    ratio = run.cpu_s / reference.cpu_s
    reads, imports = run.data["reads"], run.data["imports"]
    return Row(f"{nodes:,}-node decoder, {origin}, `analyze --batch 1 --dim seq=4096 --gpu"
               " a100-80gb`, JSON + HTML, whole process",
               f"{run.cpu_s:.2f} s, {run.rss_bytes / MiB:,.0f} MiB ({ratio:.1f}x onnx's"
               f" process); read {reads}x, imported {imports}x",
               f"onnx.load + infer_shapes, whole process {reference.cpu_s:.2f} s",
               "< 4 s, within 5x, < 1 GiB, read once",
               run.cpu_s < 4 and ratio <= 5 and run.rss_bytes < 2**30 and reads == imports == 1)


def llama70b_row(folder: Path, notes: list[str]) -> Row:
    path = write_model(folder / "llama70b_80.onnx", PRESETS["llama3-70b"])
    run = measure("api", str(path), json.dumps({"seq": 2048}))
    call = run.data["call_s"]
    cli = measure("cli", "analyze", str(path), "--gpu", "h100-sxm", "--json",
                  str(folder / "l.json"), "--html", str(folder / "l.html"))
    notes.append(f"- Llama-3-70B, 80 layers, the command line with `--gpu h100-sxm` (dims"
                 f" free, largest-batch search, JSON + HTML): {cli.cpu_s:.2f} CPU s,"
                 f" {cli.rss_bytes / MiB:,.0f} MiB.")
    return Row("Llama-3-70B, 80 layers (19,832 nodes), `analyze_onnx(batch=1, seq=2048)` call",
               f"{call:.2f} s ({run.cpu_s:.2f} s process), {run.rss_bytes / MiB:,.0f} MiB",
               "", "< 2 s", call < 2)


def resnet_row(folder: Path, notes: list[str]) -> Row:
    run = measure("cli", "analyze", str(ROOT / "samples" / "resnet50.onnx"), "--gpu", "t4",
                  "--batch", "32", "--html", str(folder / "r.html"))
    start = measure("cli", "--version")
    notes.append(f"- `graphmem --version` (the interpreter and the CLI's imports):"
                 f" {start.cpu_s:.2f} CPU s.")
    return Row("`graphmem analyze samples/resnet50.onnx --gpu t4 --batch 32`, whole process",
               f"{run.cpu_s:.2f} s, {run.rss_bytes / MiB:,.0f} MiB",
               f"`graphmem --version` {start.cpu_s:.2f} s", "< 1.5 s", run.cpu_s < 1.5)


def inline_row(folder: Path, notes: list[str]) -> Row:
    path = folder / "inline.onnx"
    _write_inline(path)
    size = path.stat().st_size
    run = measure("cli", "analyze", str(path), "--batch", "1", "--dim", "seq=2048", "--gpu",
                  "a100-80gb", "--json", str(folder / "i.json"), "--no-html")
    return Row(f"{size / 1e9:.2f} GB of weights inside the file, `analyze --gpu a100-80gb`",
               f"{run.rss_bytes / MiB:,.0f} MiB ({run.cpu_s:.2f} s)",
               f"file {size / MiB:,.0f} MiB", "< 300 MiB", run.rss_bytes < 300 * MiB)


def _write_inline(path: Path) -> None:
    """Llama-2-7B widths, 1 layer, vocab 48,000, every weight zeros inside the file."""
    import numpy as np
    import onnx
    from onnx import helper

    config = replace(PRESETS["llama2-7b"], layers=1, vocab=48000)
    model = build_llama(config, data_file="never.data")
    for tensor in model.graph.initializer:
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
        itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        tensor.raw_data = bytes(int(np.prod(list(tensor.dims))) * itemsize)
    onnx.save_model(model, str(path))


def bert_row(folder: Path, notes: list[str]) -> Row:
    module = folder / "bert_base.py"
    module.write_text(
        "def build():\n"
        "    from transformers import BertConfig, BertForSequenceClassification\n\n"
        "    return BertForSequenceClassification(BertConfig(attn_implementation='eager'))\n")
    target = ("`--suggest` on a BERT-base training step (8 x 128 tokens, `--gpu a100-80gb`),"
              " whole process")
    plain = measure("cli", "analyze", f"{module}:build", "--input", "8x128:int64", "--train",
                    "--gpu", "a100-80gb", "--no-html")
    reference = f"the same without `--suggest` {plain.cpu_s:.1f} s"
    try:
        run = measure("cli", "analyze", f"{module}:build", "--input", "8x128:int64", "--train",
                      "--suggest", "--gpu", "a100-80gb", "--no-html", limit_s=BERT_LIMIT_S)
    except TimedOut as stopped:
        return Row(target, f"over {stopped.cpu_s:.0f} s (stopped at {BERT_LIMIT_S} s wall)",
                   reference, "< 30 s", False)
    return Row(target, f"{run.cpu_s:.1f} s, {run.rss_bytes / MiB:,.0f} MiB", reference,
               "< 30 s", run.cpu_s < 30)


def environment() -> str:
    import onnx

    import graphmem

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    return (f"{now}; {platform.machine()}, {os.cpu_count()} cores, {memory:.0f} GiB, load"
            f" {load} (1, 5, 15 min); Python {platform.python_version()}, graphmem"
            f" {graphmem.__version__}, onnx {onnx.__version__}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-bert", action="store_true", help="no torch measurement")
    parser.add_argument("--only-decoders", action="store_true",
                        help="only the three 22k-node decoders of issue 27")
    parser.add_argument("--output", type=Path, help="also write the table there (markdown)")
    args = parser.parse_args()
    rows_of: list[Callable[[Path, list[str]], Row | list[Row]]] = [
        decoder_row, three_decoder_rows, llama70b_row, resnet_row, inline_row]
    if args.only_decoders:
        rows_of = [three_decoder_rows]
    elif not args.skip_bert:
        rows_of.append(bert_row)
    lines = [environment(), "", "| target | measured (CPU s, peak RSS) | reference, same run |"
             " goal | met |", "|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        for row_of in rows_of:
            made = row_of(Path(folder), notes)
            for row in made if isinstance(made, list) else [made]:
                lines.append(f"| {row.target} | {row.measured} | {row.reference} |"
                             f" {row.goal} | {'yes' if row.met else 'no'} |")
                print(lines[-1], flush=True)
    lines.extend(["", *notes, ""])
    print("\n".join(notes))
    if args.output:
        args.output.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
