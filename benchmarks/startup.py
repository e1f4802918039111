"""Start-up and the command line on small models, each against a reference in the same run
(issue 27).

    python benchmarks/startup.py [--repeat N] [--only onnx|torch|inprocess]

Every command is a fresh process (`python -m graphmem ...` from this checkout), measured in CPU
seconds (user + system from wait4: the machines this project runs on are shared, and wall time
measures the neighbours), the best of `--repeat` runs (default 3), with Python's bytecode cache
on as an installed package has it (this project's sessions set PYTHONDONTWRITEBYTECODE, under
which every graphmem module is compiled from source at every start: 0.17 s more). The rows:

- reference: `python -c "import onnx, numpy"`, the floor of any tool that reads an ONNX file;
- `graphmem --help`; `graphmem analyze resnet18.onnx` as typed (HTML report written) and with
  `--no-html`. The ResNet-18 is tests/models.py's, exported once with its weights by torch's
  TorchScript exporter (batch dynamic) into benchmarks/.cache/ (git-ignored);
- Hugging Face configs as a new user gives them (a folder with config.json): GPT-2 (the hub's
  gpt2 config.json) inference and training, samples/llama3-8b inference, training (AdamW, bf16
  autocast) and QLoRA with gradient checkpointing, each also with layer stamping off
  (`GRAPHMEM_STAMP=0`);
- `--suggest` on a 2-layer nn.TransformerEncoder training step (d_model 512, 8 heads, batch 8 x
  128 tokens, T4);
- in-process, one interpreter, imports done: PyTorch's MemTracker
  (torch.distributed._tools.mem_tracker) on a GPT-2 training step under FakeTensorMode (model
  built in the mode, AdamW, forward with labels, backward, step) against graphmem's analysis of
  the same step from the same config (`graphmem.analyze(config, train=True, optimizer="adamw",
  batch=8, dims={"seq": 128})`), alternating, best of `--repeat`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "benchmarks" / ".cache"
LLAMA3_8B = ROOT / "samples" / "llama3-8b"
# the hub's gpt2/config.json, the fields a model build reads
GPT2_CONFIG = {
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
    "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
    "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
    "resid_pdrop": 0.1, "vocab_size": 50257,
}
ENCODER = (
    "from torch import nn\n\n\n"
    "def build() -> nn.Module:\n"
    "    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,\n"
    "                                       dropout=0.0, batch_first=True)\n"
    "    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)\n"
)
# exports tests/models.py's ResNet18 once (weights included, batch dynamic)
EXPORT_RESNET18 = r"""
import sys, torch
sys.path.insert(0, sys.argv[2])
from tests.models import ResNet18
torch.manual_seed(0)
model = ResNet18().eval()
torch.onnx.export(model, (torch.randn(2, 3, 224, 224),), sys.argv[1], dynamo=False,
                  input_names=["x"], output_names=["logits"], opset_version=17,
                  dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
"""
IN_PROCESS = r"""
import json, sys, time
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
import graphmem
from graphmem.frontends.torch.hf_config import build_config, read_config

config_path, repeat = sys.argv[1], int(sys.argv[2])
BATCH, SEQ = 8, 128


def memtracker() -> int:
    from transformers import AutoModelForCausalLM
    with FakeTensorMode():
        model = AutoModelForCausalLM.from_config(build_config(read_config(config_path)))
        optimizer = torch.optim.AdamW(model.parameters())
        ids = torch.randint(0, 50257, (BATCH, SEQ))
        tracker = MemTracker()
        tracker.track_external(model, optimizer)
        with tracker:
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return max(snap["Total"] for snap in tracker.get_tracker_snapshot("peak").values())


def graphmem_step() -> int:
    result = graphmem.analyze(config_path, train=True, optimizer="adamw", batch=BATCH,
                              dims={"seq": SEQ})
    return int(result.peak_bytes)


times = {"memtracker": [], "graphmem": []}
peaks = {}
for _ in range(repeat):
    for name, step in (("memtracker", memtracker), ("graphmem", graphmem_step)):
        start = time.process_time()
        peaks[name] = step()
        times[name].append(time.process_time() - start)
json.dump({"seconds": {k: min(v) for k, v in times.items()}, "peaks": peaks},
          open(sys.argv[3], "w"))
"""


def cpu_seconds(argv: list[str], cwd: Path, extra: dict[str, str] | None = None) -> float:
    """The CPU seconds (user + system) of one process running `argv` (with `extra` in its
    environment); it must succeed."""
    # as installed: bytecode written once and read after (pip compiles it at install time; an
    # environment with PYTHONDONTWRITEBYTECODE would compile every module at every start)
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(extra or {})}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    error = process.stderr.read().decode() if process.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {error[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def best(argv: list[str], cwd: Path, repeat: int, extra: dict[str, str] | None = None
         ) -> float:
    return min(cpu_seconds(argv, cwd, extra) for _ in range(repeat))


def resnet18() -> Path:
    path = CACHE / "resnet18.onnx"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-c", EXPORT_RESNET18, str(path), str(ROOT)],
                       check=True, capture_output=True)
    return path


def graphmem(*args: str) -> list[str]:
    return [sys.executable, "-m", "graphmem", *args]


def onnx_rows(folder: Path, repeat: int) -> list[tuple[str, float, str]]:
    reference = best([sys.executable, "-c", "import onnx, numpy"], folder, repeat)
    model = str(resnet18())
    rows = [("`python -c \"import onnx, numpy\"` (the reference)", reference, "")]
    for label, argv in (
            ("`graphmem --help`", graphmem("--help")),
            ("`graphmem analyze resnet18.onnx` (HTML report written)",
             graphmem("analyze", model, "--html", str(folder / "r.html"))),
            ("`graphmem analyze resnet18.onnx --no-html`",
             graphmem("analyze", model, "--no-html")),
            ("`graphmem analyze resnet18.onnx --gpu t4 --batch 32 --no-html`",
             graphmem("analyze", model, "--gpu", "t4", "--batch", "32", "--no-html"))):
        seconds = best(argv, folder, repeat)
        rows.append((label, seconds, f"{seconds / reference:.1f}x the reference"))
    return rows


def torch_rows(folder: Path, repeat: int) -> list[tuple[str, float, str]]:
    gpt2 = folder / "gpt2"
    gpt2.mkdir(exist_ok=True)
    (gpt2 / "config.json").write_text(json.dumps(GPT2_CONFIG, indent=2))
    (folder / "encoder.py").write_text(ENCODER)
    out = ["--no-html", "--json", str(folder / "out.json")]
    llm = ["--train", "--optimizer", "adamw", "--amp", "bf16", "--batch", "1", "--dim",
           "seq=2048", "--gpu", "h100-sxm"]
    qlora = ["--train", "--qlora", "--gradient-checkpointing", "--gpu", "l4", "--batch", "1",
             "--dim", "seq=2048"]
    commands = (
        ("GPT-2 config, inference, `--batch 1 --dim seq=1024 --gpu a100-80gb`",
         graphmem("analyze", str(gpt2), "--batch", "1", "--dim", "seq=1024", "--gpu",
                  "a100-80gb", *out)),
        ("GPT-2 config, training (AdamW), `--train --batch 8 --dim seq=1024 --gpu a100-80gb`",
         graphmem("analyze", str(gpt2), "--train", "--optimizer", "adamw", "--batch", "8",
                  "--dim", "seq=1024", "--gpu", "a100-80gb", *out)),
        ("Llama-3-8B config, inference, `--batch 1 --dim seq=2048 --gpu h100-sxm`",
         graphmem("analyze", str(LLAMA3_8B), "--batch", "1", "--dim", "seq=2048", "--gpu",
                  "h100-sxm", *out)),
        ("Llama-3-8B config, training, `--train --optimizer adamw --amp bf16 --batch 1"
         " --dim seq=2048 --gpu h100-sxm`", graphmem("analyze", str(LLAMA3_8B), *llm, *out)),
        ("the same, every layer traced (`GRAPHMEM_STAMP=0`: no layer stamping)",
         graphmem("analyze", str(LLAMA3_8B), *llm, *out), {"GRAPHMEM_STAMP": "0"}),
        ("Llama-3-8B QLoRA, `--train --qlora --gradient-checkpointing --gpu l4 --batch 1"
         " --dim seq=2048`", graphmem("analyze", str(LLAMA3_8B), *qlora, *out)),
        ("the same, every layer traced (`GRAPHMEM_STAMP=0`)",
         graphmem("analyze", str(LLAMA3_8B), *qlora, *out), {"GRAPHMEM_STAMP": "0"}),
        ("`--suggest` on a 2-layer nn.TransformerEncoder, `--input 8x128x512 --train --gpu t4`",
         graphmem("analyze", f"{folder / 'encoder.py'}:build", "--input", "8x128x512",
                  "--train", "--suggest", "--gpu", "t4", *out)),
    )
    return [(label, best(argv, folder, repeat, *extra), "") for label, argv, *extra in commands]


def in_process_rows(folder: Path, repeat: int) -> list[tuple[str, float, str]]:
    gpt2 = folder / "gpt2"
    gpt2.mkdir(exist_ok=True)
    (gpt2 / "config.json").write_text(json.dumps(GPT2_CONFIG, indent=2))
    result = folder / "in_process.json"
    cpu_seconds([sys.executable, "-c", IN_PROCESS, str(gpt2), str(repeat), str(result)],
                folder)
    data = json.loads(result.read_text())
    tracker, ours = data["seconds"]["memtracker"], data["seconds"]["graphmem"]
    peaks = data["peaks"]
    return [
        ("in-process: MemTracker, GPT-2 training step (8 x 128, AdamW) under FakeTensorMode",
         tracker, f"peak {peaks['memtracker'] / 2**20:,.0f} MiB"),
        ("in-process: graphmem, the same step from the same config", ours,
         f"{ours / tracker:.2f}x MemTracker; peak {peaks['graphmem'] / 2**20:,.0f} MiB"),
    ]


def machine() -> str:
    load = os.getloadavg()[0]
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()},"
            f" {os.cpu_count()} CPUs, load average {load:.1f} at the end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the best counts")
    parser.add_argument("--only", choices=("onnx", "torch", "inprocess"),
                        help="one group of rows")
    args = parser.parse_args()
    groups = {"onnx": onnx_rows, "torch": torch_rows, "inprocess": in_process_rows}
    rows = []
    with tempfile.TemporaryDirectory() as name:
        for group, rows_of in groups.items():
            if args.only in (None, group):
                rows.extend(rows_of(Path(name), args.repeat))
    print(f"CPU seconds of whole processes, best of {args.repeat} ({machine()})")
    print("| what | CPU s | |\n|---|---:|---|")
    for label, seconds, note in rows:
        print(f"| {label} | {seconds:.2f} | {note} |")


if __name__ == "__main__":
    main()
