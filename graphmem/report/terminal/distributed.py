"""Terminal rendering of per-GPU distributed memory and the KV cache (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from graphmem.core.conventions import ZERO_STAGES
from graphmem.core.safe_text import markup, markup_text, shorten
from graphmem.core.units import format_bytes, format_bytes_sym
from graphmem.pipeline.analysis import Analysis
from graphmem.report.kv_layers import is_plain, per_token_formula, state_note
from graphmem.report.terminal.ranks import layout_text, ranks_table

if TYPE_CHECKING:  # rendered where the analysis has them: their modules are loaded then
    from graphmem.distributed.kv_cache import KvCacheReport
    from graphmem.distributed.ranks import DistributedReport
    from graphmem.distributed.strategies import PerRankMemory

_LAYOUT_TEXT = {
    "traced": "model states as traced",
    "zero-paper": "2-byte params/grads + fp32 master in the optimizer (ZeRO paper)",
    "deepspeed": "DeepSpeed mixed precision (2 + 2 + 4 fp32 grads + 4 master + optimizer)",
    "megatron": "Megatron-LM mixed precision (2 + 4 fp32 grads + 4 master + optimizer)",
}


def print_distributed(analysis: Analysis, console: Console, kv_cache: bool = True) -> None:
    """The per-GPU tables of a distributed job; the KV cache lines too unless `kv_cache` is
    False (the summary shows them behind --verbose)."""
    if analysis.distributed is not None:
        rank = analysis.distributed.per_rank
        console.print(_per_rank_table(rank, analysis.distributed))
        if analysis.distributed.plan is not None:
            console.print(ranks_table(analysis.distributed.plan))
        note = _bucket_note(rank)
        if note:
            console.print(f"[dim]{note}[/]")
        if analysis.distributed.fit_by_strategy:
            console.print(_fit_table(analysis.distributed, analysis))
    if kv_cache and analysis.kv_cache is not None:
        for line in kv_cache_lines(analysis.kv_cache):
            console.print(line)


def _per_rank_table(rank: PerRankMemory, report: DistributedReport) -> Table:
    config = rank.config
    tp = f" x tensor parallel {config.tensor_parallel}" if config.tensor_parallel > 1 else ""
    tp += layout_text(config.parallel)
    which = "the most-loaded GPU" if report.plan is not None else "per GPU"
    table = Table(title=f"{which}: {config.strategy} on {config.gpus} data-parallel ranks{tp}"
                  f" ({_LAYOUT_TEXT[config.layout]})", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    rows = (("parameters", rank.parameters_bytes), ("gradients", rank.gradients_bytes),
            ("optimizer state", rank.optimizer_state_bytes),
            ("optimizer temporaries", rank.temporaries_bytes),
            ("activations", rank.activations_bytes),
            ("gathered parameters", rank.gathered_bytes),
            ("communication buckets", rank.buckets_bytes),
            *((("ring attention K/V blocks", rank.ring_attention_bytes),)
              if rank.ring_attention_bytes else ()))
    for label, size in rows:
        table.add_row(label, format_bytes(size))
    table.add_row("total per GPU", f"[bold]{format_bytes(rank.total_bytes)}[/]")
    device_total = report.device_total_bytes
    if device_total is not None:  # with --gpu: the number the verdict reads
        table.add_row("+ allocator overhead", format_bytes(report.allocator_bytes or 0))
        table.add_row("+ context + workspaces", format_bytes(report.context_bytes or 0))
        if report.nccl is not None and report.nccl.communicators:
            table.add_row("+ NCCL buffers (estimate, a floor)", format_bytes(report.nccl_bytes))
        table.add_row("device total per GPU", f"[bold]{format_bytes(device_total)}[/]")
    table.add_row("peak at step", f"{rank.peak_step:,} ({markup(shorten(rank.peak_node, 40))})")
    if config.tensor_parallel > 1:
        table.add_row("split by tensor parallel", f"{float(rank.split_parameter_share):.1%}"
                      " of parameter bytes (matmul and embedding weights)")
    return table


def _bucket_note(rank: PerRankMemory) -> str:
    """Why a small model's ZeRO total is mostly communication buckets."""
    config = rank.config
    if not (config.strategy in ZERO_STAGES and rank.buckets_bytes > rank.total_bytes // 2):
        return ""
    return (f"note: DeepSpeed allocates its reduce buffer of reduce_bucket_size"
            f" ({config.zero.reduce_bucket_size:,}) elements whatever the model's size;"
            " --reduce-bucket-size sets it as in the DeepSpeed config")


def _fit_table(report: DistributedReport, analysis: Analysis) -> Table:
    gpu = analysis.fit.gpu.name if analysis.fit else "the GPU"
    usable = format_bytes(report.usable_bytes or 0)
    table = Table(title=f"fewest GPUs of {gpu} ({usable} usable each) by strategy")
    for column in ("strategy", "GPUs", "per GPU"):
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for row in report.fit_by_strategy:
        gpus = "[red]never[/]" if row.total_gpus is None else str(row.total_gpus)
        per_replica = row.model_parallel or row.tensor_parallel
        if row.total_gpus is not None and per_replica > 1:
            gpus += f" ({row.data_parallel} x {per_replica})"
        floor = " (the unsharded part alone)" if row.total_gpus is None else ""
        table.add_row(row.strategy, gpus, format_bytes(row.per_rank_total_bytes) + floor)
    return table


def kv_cache_lines(report: KvCacheReport) -> list[str]:
    shape = report.shape
    if is_plain(shape.groups):
        head = (f"KV cache: 2 x {shape.layers} layers x batch x {shape.kv_heads} KV heads x"
                f" {shape.head_dim} head dim x context x {shape.dtype_bytes} B ({shape.dtype})")
    else:
        head = (f"KV cache per token per sequence ({shape.dtype}):"
                f" {per_token_formula(shape.groups, shape.dtype_bytes)}")
    head += (f" = {format_bytes(shape.per_token_bytes)} per token per sequence"
             f"{state_note(shape.groups, shape.state_dtype_bytes or shape.dtype_bytes)}"
             f" \\[{markup_text(shape.source)}]")  # literal brackets, not a style tag
    lines = [head]
    if report.batch is not None:
        lines.append(f"  at batch {report.batch}: {markup_text(format_bytes_sym(report.bytes))}")
    if report.copies > 1:
        lines.append("  the graph takes the past as inputs and returns it as present outputs:"
                     f" {report.copies} copies are live in a step")
    if report.max_context is not None:
        lines.append(f"  longest context that fits: [bold]{report.max_context:,}[/] tokens"
                     f" ({format_bytes(report.base_bytes or 0)} for weights and one step's"
                     f" activations, {format_bytes(report.usable_bytes or 0)} usable)")
    elif report.max_context_reason:
        lines.append(f"  {markup_text(report.max_context_reason)}")
    return lines
