"""Where the CPU of a PyTorch analysis goes, stage by stage (issue 17).

    python benchmarks/torch_trace_speed.py [--models bert,llama3-8b,llama3-70b] [--layers-70b N]

Every model is analysed in a fresh process, as users run it (`graphmem analyze ... --train
--gpu ...`, JSON written, no HTML), and that process times its own stages in CPU seconds
(`time.process_time`: the machines this project runs on are shared, wall time says more about
the neighbours than about graphmem):

- build: the model made from its file or config.json (on the meta device, no weights);
- trace: `make_fx` of the step on fake tensors, graphmem's dispatch modes inside it
  (graphmem/frontends/torch/trace.py); set-up: the rest of `trace_model` (fake parameters);
- fx -> IR: graphmem/frontends/torch/fx_convert.py, of which costs: the FLOPs per node
  (costs.py);
- passes: liveness, memory, arena, roofline... (graphmem/pipeline/run.py `run_passes`);
- analysis: the whole `main()` call; process: the child's user + system CPU from wait4 (the
  interpreter's start and the imports of torch and transformers included); RSS: its peak.

The models: transformers' BertForSequenceClassification at its default config (BERT-base,
8 x 128 tokens, `--gpu a100-80gb`); samples/llama3-8b/config.json and a Llama-3-70B config
(its widths; 80 layers unless `--layers-70b`), each one step of `--optimizer adamw --amp bf16
--batch 1 --dim seq=2048 --gpu h100-sxm`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MiB = 2**20
STAGES = ("build", "trace", "set-up", "fx -> IR", "costs", "passes", "analysis")
LLAMA3_70B = {"hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
              "num_key_value_heads": 8}
LLM_STEP = ("--train", "--optimizer", "adamw", "--amp", "bf16", "--batch", "1", "--dim",
            "seq=2048", "--gpu", "h100-sxm")

# The child: wraps the stage functions with CPU timers, runs the CLI, writes its numbers.
_CHILD = r"""
import json, sys, time
from collections import defaultdict
import graphmem.frontends.torch.fx_convert as fx_convert
import graphmem.frontends.torch.import_step as import_step
import graphmem.frontends.torch.trace as trace
import graphmem.pipeline.run as run
seconds = defaultdict(float)
def timed(module, name, stage):
    wrapped = getattr(module, name)
    def timer(*args, **kwargs):
        start = time.process_time()
        try:
            return wrapped(*args, **kwargs)
        finally:
            seconds[stage] += time.process_time() - start
    setattr(module, name, timer)
timed(trace, '_make_fx', 'trace')
timed(import_step, 'trace_model', 'trace_model')
timed(import_step, 'graph_from_trace', 'fx -> IR')
timed(fx_convert, 'imported_cost', 'costs')
timed(run, 'resolve', 'build')
timed(run, 'run_passes', 'passes')
from graphmem.cli.main import main
start = time.process_time()
code = main(sys.argv[2:])
seconds['analysis'] = time.process_time() - start
seconds['set-up'] = seconds.pop('trace_model') - seconds['trace']
rss = next(int(line.split()[1]) * 1024 for line in open('/proc/self/status')
           if line.startswith('VmHWM:'))
json.dump({'exit': code, 'seconds': seconds, 'rss_bytes': rss}, open(sys.argv[1], 'w'))
"""


def measure(args: list[str], folder: Path) -> dict:
    """One analysis in a fresh process: its stages' CPU s, its whole CPU s and peak RSS. It
    runs in `folder`, so that PYTHONPATH picks the graphmem measured (another checkout)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        process = subprocess.Popen([sys.executable, "-c", _CHILD, out.name, *args], cwd=folder,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(process.pid, 0)
        error = process.stderr.read().decode() if process.stderr else ""
        text = Path(out.name).read_text()
        if os.waitstatus_to_exitcode(status) != 0 or not text:
            raise RuntimeError(f"graphmem {' '.join(args)} failed: {error[-2000:]}")
        data = json.loads(text)
    if data["exit"]:
        raise RuntimeError(f"graphmem {' '.join(args)} exited {data['exit']}: {error[-2000:]}")
    return {**data, "process_s": usage.ru_utime + usage.ru_stime}


def model_args(name: str, folder: Path, layers_70b: int) -> list[str]:
    json_out = ["--json", str(folder / f"{name}.json"), "--no-html"]
    if name == "bert":
        module = folder / "bert_base.py"
        module.write_text(
            "def build():\n"
            "    from transformers import BertConfig, BertForSequenceClassification\n\n"
            "    return BertForSequenceClassification(BertConfig(attn_implementation='eager'))\n")
        return ["analyze", f"{module}:build", "--input", "8x128:int64", "--train", "--gpu",
                "a100-80gb", *json_out]
    config = ROOT / "samples" / "llama3-8b" / "config.json"
    if name == "llama3-70b":
        widths = {**json.loads(config.read_text()), **LLAMA3_70B,
                  "num_hidden_layers": layers_70b}
        config = folder / "llama3-70b" / "config.json"
        config.parent.mkdir(exist_ok=True)
        config.write_text(json.dumps(widths))
    return ["analyze", str(config), *LLM_STEP, *json_out]


def table(rows: list[tuple[str, dict]]) -> str:
    header = ["model", *STAGES, "process", "RSS MiB"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, data in rows:
        cells = [f"{data['seconds'].get(stage, 0.0):.2f}" for stage in STAGES]
        lines.append(f"| {name} | " + " | ".join(cells)
                     + f" | {data['process_s']:.2f} | {data['rss_bytes'] / MiB:,.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,llama3-8b,llama3-70b",
                        help="comma-separated: bert, llama3-8b, llama3-70b")
    parser.add_argument("--layers-70b", type=int, default=80,
                        help="layers of the Llama-3-70B config (default 80)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            label = f"{name} ({args.layers_70b} layers)" if name == "llama3-70b" else name
            rows.append((label, measure(model_args(name, Path(folder), args.layers_70b),
                                         Path(folder))))
    print("CPU seconds per stage (costs are part of fx -> IR; analysis is the main() call)")
    print(table(rows))


if __name__ == "__main__":
    main()
