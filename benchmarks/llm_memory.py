"""LLM fine-tuning from a Hugging Face config: what graphmem predicts, what it costs to ask.

    python benchmarks/llm_memory.py            # both tables, markdown (several minutes)
    python benchmarks/llm_memory.py --accuracy # only the CPU accuracy table

Table 1 analyses published models from their config.json values (tests/helpers/
llm_configs.py), every layer traced: inference, LoRA and QLoRA training steps at seq 2048.
Each case runs in its own process, so its time and peak resident set (ru_maxrss) are the
analysis' own: a 70B model is analysed without its 141 GB of weights.

Table 2 checks the fine-tuning steps against real ones on this CPU: the same small models
with LoRA (graphmem's substitution, materialized) stepped with Adam and measured with
PyTorch's profiler (graphmem/verify/runners/torch_runner.py `measure_step`).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GIB = 1 << 30


@dataclass(frozen=True)
class Case:
    name: str
    config: str  # a name in tests/helpers/llm_configs.py
    options: dict[str, Any]


SEQ = {"seq": 2048}
LORA_ATTENTION = "r=16,alpha=32,targets=q_proj,k_proj,v_proj,o_proj"
CASES = [
    Case("Llama-3-8B inference, bf16", "LLAMA3_8B", {"dims": SEQ}),
    Case("Llama-3-8B LoRA r=16 (q,k,v,o), bf16 base", "LLAMA3_8B",
         {"dims": SEQ, "train": True, "lora": LORA_ATTENTION}),
    Case("Llama-3-8B LoRA r=16 + gradient checkpointing", "LLAMA3_8B",
         {"dims": SEQ, "train": True, "lora": LORA_ATTENTION, "gradient_checkpointing": True}),
    Case("Llama-3-8B QLoRA (peft defaults) + gradient checkpointing", "LLAMA3_8B",
         {"dims": SEQ, "train": True, "qlora": True, "gradient_checkpointing": True}),
    Case("Mixtral-8x7B QLoRA + gradient checkpointing", "MIXTRAL_8X7B",
         {"dims": SEQ, "train": True, "qlora": True, "gradient_checkpointing": True}),
    Case("Llama-3-70B QLoRA + gradient checkpointing", "LLAMA3_70B",
         {"dims": SEQ, "train": True, "qlora": True, "gradient_checkpointing": True}),
]


def run_case(index: int) -> dict[str, Any]:
    """One case, in this process: the analysis, its time and this process' peak RSS."""
    from graphmem import analyze
    from tests.helpers import llm_configs

    case = CASES[index]
    started = time.perf_counter()
    result = analyze(getattr(llm_configs, case.config), gpu="l4", plan=False,
                     suggest=False, **case.options)
    seconds = time.perf_counter() - started
    finetune = result.model.warnings
    breakdown = {key: int(value) for key, value in result.breakdown.items()}  # type: ignore[call-overload]
    return {
        "seconds": seconds, "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        * 1024, "nodes": len(result.graph.nodes), "params": result.params.count,
        "peak_bytes": int(result.peak_bytes),  # type: ignore[call-overload]
        "breakdown": breakdown, "notes": list(finetune),
        "fits_l4": result.fit.fits if result.fit else None,
        "required_bytes": int(result.fit.required_bytes) if result.fit else None,
    }


def table_of_cases() -> None:
    print("| case | nodes | live-tensor peak | parameters | optimizer state | saved activations"
          " | L4 (24 GB): device total, fits | time | peak RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for index, case in enumerate(CASES):
        done = subprocess.run([sys.executable, __file__, "--case", str(index)], cwd=ROOT,
                              capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        parts = row["breakdown"]
        print(f"| {case.name} | {row['nodes']:,} | {_gib(row['peak_bytes'])} |"
              f" {_gib(parts.get('parameters', 0))} | {_gib(parts.get('optimizer_state', 0))} |"
              f" {_gib(parts.get('saved_activations', 0))} |"
              f" {_gib(row['required_bytes'])}, {'yes' if row['fits_l4'] else 'no'} |"
              f" {row['seconds']:.0f} s | {_gib(row['max_rss_bytes'])} |")


def table_of_accuracy() -> None:
    import torch

    from graphmem import analyze
    from graphmem.core.conventions import TrainingOptions
    from graphmem.frontends.torch.finetune import FinetuneOptions
    from graphmem.frontends.torch.loader import parse_tensor_spec
    from graphmem.frontends.torch.peft import fine_tuned
    from graphmem.pipeline.request import Request
    from graphmem.verify.runners.torch_runner import measure_step

    spec = [parse_tensor_spec("4x64:int64")]
    print("| model | LoRA | predicted | measured (cpu) | error |")
    print("|---|---|---:|---:|---:|")
    for name, build, lora in _accuracy_cases():
        options = FinetuneOptions(lora=lora)
        result = analyze(Request(build(), tuple(spec), training=TrainingOptions(),
                                 finetune=options, plan=False))
        real = build()
        with fine_tuned(real, options, "adam"):
            measured = measure_step(_materialized(real, torch), spec, True, "adam").peak_bytes
        predicted = int(result.liveness.activation_peak_bytes)
        print(f"| {name} | r={lora.rank}, {', '.join(lora.targets) or 'peft defaults'},"
              f" dropout {lora.dropout:g} | {predicted:,} | {measured:,} |"
              f" {100 * (predicted - measured) / measured:+.2f}% |")


def _accuracy_cases() -> list[tuple[str, Any, Any]]:
    from graphmem.frontends.torch.finetune import LoraOptions
    from tests.torch_models import hf

    def gpt2() -> Any:
        from transformers import GPT2Config, GPT2LMHeadModel

        return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000,
                                          n_positions=256, use_cache=False))

    def llama_bf16() -> Any:
        import torch

        return hf.llama().to(torch.bfloat16)

    every = ("c_attn", "c_proj", "c_fc")
    return [("GPT-2, 2 layers, fp32", gpt2, LoraOptions()),
            ("GPT-2, 2 layers, fp32", gpt2, LoraOptions(16, 32, 0.1, every)),
            ("Llama, 2 layers, fp32", hf.llama, LoraOptions(16, 32, 0.0, (
                "q_proj", "k_proj", "v_proj", "o_proj"))),
            ("Llama, 2 layers, bf16", llama_bf16, LoraOptions(16, 32, 0.0, (
                "q_proj", "k_proj", "v_proj", "o_proj")))]


def _materialized(model: Any, torch: Any) -> Any:
    """The adapters graphmem made on the meta device, as real random parameters."""
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is not None and param.is_meta:
                module._parameters[name] = torch.nn.Parameter(
                    torch.randn(param.shape, dtype=param.dtype) * 0.01,
                    requires_grad=param.requires_grad)
    return model


def _gib(size: int | None) -> str:
    return "-" if size is None else f"{size / GIB:.2f} GiB"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--accuracy", action="store_true", help="only the CPU accuracy table")
    args = parser.parse_args()
    if args.case is not None:
        print(json.dumps(run_case(args.case)))
        return
    if not args.accuracy:
        table_of_cases()
        print()
    table_of_accuracy()


if __name__ == "__main__":
    main()
