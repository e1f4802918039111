"""Terminal lines for an LLM: what fine-tuning applied (LoRA, QLoRA, checkpointing, MoE) and
the serving plan (--serve). Render only: the numbers are the FinetuneReport's
(graphmem/frontends/torch/finetune.py) and the ServingReport's (graphmem/distributed/
serving.py), the ones the JSON gives under `model.finetune` and `memory.serving`.

Each block is at most 8 lines of at most 80 columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from graphmem.core.safe_text import markup
from graphmem.core.units import count_noun, format_bytes, format_si
from graphmem.distributed.vocabulary import SGLANG, TRTLLM
from graphmem.pipeline.analysis import Analysis
from graphmem.report.engine_log import engine_name, log_lines
from graphmem.report.kv_layers import (
    blocks_text,
    group_text,
    is_plain,
    longest_context_text,
)

if TYPE_CHECKING:  # rendered where the analysis has them: their modules are loaded then
    from graphmem.distributed.serving import ServingReport
    from graphmem.frontends.torch.finetune import FinetuneReport


def print_llm(analysis: Analysis, console: Console) -> None:
    """The fine-tuning lines and the serving plan, where the analysis has them."""
    lines = finetune_lines(analysis.finetune) if analysis.finetune else []
    serving = analysis.kv_cache.serving if analysis.kv_cache else None
    if serving is not None:
        lines += serving_lines(serving)
    for line in lines:
        console.print(line, overflow="fold")


def finetune_lines(report: FinetuneReport) -> list[str]:
    params = report.params
    head = "fine-tuning" if report.lora or report.nf4 or report.checkpointed_layers else "model"
    if report.hf is not None:
        hf = report.hf
        limit = f", {hf.max_positions:,} positions" if hf.max_positions else ""
        head += f": {markup(hf.architecture)} ({hf.dtype}{limit})"
    lines = [f"[bold]{head}[/]"]
    if report.lora or report.nf4 or params.frozen:  # else every parameter trains, if any
        lines.append(f"  parameters {params.total:,}: {params.trainable:,} trainable"
                     f" ({format_bytes(params.trainable_bytes)}), {params.frozen:,} frozen")
    if report.lora is not None:
        lora = report.lora
        lines.append(f"  LoRA r={lora.rank} alpha={lora.alpha:g} on"
                     f" {count_noun(lora.modules, 'module')}"
                     f" ({markup(', '.join(lora.targets))}), adapters {lora.adapter_dtype}")
    if report.nf4 is not None:
        nf4 = report.nf4
        layout = nf4.bytes
        lines.append(f"  QLoRA: {count_noun(nf4.modules, 'module')} in NF4,"
                     f" {format_bytes(layout.total)}"
                     f" ({format_bytes(layout.packed)} packed + {format_bytes(layout.constants)}"
                     " constants)")
        lines.append(f"  largest weight dequantized to {nf4.compute_dtype}:"
                     f" {format_bytes(nf4.largest_dequantized_bytes)}")
    if report.checkpointed_layers:
        layers = report.checkpointed_layers
        lines.append(f"  gradient checkpointing on {len(layers)} layers:"
                     f" {markup(layers[0])} .. {markup(layers[-1])}")
    if report.moe is not None:
        moe = report.moe
        lines.append(f"  MoE: {moe.experts_per_token} of {moe.experts} experts per token:"
                     f" {format_si(moe.active_params_per_token)} of"
                     f" {format_si(moe.total_params)} parameters active")
    return lines


def serving_lines(plan: ServingReport) -> list[str]:
    """The plan: the engine's budget, its reserve, the cache and the engine's own log lines
    (graphmem/report/engine_log.py), the longest context and the verdict."""
    config = plan.config
    split = f", TP {config.tensor_parallel}" if config.tensor_parallel > 1 else ""
    replicas = f", {plan.replicas} replicas" if plan.replicas > 1 else ""
    return [
        f"[bold]serving on {markup(plan.gpu_name)}[/]{split}{replicas}"
        f" ({engine_name(plan)}): {_budget_text(plan)}",
        _reserve_text(plan),
        f"  KV {format_bytes(plan.per_token_bytes)} per token; {plan.num_blocks:,} blocks of"
        f" {blocks_text(plan.block_size, plan.block_bytes, plan.state_only)}",
        *_layer_group_lines(plan),
        *(f"  {line}" for line in log_lines(plan)[-2:]),
        f"  longest context: {longest_context_text(plan.max_context, plan.context_limited_by)}",
        serving_verdict(plan),
    ]


def _budget_text(plan: ServingReport) -> str:
    share = f"{plan.memory_fraction:g}"
    if plan.engine == SGLANG:  # a static pool of what is free at start
        free = plan.capacity_bytes - plan.cuda_context_bytes
        return f"pool {share} x {format_bytes(free)} = {format_bytes(plan.budget_bytes)}"
    if plan.engine == TRTLLM:
        return f"KV {share} x (capacity - peak)"
    return f"{share} x {format_bytes(plan.capacity_bytes)} = {format_bytes(plan.budget_bytes)}"


def _reserve_text(plan: ServingReport) -> str:
    reserve = plan.reserve
    if reserve is not None and plan.engine == SGLANG:
        return (f"  weights {format_bytes(plan.weights_bytes)}; KV cache"
                f" {format_bytes(plan.kv_cache_bytes)}; {format_bytes(reserve.outside_bytes)}"
                f" left for a {format_bytes(plan.activation_bytes)} step")
    graphs = reserve.cuda_graph_bytes if reserve is not None else 0
    parts = (f"  weights {format_bytes(plan.weights_bytes)} + peak"
             f" {format_bytes(plan.activation_bytes)}")
    if graphs:
        parts += f" + CUDA graphs {format_bytes(graphs)}"
    if plan.engine == TRTLLM:
        parts += f" + context {format_bytes(plan.cuda_context_bytes)}"
    return f"{parts}; KV cache {format_bytes(plan.kv_cache_bytes)}"


def _layer_group_lines(plan: ServingReport) -> list[str]:
    """One line of what a sequence holds per layer type, where not every layer is full
    attention (then the blocks per sequence say it all)."""
    if is_plain(plan.layer_groups):
        return []
    parts = "; ".join(group_text(use) for use in plan.layer_groups)
    return [f"  KV per sequence {format_bytes(plan.sequence_bytes)}: {parts}"]


def serving_verdict(plan: ServingReport) -> str:
    """The verdict under --serve (the same as the analysis's fit: serving.py `serving_fit`)."""
    from graphmem.distributed.serving import one_sequence_bytes

    if plan.max_sequences >= 1:
        return (f"  [green]fits[/]: {plan.total_sequences:,} sequences of {plan.context:,}"
                f" tokens at once ({plan.blocks_per_sequence:,} blocks each)")
    return (f"  [red]does NOT fit[/]: one {plan.context:,}-token sequence needs"
            f" {format_bytes(one_sequence_bytes(plan))} of {format_bytes(plan.budget_bytes)}")
