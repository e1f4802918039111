"""The GPU campaign: graphmem's CUDA predictions against one real GPU, in one prepared run.

    PYTHONPATH=. python3 benchmarks/gpu_campaign.py [--quick] [--dry] [--only gpt2,tiny_cnn]
                                                    [--batches 8,1,32] [--gpu NAME]
                                                    [--out-dir DIR]

On a machine with a CUDA GPU it measures, in one call of under 8 minutes (a time budget per
section; rows past it are marked "skipped"), and writes `gpu-<date>-<gpu>.md` and `.json` (the
same rows) to --out-dir (default benchmarks/results):

- **context**: the CUDA context and library workspaces (benchmarks/gpu_context.py's stages:
  cudaMemGetInfo's used memory less the caching allocator's reserved bytes) against
  graphmem/devices/data/cuda_overhead.toml, and an onnxruntime CUDA session's context;
- **torch-cuda**: a zoo of small models (Hugging Face GPT-2, Llama, BERT and a Mixtral-style
  MoE from configs, TinyCNN and ResNet-18 from tests/models.py) at two sizes, inference and
  training (SGD, AdamW, AMP bf16, fp16 with GradScaler, gradient checkpointing, LoRA): the
  steady-state step's `torch.cuda.max_memory_allocated`, `max_memory_reserved` and the
  device's used memory (total - free of `torch.cuda.mem_get_info`) against graphmem's
  `--runtime torch-cuda` (runtime peak, device total less the context, device total);
- **ort-cuda**: onnxruntime's CUDA provider on samples/*.onnx (graph-only samples get random
  weights) and exports of the zoo (TorchScript for the CNNs, dynamo for the transformers),
  three batches, ORT_ENABLE_ALL and ORT_DISABLE_ALL: the arena's `mem_in_use_peak` and
  `mem_arena_held` from onnxruntime's profile (graphmem/verify/runners/onnxruntime_runner.py)
  and the device's used memory with the session alive (cuMemGetInfo), against `--runtime
  ort-cuda` (runtime peak, arena held, device total). Without onnxruntime's CUDA provider (the
  CPU-only onnxruntime) these rows say "not run" and why.

Each measurement runs in a fresh process (a clean allocator, cuBLAS handles and context),
started before graphmem predicts the same row here, so both run at once. `--dry` (and any run
where torch sees no CUDA device) predicts every row and measures nothing: the measured columns
stay empty. No number is made up: a measured cell is what this run measured, or empty.
docs/gpu-campaign.md is the runbook (onnxruntime-gpu carried in parts, the device command).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402 (needs the path above for the zoo)
from torch import nn  # noqa: E402

RESULT = "CAMPAIGN-RESULT "  # a child's answer: one JSON line after this prefix
# Each section ends this many seconds after the run starts (unused time rolls over): under 8
# minutes in all, the exports and the slowest child included.
DEFAULT_EXTEND = "next-power-of-two"
# the other arena extend strategy (--ort-arena-extend), measured on the graph as written
SAME_AS_REQUESTED = ("disabled", "ORT_DISABLE_ALL, arena same-as-requested")
SECTION_ENDS_S = {"context": 40, "torch-cuda": 250, "ort-cuda": 420}
QUICK_SECTION_ENDS_S = {"context": 40, "torch-cuda": 130, "ort-cuda": 210}
CHILD_TIMEOUT_S = 150
ORT_BATCHES = (8, 1, 32)  # in the order they run: a budget cut loses the last
QUICK_ORT_BATCHES = (8, 1)
TOKEN_SEQ = 128
DRY_GPU = "h100-sxm"


# ----- the rows ------------------------------------------------------------------------------
@dataclass
class Metric:
    predicted: int | None = None
    measured: int | None = None

    @property
    def error_pct(self) -> float | None:
        if self.predicted is None or not self.measured:
            return None
        return (self.predicted - self.measured) / self.measured * 100


@dataclass
class Row:
    section: str  # context | torch-cuda | ort-cuda
    model: str
    path: str  # the step (torch-cuda), the optimization level (ort-cuda), the stage
    batch: str
    metrics: dict[str, Metric] = field(default_factory=dict)
    status: str = "predicted"  # measured | predicted (dry) | failed | not run | skipped
    reason: str = ""
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        for name, metric in self.metrics.items():
            data["metrics"][name]["error_pct"] = metric.error_pct
        return data


METRICS = {"context": ("bytes",), "torch-cuda": ("allocated", "reserved", "used"),
           "ort-cuda": ("arena peak", "arena held", "used")}


# ----- the PyTorch zoo -----------------------------------------------------------------------
@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[[], nn.Module]
    input: str  # graphmem's input spec: "4x128:int64", "8x3x224x224"
    hf: bool  # a Hugging Face model: LoRA and gradient checkpointing apply
    steps: tuple[str, ...] = ()  # only these steps (default: every step that applies)


def _gpt2(layers: int, width: int, heads: int, vocab: int) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from transformers import GPT2Config, GPT2LMHeadModel

        return GPT2LMHeadModel(GPT2Config(n_layer=layers, n_embd=width, n_head=heads,
                                          vocab_size=vocab, n_positions=512))
    return build


def _llama(layers: int, width: int, heads: int, vocab: int) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from transformers import LlamaConfig, LlamaForCausalLM

        return LlamaForCausalLM(LlamaConfig(
            num_hidden_layers=layers, hidden_size=width, num_attention_heads=heads,
            num_key_value_heads=heads // 2, intermediate_size=width * 2, vocab_size=vocab))
    return build


def _bert(layers: int, width: int, heads: int, vocab: int) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        from transformers import BertConfig, BertForSequenceClassification

        return BertForSequenceClassification(BertConfig(
            num_hidden_layers=layers, hidden_size=width, num_attention_heads=heads,
            intermediate_size=width * 4, vocab_size=vocab))
    return build


def _mixtral() -> nn.Module:
    from transformers import MixtralConfig, MixtralForCausalLM

    return MixtralForCausalLM(MixtralConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=256, vocab_size=1000, num_local_experts=4, num_experts_per_tok=2))


def _tiny_cnn() -> nn.Module:
    from tests.models import TinyCNN

    return TinyCNN()


def _resnet18() -> nn.Module:
    from tests.models import ResNet18

    return ResNet18()


ZOO = {m.name: m for m in (
    ZooModel("gpt2-s", _gpt2(2, 128, 4, 1000), f"4x{TOKEN_SEQ}:int64", True),
    ZooModel("gpt2-m", _gpt2(4, 512, 8, 8192), "8x256:int64", True),
    ZooModel("llama-s", _llama(2, 128, 4, 1000), f"4x{TOKEN_SEQ}:int64", True),
    ZooModel("llama-m", _llama(4, 512, 8, 8192), "8x256:int64", True),
    ZooModel("bert-s", _bert(2, 128, 4, 1000), f"4x{TOKEN_SEQ}:int64", True),
    ZooModel("bert-m", _bert(4, 512, 8, 8192), "8x256:int64", True),
    ZooModel("mixtral-s", _mixtral, f"4x{TOKEN_SEQ}:int64", True,
             ("inference", "train adamw", "train adamw amp bf16")),
    ZooModel("cnn-s", _tiny_cnn, "32x3x32x32", False),
    ZooModel("cnn-m", _tiny_cnn, "512x3x32x32", False),
    ZooModel("resnet18-s", _resnet18, "8x3x224x224", False),
    ZooModel("resnet18-m", _resnet18, "32x3x224x224", False),
)}


@dataclass(frozen=True)
class Step:
    name: str
    train: bool = True
    optimizer: str = "adamw"
    amp: str | None = None
    checkpointing: bool = False
    lora: bool = False


STEPS = {s.name: s for s in (
    Step("inference", train=False), Step("train adamw"), Step("train sgd", optimizer="sgd"),
    Step("train adamw amp bf16", amp="bf16"), Step("train adamw fp16 GradScaler", amp="fp16"),
    Step("train adamw grad-ckpt", checkpointing=True), Step("train adamw lora", lora=True),
)}
FIRST_STEPS = ("inference", "train adamw")  # measured for every model before the others


def torch_plan(quick: bool, only: tuple[str, ...]) -> list[tuple[str, str]]:
    """(model, step) in the order they run: inference and AdamW of every model first, so a
    budget cut loses the rarer steps. Size m: the steps that scale; LoRA and checkpointing:
    Hugging Face models."""
    pairs = []
    for model in ZOO.values():
        if not wanted(model.name, only) or (quick and model.name.endswith("-m")):
            continue
        for step in STEPS.values():
            if ((step.lora or step.checkpointing) and not model.hf) or (
                    model.steps and step.name not in model.steps):
                continue
            if model.name.endswith("-m") and step.name in ("train sgd",
                                                           "train adamw fp16 GradScaler",
                                                           "train adamw lora"):
                continue
            if quick and step.name in ("train sgd", "train adamw grad-ckpt"):
                continue
            pairs.append((model.name, step.name))
    return sorted(pairs, key=lambda pair: pair[1] not in FIRST_STEPS)


def wanted(name: str, only: tuple[str, ...]) -> bool:
    return not only or name.startswith(only)


# ----- predictions (this process: no CUDA) ---------------------------------------------------
def predict_torch(model_name: str, step_name: str, gpu: Any) -> dict[str, int]:
    from graphmem import analyze_torch
    from graphmem.runtime_models.torch_cuda import cuda_overhead

    model, step = ZOO[model_name], STEPS[step_name]
    torch.manual_seed(0)
    result = analyze_torch(model.build(), [model.input], train=step.train,
                           optimizer=step.optimizer if step.train else None, amp=step.amp,
                           gpu=gpu.name,
                           runtime="torch-cuda", plan=False, suggest=False,
                           lora=True if step.lora else None,
                           gradient_checkpointing=step.checkpointing)
    estimate = result.runtime
    context = cuda_overhead(gpu.architecture).context_bytes
    return {"allocated": estimate.runtime_peak_bytes,
            "reserved": estimate.device_total_bytes - context,
            "used": estimate.device_total_bytes}


def predict_ort(path: Path, dims: dict[str, int], gpu: Any
                ) -> tuple[dict[str, Callable[[], dict[str, int]]], list[dict[str, Any]]]:
    """`--runtime ort-cuda` (the graph as written at every level: the CUDA provider's optimized
    graph is not modelled), one analysis and the runtime model run once per arena extend
    strategy: each as a function that raises where graphmem has no estimate, and the inputs
    to make up (the measurement runs either way)."""
    from graphmem import analyze_onnx
    from graphmem.pipeline.device_total import DeviceModel, device_estimate
    from graphmem.runtime_models.bfc_arena import ArenaExtend
    from graphmem.verify.onnx_run import input_specs

    result = analyze_onnx(path, dims=dims, gpu=gpu.name, runtime="ort-cuda", plan=False,
                          ort_arena_extend=DEFAULT_EXTEND)
    specs = [asdict(spec) for spec in input_specs(result)]
    if result.runtime is None:
        failure = result.runtime_note or "no ort-cuda estimate"
        return {str(e): lambda: _raise(failure) for e in ArenaExtend}, specs
    predictions = {DEFAULT_EXTEND: _ort_numbers(result.runtime)}
    for extend in ArenaExtend:
        if str(extend) != DEFAULT_EXTEND:  # the same analysis, the arena grown the other way
            model = DeviceModel("ort-cuda", gpu, ort_arena_extend=extend)
            predictions[str(extend)] = _ort_numbers(device_estimate(result, model))
    return {extend: (lambda p=numbers: p) for extend, numbers in predictions.items()}, specs


def _ort_numbers(estimate: Any) -> dict[str, int]:
    return {"arena peak": estimate.runtime_peak_bytes,
            "arena held": estimate.arena_held_bytes or 0,
            "used": estimate.device_total_bytes}


# ----- measurements (each in a fresh child process) ------------------------------------------
def child_torch(model_name: str, step_name: str, device: str = "cuda") -> dict[str, int]:
    """One steady-state step on the GPU: warm-up steps first (optimizer state made, GradScaler
    past its first skipped steps), then the peaks of the next one, absolute: parameters,
    inputs, optimizer state and the libraries' workspaces included, as graphmem predicts.
    On the CPU (the test suite's check of the steps) it runs them and measures nothing."""
    from graphmem.frontends.torch.loader import parse_tensor_spec
    from graphmem.verify.runners.torch_runner import random_inputs, step_function

    model, step = ZOO[model_name], STEPS[step_name]
    torch.manual_seed(0)
    module = prepared(model, step).to(device)
    inputs = random_inputs([parse_tensor_spec(model.input)], device)
    run, optimizer = step_function(module, inputs, step.train, step.optimizer, step.amp, device)
    warm_ups = 0
    while warm_ups < 12:
        run()
        warm_ups += 1
        if warm_ups >= 2 and (optimizer is None or step.optimizer == "sgd" or optimizer.state):
            break
    note = "" if warm_ups <= 2 else f"{warm_ups} warm-up steps (GradScaler skipped some)"
    if optimizer is not None and step.optimizer != "sgd" and not optimizer.state:
        note = f"no optimizer state after {warm_ups} warm-up steps: not the steady state"
    if device != "cuda":
        run()
        return {"note": note} if note else {}
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    run()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {"allocated": torch.cuda.max_memory_allocated(),
            "reserved": torch.cuda.max_memory_reserved(), "used": total - free, "note": note}


def prepared(model: ZooModel, step: Step) -> nn.Module:
    """The model as the step trains it: gradient checkpointing as Hugging Face enables it
    (use_reentrant=False), LoRA as peft adds it (its defaults: r=8, alpha=8, the model type's
    target modules), as graphmem's lora=True and gradient_checkpointing=True model them."""
    module = model.build()
    if step.checkpointing:
        module.gradient_checkpointing_enable(  # type: ignore[operator]
            gradient_checkpointing_kwargs={"use_reentrant": False})
    if step.lora:
        from peft import LoraConfig, get_peft_model

        module = get_peft_model(module, LoraConfig(r=8, lora_alpha=8, lora_dropout=0.0))
    return module


def child_context() -> dict[str, Any]:
    """benchmarks/gpu_context.py's stages in a fresh process; {"cuda": False} without one."""
    if not torch.cuda.is_available():
        return {"cuda": False}
    import gpu_context

    stages = [gpu_context.init_context(), *gpu_context.library_stages()]
    return {"cuda": True, "device": torch.cuda.get_device_name(),
            "versions": gpu_context.versions(), "total": torch.cuda.mem_get_info()[1],
            "stages": [asdict(stage) for stage in stages]}


def load_cuda_libraries() -> str:
    """onnxruntime-gpu 1.31 (CUDA 13, cuDNN 9) finds its libraries where PyTorch's CUDA 13
    build loaded them: this script imports torch first (no CUDA context: nothing is run), as
    onnxruntime's docs advise, then `onnxruntime.preload_dlls` loads any still missing. An
    empty answer: no complaint (the session says next whether the provider starts)."""
    from graphmem.frontends.onnx.ort_import import ort

    try:
        ort.preload_dlls()
    except Exception as error:  # noqa: BLE001 - whatever fails, the session says it next
        return f"preload_dlls: {error}"
    return ""


def child_ort(path: str, specs: list[dict[str, Any]], level: str, provider: str,
              arena_extend: str = "next-power-of-two") -> dict[str, Any]:
    from graphmem.verify.runners.onnxruntime_runner import InputSpec, run_onnx

    note = load_cuda_libraries() if provider == "cuda" else ""
    inputs = [InputSpec(s["name"], tuple(s["shape"]), s["dtype"], s["high"]) for s in specs]
    # the run happens in verify's child process, which reads the device's used memory itself
    # (graphmem/verify/runners/ort_child.py) while its session is alive
    run = run_onnx(Path(path), inputs, provider, level, device_used=provider == "cuda",
                   arena_extend=arena_extend)
    return {"arena peak": run.peak_bytes, "arena held": run.arena_held_bytes,
            "used": run.device_used_bytes, "weights in arena": run.weights_in_arena_bytes,
            "note": note}


def child_ort_probe(provider: str) -> dict[str, Any]:
    """Whether onnxruntime can run on the CUDA provider here, and the device's used memory
    with a one-node session alive (the context onnxruntime makes), else why not."""
    import onnx
    from onnx import TensorProto, helper

    from graphmem.errors import GraphmemError
    from graphmem.frontends.onnx.ort_import import ort
    from graphmem.verify.runners.onnxruntime_runner import (
        InputSpec,
        provider_available,
        run_onnx,
    )

    if provider == "cuda" and not provider_available("cuda"):
        return {"ok": False, "reason": (
            f"onnxruntime {ort.__version__} here has no CUDAExecutionProvider (it has"
            f" {', '.join(ort.get_available_providers())}): install onnxruntime-gpu 1.31.1"
            " (docs/gpu-campaign.md)")}
    note = load_cuda_libraries() if provider == "cuda" else ""
    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [value], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with tempfile.TemporaryDirectory(prefix="graphmem-campaign-") as folder:
        path = Path(folder) / "probe.onnx"
        onnx.save(model, str(path))
        try:
            run = run_onnx(path, [InputSpec("x", (1, 16), "float32")], provider, "all",
                           device_used=provider == "cuda")
        except GraphmemError as error:
            return {"ok": False, "reason": f"{error}{'; ' + note if note else ''}"}
    return {"ok": True, "version": ort.__version__, "used": run.device_used_bytes,
            "note": note}


def run_child(role: str, payload: dict[str, Any]) -> dict[str, Any]:
    """In the child: the measurement asked for, as one JSON line; an error is an answer."""
    try:
        if role == "torch":
            answer: dict[str, Any] = child_torch(payload["model"], payload["step"])
        elif role == "context":
            answer = child_context()
        elif role == "ort":
            answer = child_ort(payload["path"], payload["specs"], payload["level"],
                               payload["provider"], payload.get("arena_extend", DEFAULT_EXTEND))
        else:
            answer = child_ort_probe(payload["provider"])
    except Exception as error:  # noqa: BLE001 - the row says what failed
        lines = traceback.format_exception_only(type(error), error)
        answer = {"error": " ".join(line.strip() for line in lines)[:400]}
    return answer


class Child:
    """A measurement in a fresh process, started now; `result()` waits for its answer."""

    def __init__(self, role: str, payload: dict[str, Any], timeout_s: float) -> None:
        command = [sys.executable, __file__, "--child", role, json.dumps(payload)]
        self.timeout_s = timeout_s
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, cwd=ROOT)

    def result(self) -> dict[str, Any]:
        try:
            out, err = self.process.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            return {"error": f"no answer in {self.timeout_s:.0f} s (killed)"}
        for line in reversed(out.splitlines()):
            if line.startswith(RESULT):
                return json.loads(line[len(RESULT):])
        tail = " ".join(err.strip().splitlines()[-3:])[:400]
        return {"error": f"exit {self.process.returncode}: {tail or 'no answer'}"}


# ----- the campaign --------------------------------------------------------------------------
@dataclass
class Campaign:
    gpu: Any  # graphmem's GpuSpec
    measure: bool
    quick: bool
    only: tuple[str, ...]
    batches: tuple[int, ...] = ()  # the ort-cuda batches (empty: the defaults)
    started: float = field(default_factory=time.monotonic)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    section_seconds: dict[str, float] = field(default_factory=dict)

    def left_s(self, section: str) -> float:
        ends = QUICK_SECTION_ENDS_S if self.quick else SECTION_ENDS_S
        return ends[section] - (time.monotonic() - self.started)

    def out_of_time(self, section: str) -> bool:
        """A measured run past its section's budget (a dry run predicts every row)."""
        return self.measure and self.left_s(section) < 5

    @staticmethod
    def skipped(row: Row) -> Row:
        row.status, row.reason = "skipped", "the section's time budget is spent"
        return row

    def add(self, row: Row) -> None:
        self.rows.append(row)
        cells = "  ".join(f"{name} {fmt(m.predicted)} / {fmt(m.measured)}"
                          f" ({pct(m.error_pct)})" for name, m in row.metrics.items())
        print(f"[{time.monotonic() - self.started:5.0f} s] {row.section} | {row.model} |"
              f" {row.path} | {row.batch} | {row.status} {row.reason} | {cells}", flush=True)

    def row(self, section: str, model: str, path: str, batch: str,
            predict: Callable[[], dict[str, int]],
            child: tuple[str, dict[str, Any]] | None, not_run: str = "") -> None:
        """One row: the child measuring it started first, then graphmem's prediction here.
        Past the section's budget (a measured run) the row is neither: it says skipped."""
        begun = time.monotonic()
        row = Row(section, model, path, batch,
                  {name: Metric() for name in METRICS[section]})
        if self.out_of_time(section):
            self.add(self.skipped(row))
            return
        running = None
        if self.measure and child is not None and not not_run:
            running = Child(*child, timeout_s=min(CHILD_TIMEOUT_S, self.left_s(section) + 10))
        elif self.measure and not_run:
            row.status, row.reason = "not run", not_run
        try:
            for name, value in predict().items():
                row.metrics[name].predicted = value
        except Exception as error:  # noqa: BLE001 - a model graphmem cannot trace is a row
            row.status = "failed"
            row.reason = "; ".join(filter(None, (row.reason,
                                                 f"prediction: {first_line(error)}")))
        if running is not None:
            answer = running.result()
            if "error" in answer:
                row.status = "failed"
                row.reason = "; ".join(filter(None, (row.reason,
                                                     f"measurement: {answer['error']}")))
            else:
                for name, metric in row.metrics.items():
                    metric.measured = answer.get(name)
                if row.status != "failed":  # a failed prediction keeps its reason
                    row.status = "measured"
                row.reason = "; ".join(filter(None, (row.reason, answer.get("note"))))
        row.seconds = round(time.monotonic() - begun, 1)
        self.add(row)


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def run_context(campaign: Campaign) -> None:
    from graphmem.runtime_models.torch_cuda import cuda_overhead

    begun = time.monotonic()
    overhead = cuda_overhead(campaign.gpu.architecture)
    stages = campaign.context.get("stages")
    last = stages[-1] if stages else None
    workspaces = overhead.cublas_workspace_bytes + overhead.cublaslt_workspace_bytes
    rows = [("CUDA context, kernels and library handles (outside the allocator)",
             overhead.context_bytes,
             None if last is None else last["used_bytes"] - last["reserved_bytes"]),
            ("cuBLAS + cuBLASLt workspaces (in the allocator, first thread)", workspaces,
             None if last is None else last["allocated_bytes"])]
    for path, predicted, measured in rows:
        row = Row("context", "PyTorch process", path, "-",
                  {"bytes": Metric(predicted, measured)},
                  "measured" if measured is not None else "predicted")
        campaign.add(row)
    ort_context = campaign.context.get("ort")
    if ort_context is not None:
        used = ort_context.get("used")
        status = "measured" if used is not None else (
            "not run" if campaign.measure else "predicted")
        campaign.add(Row("context", "onnxruntime CUDA session (one Relu)",
                         "CUDA context + session, cuMemGetInfo used", "-",
                         {"bytes": Metric(overhead.context_bytes, used)}, status,
                         ort_context.get("reason", "") or ort_context.get("note", "")))
    campaign.section_seconds["context"] = round(time.monotonic() - begun, 1)


def run_torch(campaign: Campaign) -> None:
    begun = time.monotonic()
    for model_name, step_name in torch_plan(campaign.quick, campaign.only):
        campaign.row("torch-cuda", model_name, step_name, ZOO[model_name].input,
                     lambda m=model_name, s=step_name: predict_torch(m, s, campaign.gpu),
                     ("torch", {"model": model_name, "step": step_name}))
    campaign.section_seconds["torch-cuda"] = round(time.monotonic() - begun, 1)


@dataclass(frozen=True)
class OnnxCase:
    name: str
    path: Path


def onnx_cases(folder: Path, campaign: Campaign) -> list[OnnxCase]:
    """samples/*.onnx (graph-only ones with random weights written into `folder`, as
    benchmarks/accuracy.py runs them), then TorchScript exports of the zoo into `folder`."""
    from accuracy import sample_cases

    cases = [OnnxCase(case.name, case.path)
             for case in sample_cases(folder, campaign.notes, campaign.only)
             if not (campaign.quick and not case.name.startswith("tiny"))]
    exports = ("cnn-s", "gpt2-s") if campaign.quick else (
        "cnn-s", "resnet18-s", "gpt2-s", "bert-s", "llama-s")
    for name in exports:
        if not wanted(name, campaign.only):
            continue
        path = folder / f"{name}.onnx"
        try:
            export_zoo_model(name, path)
        except Exception as error:  # noqa: BLE001 - an export that fails is a note
            campaign.notes.append(f"{name} not exported: {first_line(error)}")
            continue
        exporter = "dynamo" if ZOO[name].hf else "TorchScript"
        cases.append(OnnxCase(f"{name} (exported, {exporter})", path))
    for name, equation in EINSUMS:
        if wanted(name, campaign.only):
            cases.append(OnnxCase(name, einsum_model(folder / f"{name}.onnx", equation)))
    return cases


# The CUDA provider's Einsum, read from its source (graphmem/runtime_models/ort_cuda_einsum.py):
# attention scores with the heads inside take the general processor's temporaries, with the
# heads outside the fast path's batched GEMM on views (none)
EINSUMS = (("einsum-general", "bthd,bshd->bhts"), ("einsum-fast-path", "bhtd,bhsd->bhts"))


def einsum_model(path: Path, equation: str) -> Path:
    """Neg of each [batch, 128, 8, 64] input (a tensor of the plan), the Einsum, a Neg."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Neg", [f"x{i}"], [f"n{i}"]) for i in range(2)]
    nodes += [helper.make_node("Einsum", ["n0", "n1"], ["e"], equation=equation),
              helper.make_node("Neg", ["e"], ["y"])]
    dims: list[Any] = ["batch", 128, 8, 64] if equation.startswith("bt") else [
        "batch", 8, 128, 64]
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, dims) for i in range(2)]
    graph = helper.make_graph(nodes, "einsum", inputs, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(onnx.shape_inference.infer_shapes(model), path)
    return path


def export_zoo_model(name: str, path: Path) -> None:
    """The zoo model in eval mode with a dynamic batch: a CNN through the TorchScript exporter
    (opset 17); a Hugging Face model, called with input_ids alone and returning its logits,
    through the dynamo exporter, dynamic seq too (TorchScript fails on transformers' mask code:
    aten::diff without a mask, dims graphmem cannot bind with one)."""
    from graphmem.frontends.torch.loader import parse_tensor_spec
    from graphmem.verify.runners.torch_runner import random_inputs

    model = ZOO[name]
    torch.manual_seed(0)
    module = model.build().eval()
    example = tuple(random_inputs([parse_tensor_spec(model.input)], "cpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not model.hf:
            torch.onnx.export(module, example, str(path), dynamo=False, opset_version=17,
                              input_names=["x"], output_names=["logits"],
                              dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
            return
        dims = {0: torch.export.Dim("batch", min=1, max=1024),
                1: torch.export.Dim("seq", min=2, max=512)}
        torch.onnx.export(HfLogits(module), example, str(path), dynamo=True,
                          input_names=["input_ids"], output_names=["logits"],
                          dynamic_shapes=(dims,), verbose=False)


class HfLogits(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.options = ({"use_cache": False}
                        if model.config.model_type in ("gpt2", "llama") else {})

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, return_dict=False, **self.options)[0]


def onnx_dims(path: Path, batch: int) -> dict[str, int]:
    """The first dim named in the inputs is the batch, the second the sequence."""
    from graphmem.frontends.onnx.importer import import_onnx

    names = import_onnx(path).graph.input_dims_in_order()
    return {name: (batch if i == 0 else TOKEN_SEQ) for i, name in enumerate(names)}


def run_ort(campaign: Campaign, provider: str) -> None:
    """Batch 8 of every model first (both levels), then batch 1, then 32: a budget cut loses
    the last batch, not the last models."""
    begun = time.monotonic()
    probe = campaign.context.get("ort", {})
    not_run = "" if probe.get("ok") else probe.get("reason", "")
    batches = campaign.batches or (QUICK_ORT_BATCHES if campaign.quick else ORT_BATCHES)
    with tempfile.TemporaryDirectory(prefix="graphmem-campaign-") as folder:
        cases = onnx_cases(Path(folder), campaign)
        for batch in batches:
            for case in cases:
                ort_rows(campaign, case, batch, provider, not_run)
    campaign.section_seconds["ort-cuda"] = round(time.monotonic() - begun, 1)


LEVELS = {"all": "ORT_ENABLE_ALL", "disabled": "ORT_DISABLE_ALL"}


def ort_rows(campaign: Campaign, case: OnnxCase, batch: int, provider: str,
             not_run: str) -> None:
    """Both levels of one model at one batch: one prediction (ort-cuda plans the graph as
    written at every level), a measurement per level."""
    names = [*LEVELS.values(), SAME_AS_REQUESTED[1]]
    if campaign.out_of_time("ort-cuda"):
        for level in names:
            campaign.add(campaign.skipped(Row("ort-cuda", case.name, level, f"batch={batch}",
                                              {n: Metric() for n in METRICS["ort-cuda"]})))
        return
    try:
        dims = onnx_dims(case.path, batch)
        predictions, specs = predict_ort(case.path, dims, campaign.gpu)
    except Exception as error:  # noqa: BLE001 - the rows say so
        failure = first_line(error)
        for level in names:
            campaign.row("ort-cuda", case.name, level, f"batch={batch}",
                         lambda f=failure: _raise(f), None)
        return
    batch_text = ", ".join(f"{k}={v}" for k, v in dims.items())
    for level, name in LEVELS.items():
        payload = {"path": str(case.path), "specs": specs, "level": level,
                   "provider": provider}
        campaign.row("ort-cuda", case.name, name, batch_text, predictions[DEFAULT_EXTEND],
                     ("ort", payload), not_run)
    level, name = SAME_AS_REQUESTED
    payload = {"path": str(case.path), "specs": specs, "level": level, "provider": provider,
               "arena_extend": "same-as-requested"}
    campaign.row("ort-cuda", case.name, name, batch_text, predictions["same-as-requested"],
                 ("ort", payload), not_run)


def _raise(text: str) -> dict[str, int]:
    raise RuntimeError(text)


# ----- output --------------------------------------------------------------------------------
def fmt(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


def pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.2f}%"


def markdown(campaign: Campaign, header: list[str]) -> str:
    lines = [*header]
    titles = {"context": "CUDA context and library workspaces",
              "torch-cuda": "PyTorch: `--runtime torch-cuda` against a real step",
              "ort-cuda": "onnxruntime CUDA provider: `--runtime ort-cuda` against a real run"}
    for section, title in titles.items():
        rows = [r for r in campaign.rows if r.section == section]
        if not rows:
            continue
        first_seen = {r.model: i for i, r in reversed(list(enumerate(rows)))}
        rows.sort(key=lambda r: first_seen[r.model])  # stable: each model's rows in run order
        names = METRICS[section]
        lines += ["", f"## {title}", "",
                  "| model | path | batch | " + " | ".join(
                      f"{n} predicted | {n} measured | error" for n in names)
                  + " | status | s |",
                  "|---|---|---|" + "---:|" * (3 * len(names)) + "---|---:|"]
        for row in rows:
            cells = [row.model, row.path, row.batch]
            for name in names:
                metric = row.metrics[name]
                cells += [fmt(metric.predicted), fmt(metric.measured), pct(metric.error_pct)]
            status = row.status + (f": {row.reason}" if row.reason else "")
            cells += [status.replace("|", "/"), f"{row.seconds:.1f}"]
            lines.append("| " + " | ".join(cells) + " |")
    stages = campaign.context.get("stages")
    if stages:
        lines += ["", "Stages (benchmarks/gpu_context.py), used = cudaMemGetInfo total - free:",
                  "", "| stage | used B | allocated B | reserved B |", "|---|---:|---:|---:|"]
        lines += [f"| {s['label']} | {s['used_bytes']:,} | {s['allocated_bytes']:,} |"
                  f" {s['reserved_bytes']:,} |" for s in stages]
    counts: dict[str, int] = {}
    for row in campaign.rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    lines += ["", f"Rows: {len(campaign.rows)} ("
              + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + "); seconds per"
              " section: " + ", ".join(f"{k} {v}" for k, v in campaign.section_seconds.items())]
    lines += [f"- {note}" for note in campaign.notes]
    return "\n".join(lines) + "\n"


def header_lines(campaign: Campaign, argv: list[str], device: str) -> list[str]:
    from graphmem.core.version import __version__

    versions = campaign.context.get("versions") or f"torch {torch.__version__}"
    mode = ("measured" if campaign.measure else
            "dry run: predictions only, nothing measured (the measured columns are empty)")
    return [f"# GPU campaign: graphmem {__version__} on {device} ({today()})", "",
            f"`python3 benchmarks/gpu_campaign.py {' '.join(argv)}`: {mode}.", "",
            f"GPU in graphmem's table: {campaign.gpu.name}; {versions}.",
            "error = (predicted - measured) / measured. torch-cuda: allocated ="
            " max_memory_allocated, reserved = max_memory_reserved (predicted: device total less"
            " the context), used = cudaMemGetInfo total - free after the step (predicted: the"
            " device total). ort-cuda: arena peak = mem_in_use_peak, arena held ="
            " mem_arena_held (onnxruntime's profile), used = cuMemGetInfo total - free with the"
            " session alive; the prediction plans the graph as written at both levels."]


def today() -> str:
    return datetime.datetime.now(datetime.UTC).date().isoformat()


# ----- main ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("payload", nargs="?", help=argparse.SUPPRESS)
    parser.add_argument("--dry", action="store_true", help="predictions only, every row")
    parser.add_argument("--quick", action="store_true", help="a smaller zoo, two batches")
    parser.add_argument("--only", default="", help="comma-separated name prefixes (zoo"
                        " models, samples, exports): only those rows")
    parser.add_argument("--batches", help="the ort-cuda batches, comma-separated (default:"
                        f" {','.join(map(str, ORT_BATCHES))}; --quick:"
                        f" {','.join(map(str, QUICK_ORT_BATCHES))})")
    parser.add_argument("--gpu", help="the GPU in graphmem's table (default: the device's"
                        f" name; dry: {DRY_GPU})")
    parser.add_argument("--out-dir", type=Path, help="where the .md and .json go (default:"
                        " benchmarks/results when measured; a dry run writes only if given)")
    parser.add_argument("--ort-provider", default="cuda", choices=("cuda", "cpu"),
                        help=argparse.SUPPRESS)  # cpu: the measuring path, checked without GPU
    args = parser.parse_args(argv)
    if args.child:
        answer = run_child(args.child, json.loads(args.payload or "{}"))
        print(RESULT + json.dumps(answer), flush=True)
        return 0
    return campaign_main(args, argv)


def campaign_main(args: argparse.Namespace, argv: list[str]) -> int:
    from graphmem.devices.gpus import find_gpu
    from graphmem.errors import GraphmemError

    started = time.monotonic()
    only = tuple(n for n in args.only.split(",") if n)
    context: dict[str, Any] = {"cuda": False}
    if not args.dry:  # torch and CUDA are touched in children only: this process stays clean
        print("probing the GPU (a fresh process: context and library workspaces)...",
              flush=True)
        context = Child("context", {}, CHILD_TIMEOUT_S).result()
    measure = bool(context.get("cuda"))
    if not args.dry and not measure:
        print(f"no CUDA device ({context.get('error', 'torch.cuda.is_available() is False')}):"
              " dry run, predictions only", flush=True)
    device = context.get("device", "no GPU (dry run)")
    notes = []
    try:
        gpu = find_gpu(args.gpu or (device if measure else DRY_GPU))
    except GraphmemError as error:
        if not measure:
            print(f"{error}: name the table's GPU closest to this one with --gpu NAME")
            return 2
        gpu = find_gpu(DRY_GPU)  # a measured run goes on: its numbers are worth the GPU time
        notes.append(f"{error}: predicted for {DRY_GPU}; rerun the predictions with --dry"
                     " --gpu NAME for the table's GPU closest to this one")
        print(notes[-1], flush=True)
    if measure or args.ort_provider == "cpu":
        print("probing onnxruntime's provider...", flush=True)
        context["ort"] = Child("probe", {"provider": args.ort_provider}, CHILD_TIMEOUT_S
                               ).result()
        if "error" in context["ort"]:
            context["ort"] = {"ok": False, "reason": context["ort"]["error"]}
        measure_ort_only = args.ort_provider == "cpu" and not measure
    else:
        measure_ort_only = False
    batches = tuple(int(b) for b in args.batches.split(",")) if args.batches else ()
    campaign = Campaign(gpu, measure, args.quick, only, batches, started=started,
                        context=context, notes=notes)
    if measure:
        campaign.notes.append(f"nvidia-smi before the campaign's processes:"
                              f" {nvidia_smi_line()}")
    if args.ort_provider == "cpu":
        campaign.notes.append("--ort-provider cpu: the ort-cuda rows ran on onnxruntime's CPU"
                              " provider, a check of the measuring path, not a GPU number")
    run_context(campaign)
    run_torch(campaign)
    campaign.measure = measure or measure_ort_only
    run_ort(campaign, args.ort_provider)
    campaign.measure = measure
    text = markdown(campaign, header_lines(campaign, argv, device))
    print("\n" + text, flush=True)
    out_dir = args.out_dir or (ROOT / "benchmarks" / "results" if measure else None)
    if out_dir is not None:
        write(out_dir, campaign, text, device)
    print(f"{len(campaign.rows)} rows in {time.monotonic() - started:.0f} s")
    return 0


def nvidia_smi_line() -> str:
    try:
        import gpu_context

        return gpu_context.nvidia_smi_used_mib() or "no answer"
    except OSError as error:
        return f"not run ({error})"


def write(out_dir: Path, campaign: Campaign, text: str, device: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"gpu-{today()}-{campaign.gpu.name}{'' if campaign.measure else '-dry'}"
    (out_dir / f"{stem}.md").write_text(text)
    data = {"date": today(), "gpu": campaign.gpu.name, "device": device,
            "measured": campaign.measure, "versions": campaign.context.get("versions"),
            "section_seconds": campaign.section_seconds, "notes": campaign.notes,
            "context_stages": campaign.context.get("stages"),
            "ort_probe": campaign.context.get("ort"),
            "rows": [row.as_json() for row in campaign.rows]}
    (out_dir / f"{stem}.json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"written: {out_dir / stem}.md and .json")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
