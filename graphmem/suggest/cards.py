"""What to change so a model fits: typed suggestions, each with the saving graphmem computed.

Front-door independent: the graph-level suggestions (in-place ops, FC heads, grouped convs)
work on any analysed graph, ONNX or torch.fx; checkpointing, AMP and batch suggestions come
from re-analysing the model with one change (graphmem/suggest/driver.py) and are turned into
cards here. The cards still carry their title and note as text (tests and the JSON schema read
them); the numbers behind them are typed fields.

This layer sits below the pipeline: it reads an analysis through `Analysed`, the few typed
results it needs, which graphmem/pipeline/analysis.py `Analysis` provides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from graphmem.core.conventions import Amp
from graphmem.core.ir import Graph
from graphmem.core.units import count_noun, format_bytes
from graphmem.devices.gpus import GpuSpec
from graphmem.passes.costs import CostReport
from graphmem.passes.dims import DimBinding, value_bytes
from graphmem.passes.fit import GpuFit
from graphmem.passes.liveness import LivenessResult
from graphmem.passes.params import ParamReport
from graphmem.passes.roofline import estimate_roofline
from graphmem.suggest.candidates import forward_nodes
from graphmem.suggest.inplace import InplaceCandidate, find_inplace
from graphmem.suggest.layer_hints import (
    FcHead,
    GroupedConv,
    find_fc_heads,
    find_grouped_convs,
    peak_with_pooled_head,
)
from graphmem.suggest.search import CheckpointPlan, PlanOutcome


class Analysed(Protocol):
    """The results of an analysis the suggestions read (pipeline/analysis.py `Analysis`)."""

    @property
    def graph(self) -> Graph: ...
    @property
    def mode(self) -> str: ...  # "inference" | "training"
    @property
    def dims(self) -> DimBinding: ...
    @property
    def params(self) -> ParamReport: ...
    @property
    def costs(self) -> CostReport: ...
    @property
    def liveness(self) -> LivenessResult: ...
    @property
    def fit(self) -> GpuFit | None: ...


class SuggestionKind(StrEnum):
    CHECKPOINT = "checkpoint"
    INPLACE = "inplace"
    AMP = "amp"
    BATCH = "batch"
    GRAD_ACCUM = "grad_accum"
    FC_HEAD = "fc_head"
    GROUPED_CONV = "grouped_conv"


@dataclass(frozen=True)
class Suggestion:
    kind: SuggestionKind
    title: str
    targets: tuple[str, ...]  # module paths or node names it applies to
    saves_bytes: int | None  # drop of the peak; None where graphmem could not re-analyse
    new_peak_bytes: int | None  # the re-analysed peak after the change
    extra_flops: int | None  # FLOPs the change adds per step (negative: removes)
    extra_time_s: float | None  # roofline time it adds on the chosen GPU
    snippet: str | None  # code to apply it
    note: str  # how the numbers were computed, caveats


@dataclass(frozen=True)
class RuntimeLever:
    """A runtime option the model runs under unchanged, re-analysed: the GPU's device total
    (and largest batch) with it against without it. Its numbers are device totals, not the
    live-tensor peak the cards above change."""

    option: str  # the graphmem flag that models it: "--ort-arena-extend same-as-requested"
    setting: str  # how to set it in the runtime (a provider option)
    device_total_bytes: int | None  # at the analysed dims; None while a dim is free
    base_device_total_bytes: int | None
    max_batch: int | None  # the largest batch whose device total fits; None: not solved
    base_max_batch: int | None
    fits: bool | None  # the verdict with the option (None while a dim is free)

    @property
    def saves_bytes(self) -> int | None:
        if self.device_total_bytes is None or self.base_device_total_bytes is None:
            return None
        return self.base_device_total_bytes - self.device_total_bytes

    @property
    def raises_batch(self) -> bool:
        return (self.max_batch or 0) > (self.base_max_batch or 0)

    @property
    def helps(self) -> bool:
        """It lowers the device total or raises the largest batch."""
        saves = self.saves_bytes
        return (saves is not None and saves > 0) or self.raises_batch


@dataclass(frozen=True)
class SuggestionReport:
    budget_bytes: int | None
    budget_source: str  # where the budget came from, "" when there is none
    base_peak_bytes: int
    suggestions: tuple[Suggestion, ...]
    checkpoint_curve: tuple[PlanOutcome, ...]
    notes: tuple[str, ...] = ()  # what could not be suggested, and why
    runtime_levers: tuple[RuntimeLever, ...] = ()  # runtime options, on the device total


def graph_suggestions(analysis: Analysed, fc_heads: bool = True
                      ) -> tuple[list[Suggestion], tuple[str, ...]]:
    """In-place ops, FC heads and grouped convs of an analysed graph (ONNX or torch.fx), and
    the notes on what was found and not listed; `fc_heads=False` leaves FC heads to a front
    door that can re-trace the model. An in-place op that saves nothing at the peak is not a
    suggestion (a CNN listed 62 Relus 'saving 0 B'): they are counted in a note."""
    graph = analysis.graph
    if analysis.dims.free:
        return [], ()  # savings at the peak need every dim bound
    sizes = value_bytes(graph, analysis.dims)
    nodes = forward_nodes(graph) if analysis.mode == "training" else graph.nodes
    candidates = find_inplace(graph, sizes, nodes, analysis.dims.bound)
    saving = [c for c in candidates if c.saves_bytes > 0]
    found = [inplace_suggestion(c, graph.source_format)
             for c in sorted(saving, key=lambda c: -c.saves_bytes)]
    notes = (idle_inplace_note(len(candidates) - len(saving), bool(saving)),) if (
        len(saving) < len(candidates)) else ()
    if fc_heads:
        base = int(analysis.liveness.peak_bytes)
        for head in find_fc_heads(graph, analysis.params.count, sizes):
            new_peak = peak_with_pooled_head(graph, sizes, head, analysis.dims.bound)
            found.append(fc_head_suggestion(head, base, new_peak, None, GRAPH_FC_NOTE))
    convs = find_grouped_convs(graph, analysis.costs, sizes, nodes)
    if convs:
        found.append(grouped_conv_suggestion(convs, int(analysis.costs.total_flops)
                                             if analysis.costs.total_flops.is_constant else 0))
    return found, notes


def idle_inplace_note(count: int, others_save: bool) -> str:
    """What the in-place ops that save nothing at the peak come to."""
    ops = count_noun(count, "op")
    if others_save:
        return (f"{ops} more could run in place, but running them so does not lower the peak"
                " (0 bytes saved there): not listed")
    return (f"no in-place candidate saves memory here: {ops} could run in place, but running"
            " them so does not lower the peak")


def inplace_suggestion(candidate: InplaceCandidate, source_format: str) -> Suggestion:
    where = candidate.module_path or candidate.node
    if candidate.saves_bytes > 0:
        note = (f"{candidate.input_name} dies at this op and is not saved for backward; liveness"
                " re-run with the output sharing its storage")
    else:
        note = (f"{candidate.input_name} dies here, but the two are not both live at the peak:"
                " saves 0 bytes at the peak (only at this op's own step)")
    if source_format == "onnx":
        snippet = None
        note += "; ONNX Runtime's memory planner may already reuse this buffer"
    else:
        snippet = _inplace_snippet(candidate.op)
    return Suggestion(SuggestionKind.INPLACE, f"run {candidate.op} in place ({where})",
                      (candidate.node,), candidate.saves_bytes, candidate.new_peak_bytes, 0,
                      0.0, snippet, note)


def _inplace_snippet(op: str) -> str:
    modules = {"relu": "nn.ReLU(inplace=True)", "relu6": "nn.ReLU6(inplace=True)",
               "silu": "nn.SiLU(inplace=True)", "hardswish": "nn.Hardswish(inplace=True)",
               "leaky_relu": "nn.LeakyReLU(inplace=True)", "elu": "nn.ELU(inplace=True)",
               "hardtanh": "nn.Hardtanh(inplace=True)"}
    if op in modules:
        return f"{modules[op]}  # or x = torch.{op}_(x)"
    return f"x.{op}_(other)  # instead of x = x.{op}(other) / torch.{op}(x, ...)"


GRAPH_FC_NOTE = ("liveness re-run with the weight, its gradient and optimizer state (every"
                 " tensor of its shape in those roles) at 1/(H*W) of their size; activations as"
                 " they are")


def fc_head_suggestion(head: FcHead, base_peak_bytes: int, new_peak_bytes: int,
                       extra_flops: int | None, how: str) -> Suggestion:
    return Suggestion(
        SuggestionKind.FC_HEAD,
        f"{head.module_path or head.node}: {head.share_of_params:.0%} of all parameters",
        (head.module_path or head.node,), base_peak_bytes - new_peak_bytes, new_peak_bytes,
        extra_flops, None,
        "nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, out))",
        f"the FC layer reads a flattened {head.spatial_positions}-position feature map; global"
        f" average pooling first (Lin et al. 2014; ResNet's head) divides its weight by"
        f" {head.spatial_positions} ({format_bytes(head.removable_weight_bytes)} less per copy);"
        f" {how}; a change of architecture: the model must be retrained")


def grouped_conv_suggestion(convs: list[GroupedConv], total_flops: int) -> Suggestion:
    flops = sum(c.flops for c in convs)
    saved = sum(c.output_bytes for c in convs if c.saved_for_backward)
    share = f"{flops / total_flops:.1%}" if total_flops else "?"
    kept = f", {format_bytes(saved)} saved for backward" if saved else ""
    return Suggestion(
        SuggestionKind.GROUPED_CONV,
        f"{len(convs)} grouped/depthwise convs: {share} of FLOPs{kept}",
        tuple(c.module_path or c.node for c in convs), None, None, None, None, None,
        "grouped and depthwise convs cut FLOPs by their group count but write full-size"
        " outputs, so memory per FLOP rises and they are memory-bound on a GPU; cheap to"
        " recompute, they are good checkpoint targets")


TORCH_CHECKPOINT_NOTE = (
    "the step re-traced with these modules checkpointed (torch.utils.checkpoint, non-reentrant;"
    " make_fx records the recomputation in backward) and analysed again")


def checkpoint_suggestion(plan: CheckpointPlan, base_flops: int,
                          stateful: frozenset[str] = frozenset(), how: str = TORCH_CHECKPOINT_NOTE,
                          snippet: Callable[[tuple[str, ...]], str] | None = None
                          ) -> Suggestion | None:
    """The plan as a card; `stateful`: modules whose forward writes a buffer in place; `how`:
    how it was re-analysed; `snippet`: the change to make (default: torch's)."""
    outcome = plan.chosen or plan.best_effort
    if outcome is None or not outcome.modules:
        return None
    fits = plan.chosen is not None
    note = how
    if plan.baseline is not None and plan.baseline.modules:
        note += (f"; checkpointing every depth-{plan.depth} module instead peaks at"
                 f" {format_bytes(plan.baseline.peak_bytes)} for"
                 f" {plan.baseline.extra_flops:,} extra FLOPs")
    twice = [m for m in outcome.modules if m in stateful]
    if twice:
        note += (f"; {', '.join(twice)} update buffers in their forward (BatchNorm running"
                 " statistics), which the recomputation updates a second time per step")
    if not fits:
        note = "nothing found under the budget; the lowest peak found: " + note
    more = f", +{outcome.extra_flops / base_flops:.0%} FLOPs" if base_flops > 0 else ""
    title = (f"checkpoint {len(outcome.modules)} module(s){more}" if fits
             else f"checkpointing {len(outcome.modules)} module(s) is not enough{more}")
    return Suggestion(SuggestionKind.CHECKPOINT, title, outcome.modules,
                      plan.base_peak_bytes - outcome.peak_bytes, outcome.peak_bytes,
                      outcome.extra_flops, outcome.extra_time_s,
                      (snippet or checkpoint_snippet)(outcome.modules), note)


def checkpoint_snippet(modules: tuple[str, ...]) -> str:
    paths = ", ".join(f'"{path}"' for path in modules)
    return (
        "import functools\n"
        "from torch.utils.checkpoint import checkpoint\n\n"
        f"for path in [{paths}]:\n"
        "    module = model.get_submodule(path)\n"
        "    module.forward = functools.partial(checkpoint, module.forward,"
        " use_reentrant=False)\n"
    )


def amp_for(gpu: GpuSpec | None) -> Amp:
    """bf16 where the GPU runs it (or no GPU is named), else fp16."""
    return Amp.FP16 if gpu is not None and gpu.bf16_flops_per_s is None else Amp.BF16


def memory_budget(analysis: Analysed, memory_budget_bytes: int | None) -> tuple[int | None, str]:
    """The budget suggestions aim at: --memory-budget, else the GPU's usable memory."""
    if memory_budget_bytes is not None:
        return memory_budget_bytes, "--memory-budget"
    if analysis.fit is not None:
        return analysis.fit.usable_bytes, f"usable memory of the {analysis.fit.gpu.name}"
    return None, ""


def over_budget(analysis: Analysed, budget_bytes: int | None) -> bool:
    peak = analysis.liveness.peak_bytes
    return budget_bytes is not None and peak.is_constant and int(peak) > budget_bytes


FREE_DIMS_NOTE = ("savings at the peak need every dim bound: give --batch / --dim NAME=VALUE"
                  " for in-place, FC-head and grouped-conv suggestions")


def graph_report(analysis: Analysed, memory_budget_bytes: int | None) -> SuggestionReport:
    """Suggestions that need no re-trace (in-place, FC heads, grouped convs): any graph."""
    budget, source = memory_budget(analysis, memory_budget_bytes)
    peak = analysis.liveness.peak_bytes
    base = int(peak) if peak.is_constant else 0
    found, notes = graph_suggestions(analysis)
    if analysis.dims.free:
        notes = (FREE_DIMS_NOTE, *notes)
    return SuggestionReport(budget, source, base, tuple(found), (), notes)


def latency_s(analysis: Analysed, gpu: GpuSpec | None) -> float | None:
    """The roofline latency of an analysed step on `gpu` (None without one)."""
    if gpu is None:
        return None
    return estimate_roofline(analysis.graph, analysis.costs, gpu, {}).est_latency_s


def peak(analysis: Analysed) -> int:
    return int(analysis.liveness.peak_bytes)


def flops(analysis: Analysed) -> int:
    return int(analysis.costs.total_flops)
