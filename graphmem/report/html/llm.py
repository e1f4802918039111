"""The HTML report's LLM section: what fine-tuning applied (LoRA, QLoRA, gradient
checkpointing, MoE routing) and the serving plan (--serve). The numbers are the ones the JSON
gives under `model.finetune` and `memory.serving`, and the terminal prints
(graphmem/report/terminal/llm.py); each size is shown rounded with its exact bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from graphmem.core.kv_layers import NOTHING_GROWS
from graphmem.core.safe_text import printable
from graphmem.core.units import count_noun, format_bytes
from graphmem.pipeline.analysis import Analysis
from graphmem.report.engine_log import block_name, engine_name, log_lines, share_name
from graphmem.report.kv_layers import is_plain

if TYPE_CHECKING:  # rendered where the analysis has them: their modules are loaded then
    from graphmem.distributed.serving import ServingReport
    from graphmem.frontends.torch.finetune import FinetuneReport


class LlmRow(NamedTuple):
    label: str
    value: str
    exact: str = ""  # the exact number behind a rounded size ("1,234 B"), else ""


class LlmView(NamedTuple):
    finetune_title: str  # "" without a fine-tuning report
    finetune: tuple[LlmRow, ...]
    serving: tuple[LlmRow, ...]  # () without --serve
    serving_fits: bool | None  # None without --serve
    serving_verdict: str


def llm_view(analysis: Analysis) -> LlmView | None:
    """None when the analysis has neither a fine-tuning report nor a serving plan."""
    report = analysis.finetune
    plan = analysis.kv_cache.serving if analysis.kv_cache else None
    if report is None and plan is None:
        return None
    return LlmView(
        finetune_title=_finetune_title(report) if report else "",
        finetune=finetune_rows(report) if report else (),
        serving=serving_rows(plan) if plan else (),
        serving_fits=None if plan is None else plan.max_sequences >= 1,
        serving_verdict=_verdict(plan) if plan else "")


def _sized(label: str, size: int, note: str = "") -> LlmRow:
    return LlmRow(label, format_bytes(size) + (f" ({note})" if note else ""), f"{size:,} B")


def _finetune_title(report: FinetuneReport) -> str:
    applied = report.lora or report.nf4 or report.checkpointed_layers
    title = "Fine-tuning" if applied else "Model"
    if report.hf is not None:
        title += f": {printable(report.hf.architecture)} ({report.hf.dtype})"
    return title


def finetune_rows(report: FinetuneReport) -> tuple[LlmRow, ...]:
    params = report.params
    rows = [LlmRow("parameters", f"{params.total:,}")]
    if report.hf is not None and report.hf.max_positions:
        rows.append(LlmRow("position limit", f"{report.hf.max_positions:,} tokens"))
    if report.lora or report.nf4 or params.frozen:
        rows += [_sized("trainable", params.trainable_bytes, f"{params.trainable:,}"),
                 _sized("frozen", params.frozen_bytes, f"{params.frozen:,}")]
    if report.lora is not None:
        lora = report.lora
        rows.append(LlmRow("LoRA", f"r={lora.rank}, alpha={lora.alpha:g} on"
                           f" {count_noun(lora.modules, 'linear module')}"
                           f" ({printable(', '.join(lora.targets))}); adapters"
                           f" {lora.adapter_params:,} parameters, {lora.adapter_dtype}"))
    if report.nf4 is not None:
        nf4, layout = report.nf4, report.nf4.bytes
        rows += [_sized("QLoRA: NF4 linear modules", layout.total,
                        f"{count_noun(nf4.modules, 'linear module')},"
                        f" {layout.weights:,} weights"),
                 _sized("  packed codes", layout.packed),
                 _sized("  quantization constants", layout.constants),
                 _sized(f"largest weight dequantized ({nf4.compute_dtype})",
                        nf4.largest_dequantized_bytes)]
    if report.checkpointed_layers:
        layers = report.checkpointed_layers
        rows.append(LlmRow("gradient checkpointing", f"{len(layers):,} layers:"
                           f" {printable(layers[0])} .. {printable(layers[-1])}"))
    if report.moe is not None:
        moe = report.moe
        rows += [LlmRow("MoE experts", f"{moe.experts_per_token} of {moe.experts} per token"),
                 LlmRow("active parameters per token", f"{moe.active_params_per_token:,} of"
                        f" {moe.total_params:,}")]
    if report.pageable_optimizer_bytes:
        # bitsandbytes' paged optimizers keep it in CUDA managed memory, evictable to the host
        rows.append(_sized("optimizer state (pageable if paged)",
                           report.pageable_optimizer_bytes))
    return tuple(rows)


def serving_rows(plan: ServingReport) -> tuple[LlmRow, ...]:
    config = plan.config
    reserve = plan.reserve
    graphs = reserve.cuda_graph_bytes if reserve is not None else 0
    return (
        LlmRow("GPU", f"{printable(plan.gpu_name)}, tensor parallel {config.tensor_parallel},"
               f" {count_noun(plan.replicas, 'replica')}"),
        LlmRow("engine", engine_name(plan), f"{share_name(plan)} {plan.memory_fraction:g}"),
        _sized("budget per GPU", plan.budget_bytes,
               f"{plan.memory_fraction:g} x {format_bytes(plan.capacity_bytes)}"),
        _sized("weights", plan.weights_bytes),
        _sized("step activation peak", plan.activation_bytes),
        *((_sized("CUDA graphs", graphs),) if graphs else ()),
        _sized("CUDA context", plan.cuda_context_bytes),
        _sized("KV cache", plan.kv_cache_bytes),
        _sized("KV per token", plan.per_token_bytes),
        LlmRow("blocks", f"{plan.num_blocks:,} of "
               + ("one sequence's states" if plan.state_only else f"{plan.block_size} tokens"),
               f"{plan.block_bytes:,} B each ({block_name(plan)})"),
        *_layer_group_rows(plan),
        *(LlmRow("engine log", line, "") for line in log_lines(plan)),
        LlmRow(f"sequences of {plan.context:,} tokens at once", f"{plan.total_sequences:,}",
               f"{plan.blocks_per_sequence:,} blocks each"),
        LlmRow("longest context", *_longest_context(plan)),
    )


def _longest_context(plan: ServingReport) -> tuple[str, str]:
    """(the tokens, what limits them): `any length` where nothing grows with the context."""
    if plan.context_limited_by == NOTHING_GROWS:
        return "any length", NOTHING_GROWS
    return f"{plan.max_context:,} tokens", f"limited by {plan.context_limited_by}"


def _layer_group_rows(plan: ServingReport) -> tuple[LlmRow, ...]:
    """What a sequence holds per layer type, where not every layer is full attention."""
    if is_plain(plan.layer_groups):
        return ()
    return tuple(_sized(f"KV per sequence: {use.label}", use.bytes,
                        count_noun(use.layers, "layer")
                        + (f" x {use.tokens:,} tokens" if use.tokens else ""))
                 for use in plan.layer_groups)


def _verdict(plan: ServingReport) -> str:
    """The same verdict as the analysis's fit under --serve (serving.py `serving_fit`)."""
    from graphmem.distributed.serving import one_sequence_bytes

    if plan.max_sequences >= 1:
        return f"fits: {plan.total_sequences:,} sequences of {plan.context:,} tokens at once"
    return (f"does not fit: one {plan.context:,}-token sequence needs"
            f" {format_bytes(one_sequence_bytes(plan))} of the"
            f" {format_bytes(plan.budget_bytes)} budget")
