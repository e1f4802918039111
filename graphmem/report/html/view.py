"""The HTML report's view: the typed results of an Analysis mapped to what the templates lay out.

Every number comes from the Analysis's results (liveness, costs, params, fit, schedule,
roofline, max batch, sweep, runtime, distributed, KV cache, suggestions, modules), formatted
once here: sizes are exact integers when every dim is bound, or formulas in the free dims shown
term by term; charts, bars and sort keys need one number, so they use the formula's value with
every free dim at PROBE_DIM_VALUE, and say so. The JSON report is built from the same results
(tests/test_html_numbers.py checks that the page and the JSON agree).

A model's strings are data (core/safe_text.py): jinja2 escapes them (autoescape), names are
shortened to NAME_MAX_CHARS by `printable` where the view takes them, and every other string
the templates write passes page.py's `_inert`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from graphmem.core.conventions import ROLE_KEYS
from graphmem.core.json_schema import SCHEMA_VERSION
from graphmem.core.safe_text import printable, printable_text
from graphmem.core.symbolic import SymInt
from graphmem.core.version import __version__
from graphmem.pipeline.analysis import Analysis
from graphmem.report.html.charts import TimelineChart
from graphmem.report.html.memory import (
    LiveTable,
    ModuleBreakdown,
    RoleSteps,
    live_table,
    module_breakdown,
    timeline,
)
from graphmem.report.html.nodes import NodeTable, OpTable, node_table, op_names, op_table
from graphmem.report.html.plans import (
    CheckpointCurve,
    LeverView,
    SuggestionCard,
    SweepView,
    checkpoint_curve,
    lever_views,
    suggestion_cards,
    sweep_view,
)
from graphmem.report.html.quantity import PROBE_DIM_VALUE, probe
from graphmem.report.html.runtime import RuntimeView, runtime_view
from graphmem.report.html.summary import (
    Fact,
    Gaps,
    GpuView,
    Summary,
    gaps,
    gpu_view,
    headline_facts,
    summary,
)

if TYPE_CHECKING:  # sections of a training job, a KV cache, fine-tuning or serving: their
    # modules are loaded where the analysis has one (`_llm_views`)
    from graphmem.report.html.distributed import KvCacheView, PerGpuView
    from graphmem.report.html.llm import LlmView


class ModelView(NamedTuple):
    """What was analyzed, its strings as shown (names and the path shortened)."""

    name: str
    path: str
    format: str
    opset: int
    node_count: int
    shape_inference: str
    # a PyTorch step traced for a CUDA GPU: the kernels it assumed, one line each
    # ("attention: flash (sm75, fp16, ...; 2 calls)"); () for ONNX models and CPU traces
    kernels: tuple[str, ...] = ()


class ReportView(NamedTuple):
    title: str
    model: ModelView
    mode: str
    schedule: str
    versions: dict[str, str | int]
    dims_bound: tuple[str, ...]
    dims_free: tuple[str, ...]
    probe_note: str  # "" when every dim is bound
    summary: Summary
    gaps: Gaps
    gpu: GpuView | None
    headline: tuple[Fact, ...]
    timeline: TimelineChart
    live: LiveTable
    ops: OpTable
    nodes: NodeTable
    modules: ModuleBreakdown | None = None
    runtime: RuntimeView | None = None
    suggestions: tuple[SuggestionCard, ...] = ()
    runtime_levers: tuple[LeverView, ...] = ()  # runtime options, on the device total
    checkpoint_curve: CheckpointCurve | None = None
    sweep: SweepView | None = None
    per_gpu: PerGpuView | None = None
    kv_cache: KvCacheView | None = None
    llm: LlmView | None = None  # report/html/llm.py: fine-tuning and serving

    @property
    def answers(self) -> tuple[Fact, ...]:
        """The facts the page opens with: the fit, the peak, the largest batch."""
        return tuple(f for f in self.headline if f.answer)

    @property
    def facts(self) -> tuple[Fact, ...]:
        return tuple(f for f in self.headline if not f.answer)


def build_view(analysis: Analysis) -> ReportView:
    op_of = op_names(analysis.costs)
    free = analysis.dims.free
    gpu = (gpu_view(analysis.fit, analysis.runtime_at_max_batch, analysis.max_batch)
           if analysis.fit else None)
    by_role, phases = role_steps_and_phases(analysis)
    top = summary(analysis, op_of)
    holes = gaps(analysis)
    probe_note = ", ".join(f"{printable(name)}={PROBE_DIM_VALUE}" for name in free)
    per_gpu, kv_cache, llm = _llm_views(analysis)
    return ReportView(
        title=printable(Path(analysis.model.path).name or analysis.model.name),
        model=_model_view(analysis),
        mode=analysis.mode,
        schedule="model order",
        versions={"graphmem": __version__, "schema": SCHEMA_VERSION},
        dims_bound=tuple(f"{printable(name)}={value}"
                         for name, value in analysis.dims.bound.items()),
        dims_free=tuple(map(printable, free)),
        probe_note=probe_note,
        summary=top,
        gaps=holes,
        gpu=gpu,
        headline=headline_facts(analysis, top.peak, gpu, holes.unsupported_node_count),
        timeline=timeline(analysis, op_of, gpu, by_role, phases, probe_note),
        live=live_table(analysis.liveness, analysis.graph),
        ops=op_table(analysis.costs, analysis.roofline),
        nodes=node_table(analysis.costs, analysis.roofline, _node_phases(analysis, phases)),
        modules=module_breakdown(analysis.modules),
        runtime=runtime_view(analysis.runtime, analysis.fit),
        suggestions=suggestion_cards(analysis.suggestions, top.peak.probe),
        runtime_levers=lever_views(analysis.suggestions),
        checkpoint_curve=checkpoint_curve(analysis.suggestions),
        sweep=sweep_view(analysis.sweep, analysis.fit.usable_bytes if analysis.fit else None,
                         analysis.max_batch.max_batch if analysis.max_batch else None),
        per_gpu=per_gpu, kv_cache=kv_cache, llm=llm,
    )


def _llm_views(analysis: Analysis
               ) -> tuple[PerGpuView | None, KvCacheView | None, LlmView | None]:
    """The per-GPU, KV-cache and fine-tuning/serving sections (None: not in the analysis)."""
    if analysis.distributed is None and analysis.kv_cache is None and analysis.finetune is None:
        return None, None, None  # serving needs a KV cache
    from graphmem.report.html.distributed import kv_cache_view, per_gpu_view
    from graphmem.report.html.llm import llm_view

    return (per_gpu_view(analysis.distributed), kv_cache_view(analysis.kv_cache),
            llm_view(analysis))


def role_steps_and_phases(
    analysis: Analysis,
) -> tuple[RoleSteps, tuple[tuple[str, int, int], ...]]:
    """Live bytes per step by role (at the probe value), and the (phase, first step, last
    step) spans of a training step: views the liveness result carries."""
    live = analysis.liveness
    numbers = live.role_numbers  # a bound graph: already numbers
    if numbers is not None:
        steps = RoleSteps(tuple(ROLE_KEYS[r] for r in numbers.roles), numbers.bytes_per_step)
    else:
        by_role = live.role_timeline
        steps = RoleSteps(tuple(ROLE_KEYS[r] for r in by_role.roles),
                          tuple(tuple(map(_probe, step)) for step in by_role.bytes_per_step))
    return steps, tuple((str(s.phase), s.first_step, s.last_step) for s in live.phases)


def _probe(size: SymInt | int) -> int:
    # steps x roles sizes (86,000 at 22k nodes), nearly all numbers: skip the evaluation
    if isinstance(size, int):
        return size
    return int(size) if size.is_constant else probe(size)


def _node_phases(analysis: Analysis, phases: tuple[tuple[str, int, int], ...]) -> list[str]:
    names = [""] * len(analysis.costs.nodes)
    for phase, first, last in phases:
        names[first: last + 1] = [phase] * (last + 1 - first)
    return names


def _model_view(analysis: Analysis) -> ModelView:
    model = analysis.model
    return ModelView(name=printable(model.name), path=printable_text(model.path),
                     format=model.source_format, opset=model.opset,
                     node_count=model.node_count, shape_inference=model.shape_inference,
                     kernels=tuple(printable_text(str(k)) for k in model.kernels))
