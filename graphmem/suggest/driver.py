"""The one suggestion driver: what to change so the model fits, each saving re-analysed.

`suggest(analysis, inputs, reanalyze)` works the same for both front ends. Graph cards
(in-place ops, grouped convs, FC heads) need only the analysed graph; a training step also
gets checkpointing (plans searched by graphmem/suggest/search.py), AMP, and with a budget the
largest batch and gradient accumulation. Every saving comes from `reanalyze(change)`: the
pipeline's whole analysis of the model with that one change (graphmem/pipeline/suggestions.py
maps a Change onto the Request). A change the front end cannot make (a pooled FC head in an
ONNX graph) answers None, and the card falls back on the graph-level estimate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from graphmem.core.conventions import Amp
from graphmem.core.ir import Graph
from graphmem.core.progress import steps
from graphmem.core.units import format_bytes
from graphmem.devices.gpus import GpuSpec
from graphmem.passes.batch_scaling import peak_at_batch, scale_by_batch
from graphmem.passes.dims import value_bytes
from graphmem.passes.max_batch import find_max_batch
from graphmem.suggest.candidates import SegmentCandidate, find_candidates
from graphmem.suggest.cards import (
    GRAPH_FC_NOTE,
    Analysed,
    Suggestion,
    SuggestionKind,
    SuggestionReport,
    amp_for,
    checkpoint_snippet,
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
from graphmem.suggest.onnx_step import ONNX_CHECKPOINT_NOTE, onnx_checkpoint_terms
from graphmem.suggest.search import CheckpointPlan, PlanOutcome, plan_checkpoints

MAX_SUGGESTED_BATCH = 1 << 14  # the batch search stops here
FREE_DIMS_CHECKPOINT_NOTE = ("checkpointing is searched with every dim bound: give --batch /"
                             " --dim NAME=VALUE")
TORCH_CHECKPOINT_NOTE = (
    "the step re-traced with these modules checkpointed (torch.utils.checkpoint, non-reentrant;"
    " make_fx records the recomputation in backward) and analysed again")
TORCH_FC_NOTE = ("the step re-traced with the layer replaced by global average pooling and a"
                 " Linear(C, out) (graphmem/frontends/torch/rewrites.py) and analysed again")


@dataclass(frozen=True)
class Change:
    """One change to the analysed training step, for the pipeline to analyse again."""

    amp: Amp | None  # the step's autocast precision after the change
    checkpoints: tuple[str, ...] | None = None  # checkpointed modules; None: the step's own
    batch: int | None = None  # None: the analysed batch
    pooled_head: tuple[str, int] | None = None  # (FC layer, flattened positions) pooled first


# the model analysed again with one change; None where its front end cannot make the change
Reanalyze = Callable[[Change], Analysed | None]


@dataclass(frozen=True)
class SuggestInputs:
    """What the driver needs of the request behind the analysis."""

    traced: bool  # a PyTorch model (re-traced), else an ONNX graph (rebuilt)
    training: bool
    amp: Amp | None  # the analysed step's autocast precision
    batch: int | None  # the analysed (micro-)batch; batch cards need one
    budget_bytes: int | None  # --memory-budget in bytes; None: the GPU's usable memory
    enabled: bool | None = True  # None: only for a training step over its budget


def suggest(analysis: Analysed, inputs: SuggestInputs, reanalyze: Reanalyze
            ) -> SuggestionReport | None:
    """The suggestions, or None when they were not asked for (nor automatic)."""
    budget, source = memory_budget(analysis, inputs.budget_bytes)
    if not (inputs.enabled or (inputs.enabled is None and inputs.training
                               and over_budget(analysis, budget))):
        return None
    report = graph_report(analysis, inputs.budget_bytes)
    if not inputs.training:
        return report
    if analysis.dims.free:  # re-analysed savings need every dim bound
        return replace(report, notes=(*report.notes, FREE_DIMS_CHECKPOINT_NOTE))
    # each candidate change is a whole re-analysis (seconds on a transformer): count them
    with steps("re-analysed changes", None) as done:
        reanalyze = _memoized(_counted(reanalyze, done), inputs)
        driver = _Driver(analysis, inputs, reanalyze)
        plan, checkpoint = driver.checkpoint(budget)
        found = [card for card in (checkpoint, driver.amp()) if card is not None]
        if budget is not None:
            found += batch_suggestions(analysis, inputs, reanalyze, budget)
        graph_cards, notes = graph_suggestions(analysis, fc_heads=False)
        found += graph_cards
        found += driver.fc_heads()
    return SuggestionReport(budget, source, peak(analysis), tuple(found), plan.curve, notes)


def _counted(reanalyze: Reanalyze, done: Callable[[int], None]) -> Reanalyze:
    """`reanalyze` that reports how many changes it has analysed (graphmem/core/progress.py)."""
    count = 0

    def counted(change: Change) -> Analysed | None:
        nonlocal count
        result = reanalyze(change)
        count += 1
        done(count)
        return result

    return counted


def _memoized(reanalyze: Reanalyze, inputs: SuggestInputs) -> Reanalyze:
    """`reanalyze` that analyses the step at its own batch under another autocast once: the
    AMP card and the AMP batch search's first probe are one trace. A traced step at its own
    batch is the step unchanged (`with_batch` keeps the inputs), so `batch` is dropped there;
    an ONNX graph's is kept (its request binds the batch by --batch, the change by --dim).
    Only those analyses are kept (each holds a whole graph: BERT-base's about 4 MiB apiece and
    the search makes a dozen); the batch search keeps its own peaks."""
    memo: dict[Change, Analysed | None] = {}

    def memoized(change: Change) -> Analysed | None:
        if inputs.traced and change.batch is not None and change.batch == inputs.batch:
            change = replace(change, batch=None)
        if change != Change(change.amp):
            return reanalyze(change)
        if change not in memo:
            memo[change] = reanalyze(change)
        return memo[change]

    return memoized


class _Driver:
    """The re-analysed cards of one training step; `outcome` measures each change."""

    def __init__(self, base: Analysed, inputs: SuggestInputs, reanalyze: Reanalyze) -> None:
        self.base, self.inputs, self.reanalyze = base, inputs, reanalyze
        self.gpu: GpuSpec | None = base.fit.gpu if base.fit is not None else None
        self.base_latency = latency_s(base, self.gpu)

    def analysed(self, change: Change) -> Analysed:
        changed = self.reanalyze(change)
        if changed is None:
            raise AssertionError(f"internal: the pipeline could not analyse {change}")
        return changed

    def outcome(self, changed: Analysed, modules: tuple[str, ...]) -> PlanOutcome:
        latency = latency_s(changed, self.gpu)
        extra = None if latency is None or self.base_latency is None else (
            latency - self.base_latency)
        return PlanOutcome(modules, peak(changed), flops(changed) - flops(self.base), extra)

    def checkpoint(self, budget: int | None) -> tuple[CheckpointPlan, Suggestion | None]:
        base, amp = self.base, self.inputs.amp

        def planned(modules: tuple[str, ...]) -> PlanOutcome:
            changed = self.analysed(Change(amp, checkpoints=modules)) if modules else base
            return self.outcome(changed, modules)

        snippet: Callable[[tuple[str, ...]], str]
        if self.inputs.traced:
            candidates = find_candidates(base.graph, base.costs, value_bytes(base.graph,
                                                                             base.dims))
            stateful = _updates_buffers(candidates)
            how, snippet = TORCH_CHECKPOINT_NOTE, checkpoint_snippet
        else:
            candidates, stateful, snippet = onnx_checkpoint_terms(base)
            how = ONNX_CHECKPOINT_NOTE
        plan = plan_checkpoints(candidates, peak(base), budget, planned)
        return plan, checkpoint_suggestion(plan, flops(base), stateful, how, snippet)

    def amp(self) -> Suggestion | None:
        """One card: the step analysed again under autocast (bf16 where the GPU runs it)."""
        if self.inputs.amp is not None:
            return None
        amp = amp_for(self.gpu)
        result = self.outcome(self.analysed(Change(amp)), ())
        snippet, note = _amp_text(amp, self.inputs.traced)
        return Suggestion(SuggestionKind.AMP, f"autocast {amp}", (),
                          peak(self.base) - result.peak_bytes, result.peak_bytes,
                          result.extra_flops, result.extra_time_s, snippet, note)

    def fc_heads(self) -> list[Suggestion]:
        """FC heads on flattened feature maps, each analysed again with a pooled head where
        the front end can rewrite it, else estimated on the graph."""
        base = self.base
        sizes = value_bytes(base.graph, base.dims)
        found = []
        for head in find_fc_heads(base.graph, base.params.count, sizes):
            changed = self.reanalyze(Change(self.inputs.amp, pooled_head=(
                head.module_path, head.spatial_positions))) if head.module_path else None
            if changed is not None:
                found.append(fc_head_suggestion(head, peak(base), peak(changed),
                                                flops(changed) - flops(base), TORCH_FC_NOTE))
            else:
                new_peak = peak_with_pooled_head(base.graph, sizes, head, base.dims.bound)
                found.append(fc_head_suggestion(head, peak(base), new_peak, None,
                                                GRAPH_FC_NOTE))
        return found


def _updates_buffers(candidates: list[SegmentCandidate]) -> frozenset[str]:
    return frozenset(c.path for c in candidates if c.updates_buffers)


def _amp_text(amp: Amp, traced: bool) -> tuple[str, str]:
    """The AMP card's snippet and note: how to apply it and how it was analysed."""
    if not traced:
        return (f"graphmem analyze MODEL.onnx --train --amp {amp}  # or torch.autocast in the"
                " source",
                "the training step rebuilt from the graph under autocast (--amp; graphmem/"
                "passes/training.py) and analysed again; weights, gradients and optimizer"
                " state stay fp32")
    dtype = "torch.bfloat16" if amp == Amp.BF16 else "torch.float16"
    why = ("fp16: the GPU has no bf16 rate; use torch.amp.GradScaler to keep small gradients"
           if amp == Amp.FP16 else "bf16 and fp16 activations have the same size; bf16 needs no"
           " loss scaling (Ampere or newer)")
    return (f'with torch.autocast("cuda", dtype={dtype}):\n    loss = loss_fn(model(x))',
            "the step re-traced under autocast (CPU autocast's op lists, which follow CUDA's"
            " for matmul and conv) and analysed again; weights, gradients and optimizer state"
            f" stay fp32; {why}")


# ----- batch and gradient accumulation --------------------------------------------------------
def batch_suggestions(base: Analysed, inputs: SuggestInputs, reanalyze: Reanalyze,
                      budget_bytes: int) -> list[Suggestion]:
    """The largest batch under budget, and gradient accumulation when the batch must shrink."""
    batch = inputs.batch
    if batch is None:
        return []
    search = _BatchSearch(inputs, reanalyze, budget_bytes)
    found = []
    largest = search.largest(inputs.amp, batch, base)
    if largest is not None:
        found.append(search.card(largest, inputs.amp))
        if 0 < largest.max_batch < batch:
            found.append(search.accumulation_card(batch, largest.max_batch, peak(base)))
    if inputs.amp is None:
        amp = amp_for(base.fit.gpu if base.fit is not None else None)
        with_amp = search.largest(amp, batch, None)
        if with_amp is not None:
            found.append(search.card(with_amp, amp))
    return found


@dataclass(frozen=True)
class BatchFit:
    max_batch: int
    peak_bytes: int | None  # re-analysed peak at max_batch
    amp: Amp | None
    scaled: tuple[int, ...] = ()  # the traced batches the others were scaled from


SECANT_STEPS = 3  # refinements of the line that guides the batch search


def _secant_points(exact: Callable[[int], int], low: int, high: int,
                   budget_bytes: int) -> tuple[int, int]:
    """Two batches whose line through the exact peaks guides the search: from (low, high),
    up to SECANT_STEPS times, the batch where the line crosses the budget is analysed and
    the line redrawn through it and the previous point. The line through small batches
    bends (the optimizer step's temporaries weigh more there): BERT-base's through 4 and 8
    crossed a budget at 5,446 where the answer was under 3,400, and the search then re-traced
    the model 25 times walking down to it; near the answer the peak is affine in the batch
    for most models, so the redrawn line lands within a probe or two."""
    other, latest = low, high
    for _ in range(SECANT_STEPS):
        low, high = sorted((other, latest))
        slope = (exact(high) - exact(low)) / (high - low)
        if slope <= 0:
            break
        crossing = high + (budget_bytes - exact(high)) / slope
        guess = min(max(int(crossing), 1), MAX_SUGGESTED_BATCH)
        if guess in (low, high):
            break
        exact(guess)
        other, latest = latest, guess  # the secant: the two latest points
    low, high = sorted((other, latest))
    return low, high


def _far_batch(batch: int) -> tuple[int, int]:
    """The batch the search starts from and the far end of its first line."""
    first = max(batch, 1)
    return first, MAX_SUGGESTED_BATCH if first != MAX_SUGGESTED_BATCH else first // 2


class _BatchSearch:
    def __init__(self, inputs: SuggestInputs, reanalyze: Reanalyze, budget_bytes: int) -> None:
        self.inputs, self.reanalyze, self.budget_bytes = inputs, reanalyze, budget_bytes
        self.how = "re-traced" if inputs.traced else "analysed again"  # the micro-batch was...
        self.peaks: dict[tuple[Amp | None, int], int] = {}  # (amp, batch): re-analysed peak

    def analysed(self, amp: Amp | None, batch: int) -> Analysed:
        changed = self.reanalyze(Change(amp, batch=batch))
        if changed is None:
            raise AssertionError(f"internal: no analysis at batch {batch}")
        self.peaks[amp, batch] = peak(changed)
        return changed

    def peak_at(self, amp: Amp | None, batch: int) -> int:
        if (amp, batch) not in self.peaks:  # the accumulation card's micro-batch: probed?
            self.analysed(amp, batch)
        return self.peaks[amp, batch]

    def largest(self, amp: Amp | None, batch: int, at_batch: Analysed | None) -> BatchFit | None:
        """The largest batch that fits (`at_batch`: the step analysed at `batch`, if it was).

        A traced step is traced at the batch and at the far end of the search; where the two
        graphs differ only in batch-proportional dims (graphmem/passes/batch_scaling.py) every
        other batch the search tries is analysed on one graph scaled to it, no trace, and the
        answer is confirmed by a trace at it. Where they do not scale, or the trace disagrees,
        every batch tried is re-traced (the search then gives the answer it always gave)."""
        if not self.inputs.traced:
            known = {} if at_batch is None else {batch: peak(at_batch)}
            return self.search(amp, batch, self.traced_peaks(amp, known))
        first, far = _far_batch(batch)
        small = at_batch if at_batch is not None else self.analysed(amp, first)
        large = self.analysed(amp, far)
        known = {first: peak(small), far: peak(large)}
        scaled = scale_by_batch(small.graph, first, large.graph, far).graph
        del small, large  # each holds a whole graph; the scaled one is all the search needs
        if scaled is not None:
            fit = self.search(amp, batch, _scaled_peaks(scaled, known))
            if fit is not None and self.confirmed(amp, fit, scaled, known):
                return replace(fit, scaled=(first, far))
        return self.search(amp, batch, self.traced_peaks(amp, known))

    def traced_peaks(self, amp: Amp | None, known: dict[int, int]) -> Callable[[int], int]:
        """The peak at a batch, re-analysed (re-traced) where `known` does not have it."""
        peaks = dict(known)

        def exact(size: int) -> int:
            if size not in peaks:
                peaks[size] = self.peak_at(amp, size)
            return peaks[size]

        return exact

    def confirmed(self, amp: Amp | None, fit: BatchFit, scaled: Graph,
                  known: dict[int, int]) -> bool:
        """The scaled graph's peak at the answer is the traced step's (two batches cannot
        tell `k * batch` from a size rounded to a multiple of both)."""
        answer = max(fit.max_batch, 1)  # batch 1 decides "even batch 1 does not fit"
        traced = known[answer] if answer in known else self.peak_at(amp, answer)
        return traced == peak_at_batch(scaled, answer)

    def search(self, amp: Amp | None, batch: int, exact: Callable[[int], int]
               ) -> BatchFit | None:
        """Exact: every batch the search tries is analysed (`exact`); a line through two
        guides it. The first line goes through the batch and the largest batch searched, not
        half the batch: at small batches the optimizer step's temporaries, not the
        activations, can make the peak, which flattens the curve there (BERT-base's peaks at
        4 and 8 differ by 4 KiB), and a line through two small batches then only says "far
        up" (one more probe on BERT-base, each search); the secant steps redraw it near the
        answer."""
        first, far = _far_batch(batch)
        low, high = _secant_points(exact, min(first, far), max(first, far), self.budget_bytes)
        slope = (exact(high) - exact(low)) / (high - low)

        def estimate(size: int) -> int:
            return int(exact(low) + slope * (size - low))

        # the answer is find_max_batch's exact search; the line only says where it starts
        result = find_max_batch("batch", self.budget_bytes, estimate, exact,
                                MAX_SUGGESTED_BATCH)
        if result.max_batch is None:
            return None
        return BatchFit(result.max_batch, result.peak_at_max_bytes, amp)

    def card(self, fit: BatchFit, amp: Amp | None) -> Suggestion:
        label = f" with autocast {amp}" if amp else ""
        if fit.max_batch == 0:
            title = f"even batch 1 does not fit{label}"
        elif fit.max_batch >= MAX_SUGGESTED_BATCH:
            title = f"largest batch that fits{label}: {fit.max_batch} or more (the search stops)"
        else:
            title = f"largest batch that fits{label}: {fit.max_batch}"
        return Suggestion(
            SuggestionKind.BATCH, title, (), None, fit.peak_bytes, None, None, None,
            f"{self.how_probed(fit)} (peak under {format_bytes(self.budget_bytes)} at the"
            " batch, over it at the next); the peak is affine in the batch for most models,"
            " which only guides the search")

    def how_probed(self, fit: BatchFit) -> str:
        """How the batches the search tried were analysed, for the card's note."""
        if fit.scaled:
            small, large = fit.scaled
            return (f"the step was traced at batch {small:,} and {large:,}; every other batch"
                    " size tried was analysed on one graph made of the two, its batch-"
                    "proportional dims scaled to the batch (graphmem/passes/batch_scaling.py),"
                    " and the answer confirmed by a trace at it")
        return (f"each batch size tried was {'re-traced and ' if self.inputs.traced else ''}"
                "analysed")

    def accumulation_card(self, batch: int, largest: int, base_peak: int) -> Suggestion:
        micro = max(d for d in range(1, largest + 1) if batch % d == 0)
        steps = batch // micro
        micro_peak = self.peak_at(self.inputs.amp, micro)
        return Suggestion(
            SuggestionKind.GRAD_ACCUM, f"micro-batch {micro} x {steps} accumulation steps", (),
            base_peak - micro_peak, micro_peak, 0, None,
            f"for x_part, y_part in zip(x.split({micro}), y.split({micro})):\n"
            f"    (loss_fn(model(x_part), y_part) / {steps}).backward()\n"
            "optimizer.step()\noptimizer.zero_grad(set_to_none=True)",
            f"keeps the effective batch {batch} = {micro} x {steps}; the micro-batch was"
            f" {self.how}; BatchNorm statistics see the micro-batch only")


def _scaled_peaks(scaled: Graph, known: dict[int, int]) -> Callable[[int], int]:
    """The peak at a batch: the traced one where `known` has it, else the scaled graph's."""
    peaks = dict(known)

    def exact(size: int) -> int:
        if size not in peaks:
            peaks[size] = peak_at_batch(scaled, size)
        return peaks[size]

    return exact
