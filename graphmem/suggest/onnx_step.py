"""Activation checkpointing for an ONNX training step (`analyze model.onnx --train --suggest`).

The candidates are the exporter's modules, or the stretches between single-tensor cuts
(graphmem/suggest/onnx_candidates.py); the covering knapsack of graphmem/passes/
checkpoint_search.py picks the cheapest set, and every plan it tries is re-analysed: the
training step rebuilt from the ONNX graph with those segments checkpointed (graphmem/passes/
training_checkpoint.py: nothing saved inside them but their inputs, their forward run again in
backward) and the whole analysis run again. Only re-analysed numbers are reported. The ONNX
file is not rewritten: the card says what to wrap in the PyTorch source it came from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from graphmem.devices.gpus import GpuSpec
from graphmem.passes.dims import value_bytes
from graphmem.pipeline.analysis import Analysis
from graphmem.suggest.candidates import SegmentCandidate, forward_nodes
from graphmem.suggest.cards import (
    Suggestion,
    checkpoint_snippet,
    checkpoint_suggestion,
    flops,
    latency_s,
    peak,
)
from graphmem.suggest.onnx_candidates import onnx_candidates
from graphmem.suggest.search import CheckpointPlan, PlanOutcome, plan_checkpoints

# the analysis of the same ONNX training step with these segments checkpointed
Checkpointed = Callable[[tuple[str, ...]], Analysis]

ONNX_CHECKPOINT_NOTE = (
    "the training step rebuilt from the ONNX graph with these segments checkpointed (nothing"
    " saved inside them but their inputs; their forward run again in backward, up to the last"
    " tensor backward reads: graphmem/training/checkpoint.py) and analysed again;"
    " Python: analyze_onnx(path, train=True, checkpoints=TARGETS)")
# ops that write a buffer in their training forward (BatchNorm's running statistics)
_STATEFUL_OPS = frozenset({"BatchNormalization"})


@dataclass(frozen=True)
class OnnxCheckpointResult:
    plan: CheckpointPlan
    suggestion: Suggestion | None


def onnx_checkpoint_plan(base: Analysis, budget_bytes: int | None, checkpointed: Checkpointed,
                         gpu: GpuSpec | None) -> OnnxCheckpointResult:
    """The cheapest re-analysed checkpoint plan under the budget, and the memory/recompute
    curve; `base` is the analysed training step (every dim bound)."""
    base_latency = latency_s(base, gpu)

    def reanalyze(targets: tuple[str, ...]) -> PlanOutcome:
        changed = checkpointed(targets) if targets else base
        latency = latency_s(changed, gpu)
        extra = None if latency is None or base_latency is None else latency - base_latency
        return PlanOutcome(targets, peak(changed), flops(changed) - flops(base), extra)

    candidates = onnx_candidates(base.graph, base.costs, value_bytes(base.graph, base.dims))
    plan = plan_checkpoints(candidates, peak(base), budget_bytes, reanalyze)
    modules = {".".join(parts[:depth]) for n in forward_nodes(base.graph) if n.module_path
               for parts in [n.module_path.split(".")] for depth in range(1, len(parts) + 1)}

    def snippet(targets: tuple[str, ...]) -> str:
        return onnx_checkpoint_snippet(targets, all(t in modules for t in targets))

    card = checkpoint_suggestion(plan, flops(base), _stateful(base, candidates),
                                 ONNX_CHECKPOINT_NOTE, snippet)
    return OnnxCheckpointResult(plan, card)


def onnx_checkpoint_snippet(targets: tuple[str, ...], module_paths: bool) -> str:
    """What to change in the PyTorch source: graphmem does not rewrite the ONNX file."""
    if module_paths:
        return ("# the ONNX file is not rewritten: checkpoint these modules (the exporter's"
                " module paths)\n# in the PyTorch model it was exported from\n"
                + checkpoint_snippet(targets))
    listed = "\n".join(f"#   {t}" for t in targets)
    return ("# the ONNX file is not rewritten: in the PyTorch source, move the code that"
            " computes each\n# range of ONNX nodes below into a function f and call it as\n"
            "# y = torch.utils.checkpoint.checkpoint(f, x, use_reentrant=False)\n" + listed)


def _stateful(base: Analysis, candidates: list[SegmentCandidate]) -> frozenset[str]:
    forward = forward_nodes(base.graph)
    return frozenset(c.path for c in candidates if any(
        n.op_type in _STATEFUL_OPS for n in forward[c.first_step: c.last_step + 1]))
