"""Suggestions for a PyTorch training step, each saving measured by re-tracing the model.

Nothing here is a formula alone: checkpoint plans are re-traced with the chosen modules
wrapped in non-reentrant `torch.utils.checkpoint` (graphmem/frontends/torch/checkpoint.py),
AMP is re-traced under autocast, and batch sizes are re-traced at each size probed. Every
re-trace runs graphmem's whole analysis (fake tensors, no weights) on the changed step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn

from graphmem.core.units import format_bytes
from graphmem.devices.gpus import GpuSpec
from graphmem.frontends.torch.checkpoint import checkpointed
from graphmem.frontends.torch.loader import TensorSpec
from graphmem.frontends.torch.rewrites import can_pool, pooled_head
from graphmem.passes.dims import value_bytes
from graphmem.passes.max_batch import find_max_batch
from graphmem.pipeline.analysis import Analysis
from graphmem.suggest.candidates import find_candidates
from graphmem.suggest.cards import (
    GRAPH_FC_NOTE,
    Suggestion,
    SuggestionReport,
    amp_for,
    checkpoint_suggestion,
    fc_head_suggestion,
    flops,
    graph_report,
    graph_suggestions,
    latency_s,
    memory_budget,
    over_budget,
    peak,
)
from graphmem.suggest.layer_hints import find_fc_heads, peak_with_pooled_head
from graphmem.suggest.search import PlanOutcome, plan_checkpoints

MAX_SUGGESTED_BATCH = 1 << 14  # the batch search stops here


@dataclass(frozen=True)
class TrainingStep:
    """How the analysed step was traced, so it can be traced again with one change."""

    module: nn.Module
    specs: tuple[TensorSpec, ...]
    optimizer: str
    amp: str | None
    loss: Callable[..., torch.Tensor] | None
    gpu: GpuSpec | None


def retrace(step: TrainingStep, checkpoints: tuple[str, ...] = (), amp: str | None = None,
            batch: int | None = None) -> Analysis:
    """graphmem's analysis of the step with modules checkpointed, AMP, or another batch."""
    from graphmem.frontends.torch.analyze import analyze_torch

    specs = with_batch(step.specs, batch) if batch is not None else list(step.specs)
    with checkpointed(step.module, checkpoints):
        return analyze_torch(step.module, specs, train=True, optimizer=step.optimizer,
                             amp=amp, loss=step.loss, plan=False, suggest=False)


def with_batch(specs: tuple[TensorSpec, ...], batch: int) -> list[TensorSpec]:
    """Every input whose first dim is the batch (the first input's) at `batch` instead."""
    old = specs[0].shape[0]
    return [TensorSpec((batch, *s.shape[1:]), s.dtype) if s.shape and s.shape[0] == old else s
            for s in specs]


def torch_suggestions(base: Analysis, step: TrainingStep, budget_bytes: int | None,
                      budget_source: str) -> SuggestionReport:
    base_latency = latency_s(base, step.gpu)

    def outcome(changed: Analysis, modules: tuple[str, ...]) -> PlanOutcome:
        latency = latency_s(changed, step.gpu)
        extra_time = None if latency is None or base_latency is None else latency - base_latency
        return PlanOutcome(modules, peak(changed), flops(changed) - flops(base), extra_time)

    def reanalyze(modules: tuple[str, ...]) -> PlanOutcome:
        changed = retrace(step, modules, step.amp) if modules else base
        return outcome(changed, modules)

    sizes = value_bytes(base.graph, base.dims)
    candidates = find_candidates(base.graph, base.costs, sizes)
    plan = plan_checkpoints(candidates, peak(base), budget_bytes, reanalyze)
    found: list[Suggestion] = []
    stateful = frozenset(c.path for c in candidates if c.updates_buffers)
    checkpoint = checkpoint_suggestion(plan, flops(base), stateful)
    if checkpoint is not None:
        found.append(checkpoint)
    found += amp_suggestions(base, step, outcome)
    if budget_bytes is not None:
        found += batch_suggestions(base, step, budget_bytes)
    found += graph_suggestions(base, fc_heads=False)
    found += fc_head_suggestions(base, step)
    return SuggestionReport(budget_bytes, budget_source, peak(base), tuple(found), plan.curve)


TORCH_FC_NOTE = ("the step re-traced with the layer replaced by global average pooling and a"
                 " Linear(C, out) (graphmem/frontends/torch/rewrites.py) and analysed again")


def fc_head_suggestions(base: Analysis, step: TrainingStep) -> list[Suggestion]:
    """FC heads on flattened feature maps, each re-traced with a pooled head."""
    sizes = value_bytes(base.graph, base.dims)
    found = []
    for head in find_fc_heads(base.graph, base.params.count, sizes):
        if can_pool(step.module, head.module_path, head.spatial_positions):
            with pooled_head(step.module, head.module_path, head.spatial_positions):
                changed = retrace(step, (), step.amp)
            found.append(fc_head_suggestion(head, peak(base), peak(changed),
                                            flops(changed) - flops(base), TORCH_FC_NOTE))
        else:
            new_peak = peak_with_pooled_head(base.graph, sizes, head, base.dims.bound)
            found.append(fc_head_suggestion(head, peak(base), new_peak, None, GRAPH_FC_NOTE))
    return found


def amp_suggestions(base: Analysis, step: TrainingStep,
                    outcome: Callable[[Analysis, tuple[str, ...]], PlanOutcome]
                    ) -> list[Suggestion]:
    if step.amp is not None:
        return []
    amp = amp_for(step.gpu)
    result = outcome(retrace(step, (), amp), ())
    dtype = "torch.bfloat16" if amp == "bf16" else "torch.float16"
    why = ("fp16: the GPU has no bf16 rate; use torch.amp.GradScaler to keep small gradients"
           if amp == "fp16" else "bf16 and fp16 activations have the same size; bf16 needs no"
           " loss scaling (Ampere or newer)")
    return [Suggestion(
        "amp", f"autocast {amp}", (), peak(base) - result.peak_bytes, result.peak_bytes,
        result.extra_flops, result.extra_time_s,
        f'with torch.autocast("cuda", dtype={dtype}):\n    loss = loss_fn(model(x))',
        "the step re-traced under autocast (CPU autocast's op lists, which follow CUDA's for"
        " matmul and conv) and analysed again; weights, gradients and optimizer state stay"
        f" fp32; {why}")]


def batch_suggestions(base: Analysis, step: TrainingStep, budget_bytes: int) -> list[Suggestion]:
    """The largest batch under budget, and gradient accumulation when the batch must shrink."""
    batch = step.specs[0].shape[0] if step.specs[0].shape else None
    if batch is None:
        return []
    found = []
    largest = max_batch(step, step.amp, budget_bytes, batch, peak(base))
    if largest is not None:
        found.append(_batch_card(largest, step.amp, budget_bytes))
        if 0 < largest.max_batch < batch:
            found.append(_accumulation_card(step, batch, largest.max_batch, peak(base)))
    if step.amp is None:
        amp = amp_for(step.gpu)
        with_amp = max_batch(step, amp, budget_bytes, batch, None)
        if with_amp is not None:
            found.append(_batch_card(with_amp, amp, budget_bytes))
    return found


@dataclass(frozen=True)
class BatchFit:
    max_batch: int
    peak_bytes: int | None  # re-analysed peak at max_batch
    amp: str | None


def max_batch(step: TrainingStep, amp: str | None, budget_bytes: int, batch: int,
              peak_at_batch: int | None) -> BatchFit | None:
    """Exact: every batch the search tries is re-traced; a line through two guides it.

    The line goes through the batch and half of it: at small batches the optimizer step's
    temporaries, not the activations, can make the peak, which bends the curve there.
    """
    peaks: dict[int, int] = {} if peak_at_batch is None else {batch: peak_at_batch}

    def exact(size: int) -> int:
        if size not in peaks:
            peaks[size] = peak(retrace(step, (), amp, size))
        return peaks[size]

    low, high = max(batch // 2, 1), max(batch, 2)
    slope = (exact(high) - exact(low)) / (high - low)

    def estimate(size: int) -> int:
        return int(exact(low) + slope * (size - low))

    result = find_max_batch("batch", budget_bytes, estimate, exact, MAX_SUGGESTED_BATCH)
    if result.max_batch is None:
        return None
    return BatchFit(result.max_batch, result.peak_at_max_bytes, amp)


def _batch_card(fit: BatchFit, amp: str | None, budget_bytes: int) -> Suggestion:
    label = f" with autocast {amp}" if amp else ""
    if fit.max_batch == 0:
        title = f"even batch 1 does not fit{label}"
    elif fit.max_batch >= MAX_SUGGESTED_BATCH:
        title = f"largest batch that fits{label}: {fit.max_batch} or more (the search stops)"
    else:
        title = f"largest batch that fits{label}: {fit.max_batch}"
    return Suggestion(
        "batch", title, (), None, fit.peak_bytes, None, None, None,
        f"each batch size tried was re-traced and analysed (peak under"
        f" {format_bytes(budget_bytes)} at the batch, over it at the next); the peak is affine"
        " in the batch for most models, which only guides the search")


def _accumulation_card(step: TrainingStep, batch: int, largest: int,
                       base_peak: int) -> Suggestion:
    micro = max(d for d in range(1, largest + 1) if batch % d == 0)
    steps = batch // micro
    micro_peak = peak(retrace(step, (), step.amp, micro))
    return Suggestion(
        "grad_accum", f"micro-batch {micro} x {steps} accumulation steps", (),
        base_peak - micro_peak, micro_peak, 0, None,
        f"for x_part, y_part in zip(x.split({micro}), y.split({micro})):\n"
        f"    (loss_fn(model(x_part), y_part) / {steps}).backward()\n"
        "optimizer.step()\noptimizer.zero_grad(set_to_none=True)",
        f"keeps the effective batch {batch} = {micro} x {steps}; the micro-batch was re-traced;"
        " BatchNorm statistics see the micro-batch only")


def with_suggestions(analysis: Analysis, report: SuggestionReport) -> Analysis:
    return replace(analysis, suggestions=report)


def suggestions_for(analysis: Analysis, step: TrainingStep | None, suggest: bool | None,
                    memory_budget_bytes: int | None) -> Analysis:
    """`analysis` with suggestions when asked (`suggest`), or, with `suggest` None, when it
    is a training step over its budget (a user whose model does not fit expects them)."""
    budget, source = memory_budget(analysis, memory_budget_bytes)
    wanted = suggest or (suggest is None and step is not None and over_budget(analysis, budget))
    if not wanted:
        return analysis
    if step is None:
        return with_suggestions(analysis, graph_report(analysis, memory_budget_bytes))
    return with_suggestions(analysis, torch_suggestions(analysis, step, budget, source))
