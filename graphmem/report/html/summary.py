"""The top of the HTML report: the answer first (does the peak fit on the GPU, by how much, the
largest batch that fits), then what was analyzed, the memory by role and the coverage gaps.

Built from the typed results of the Analysis: liveness, costs, params, fit, max batch, roofline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from graphmem.core.conventions import PROBE_DIM_VALUE, ROLE_KEYS
from graphmem.core.peak_formula import Formula
from graphmem.core.safe_text import dims_text, printable, printable_text
from graphmem.core.units import format_bytes, format_rate
from graphmem.passes.costs import CostStatus
from graphmem.passes.device_parts import DevicePart
from graphmem.pipeline.analysis import Analysis
from graphmem.report.error_band import band_text, tight_text
from graphmem.report.html.quantity import (
    Quantity,
    bytes_quantity,
    count_quantity,
    format_time,
    percent,
    probe,
)
from graphmem.report.out_of_memory import out_of_memory_text
from graphmem.report.precision import precision_warnings
from graphmem.report.words import caveat_text, part_label

if TYPE_CHECKING:  # a GPU's verdict and runtime model: imported where the analysis has one
    from graphmem.passes.fit import GpuFit
    from graphmem.passes.max_batch import MaxBatchResult
    from graphmem.runtime_models.base import RuntimeEstimate


class Fact(NamedTuple):
    label: str
    value: str
    detail: str = ""
    tone: str = ""  # "good" | "bad" | "": the text always says it too
    answer: bool = False  # one of the answers the page opens with (fit, peak, max batch)
    exact: str = ""  # tooltip: the exact integer or formula
    key: str = ""  # names the fact in the markup (data-n="fact:KEY"); default: the label

    @property
    def name(self) -> str:
        return self.key or self.label


class Stat(NamedTuple):
    label: str
    value: str
    detail: str = ""
    exact: str = ""  # shown as a tooltip: the exact integer or formula
    is_formula: bool = False


def _stat(label: str, value: Quantity, detail: str, unit: str = "bytes") -> Stat:
    return Stat(label, value.text, detail, f"{value.exact_text} {unit}", value.is_formula)


class RoleShare(NamedTuple):
    role: str
    size: Quantity
    percent: float  # of the peak, at the probe value


class Summary(NamedTuple):
    stats: tuple[Stat, ...]
    peak: Quantity
    peak_candidates: tuple[Quantity, ...]  # () unless the peak step depends on free dims
    peak_step: int
    peak_node: str
    peak_op: str
    macs: Quantity
    flops: Quantity
    breakdown: tuple[RoleShare, ...]
    bytes_by_dtype: tuple[tuple[str, Quantity], ...]


class Gaps(NamedTuple):
    unsupported_ops: tuple[tuple[str, int], ...]
    unsupported_nodes: tuple[str, ...]
    shape_unknown_nodes: tuple[str, ...]
    unknown_size_values: tuple[str, ...]
    control_flow_nodes: tuple[str, ...]
    model_warnings: tuple[str, ...]
    # information, not problems: what the front end built or applied (ModelInfo.notes)
    model_notes: tuple[str, ...] = ()

    @property
    def unsupported_node_count(self) -> int:
        return sum(count for _, count in self.unsupported_ops)

    @property
    def warning_count(self) -> int:
        """Coverage problems besides unsupported ops (those have their own alert)."""
        return (len(self.shape_unknown_nodes) + len(self.unknown_size_values)
                + len(self.control_flow_nodes) + len(self.model_warnings))


class GpuView(NamedTuple):
    """The GPU's one verdict (graphmem/passes/fit.py GpuFit): `required` (the device total,
    `basis` says which) against `capacity`; `parts` add up to it."""

    name: str
    full_name: str
    capacity: Quantity
    datasheet: Quantity
    reserve: Quantity
    reserve_source: str
    usable: Quantity
    required: Quantity  # what is held against the capacity: the device total
    fits: bool | None  # None while the total depends on free dims
    utilization_text: str
    overflow: Quantity | None  # by how much the total exceeds the capacity
    headroom: Quantity | None  # what is left of the capacity
    reserve_percent: float  # the bar: shares of the capacity (context, the rest of the total)
    peak_percent: float
    source: str
    basis: str = ""  # "ort-cuda device total", "live-tensor peak + CUDA context"
    parts: tuple[tuple[str, Quantity], ...] = ()  # (label, size): they add up to `required`
    live_peak: Quantity | None = None  # graphmem's live-tensor peak, for reference
    failure: str = ""  # the allocation the runtime could not make
    caveat: str = ""  # which way the total may be wrong
    error_band: str = ""  # the path's measured error (or "unmeasured"), with its source
    tight: str = ""  # the verdict is tight: the capacity lies within the error band
    # the batch free: the device total at the largest batch that fits ("batch=764"), and
    # its parts, the number the verdict's "fits up to" reads
    at_max_dims: str = ""
    at_max_basis: str = ""  # "ort-cuda device total"
    at_max_total: Quantity | None = None
    at_max_parts: tuple[tuple[str, Quantity], ...] = ()


def summary(analysis: Analysis, op_of: Callable[[str], str]) -> Summary:
    live, params = analysis.liveness, analysis.params
    at_step = bytes_quantity(live.peak_bytes)  # the live total at the peak step
    macs = count_quantity(analysis.costs.total_macs)
    # parameters, FLOPs and the peak are in the headline above: these are the rest
    stats = []
    if params.buffer_count:
        stats.append(Stat("buffers", f"{params.buffer_count:,}",
                          format_bytes(params.buffer_bytes), "running statistics etc."))
    stats += [
        _stat("MACs", macs, "multiply-accumulates", "MACs"),
        _stat("activations at peak", bytes_quantity(live.activation_peak_bytes),
              "peak less residents"),
        _stat("residents", bytes_quantity(live.resident_bytes),
              "weights, inputs, constants: live throughout"),
        _stat("lower bound", bytes_quantity(live.lower_bound_bytes),
              f"largest node: {printable(live.order[live.lower_bound_step])}"),
    ]
    sizes = {ROLE_KEYS[role]: bytes_quantity(v) for role, v in live.breakdown_at_peak.items()}
    # each role's share of the live total at the peak step: the shares add up to 100%
    breakdown = (RoleShare(role, size, percent(size.probe, at_step.probe))
                 for role, size in sizes.items())
    peak_node = live.order[live.peak_step]
    return Summary(
        stats=tuple(stats),
        peak=peak_quantity(analysis),
        peak_candidates=_peak_candidates(analysis),
        peak_step=live.peak_step,
        peak_node=printable(peak_node),
        peak_op=op_of(peak_node),
        macs=macs,
        flops=count_quantity(analysis.costs.total_flops, "FLOP"),
        breakdown=tuple(sorted(breakdown, key=lambda r: -r.size.probe)),
        bytes_by_dtype=tuple((d, bytes_quantity(b)) for d, b in params.bytes_by_dtype.items()),
    )


def peak_quantity(analysis: Analysis) -> Quantity:
    """The peak, exact: with several candidate steps their maximum, shown per range of a free
    dim (graphmem/core/peak_formula.py), max(a, b, ...) in the tooltip."""
    peak = bytes_quantity(analysis.liveness.peak_bytes)
    candidates = _peak_candidates(analysis)
    if not candidates:
        return peak
    formula = Formula(analysis.liveness.peak_candidates)
    return Quantity(
        exact="max(" + ", ".join(str(c.exact) for c in candidates) + ")",
        text=formula.display(),
        probe=max(c.probe for c in candidates),
    )


def _peak_candidates(analysis: Analysis) -> tuple[Quantity, ...]:
    """The steps that can peak, each a formula; () when one step peaks at every value."""
    candidates = analysis.liveness.peak_candidates
    return tuple(map(bytes_quantity, candidates)) if len(candidates) > 1 else ()


def gaps(analysis: Analysis) -> Gaps:
    costs = analysis.costs
    return Gaps(
        unsupported_ops=tuple((printable(op), n) for op, n in costs.unsupported_ops.items()),
        unsupported_nodes=tuple(printable(n.name) for n in costs.nodes
                                if n.status is CostStatus.UNSUPPORTED),
        shape_unknown_nodes=tuple(map(printable, costs.shape_unknown_nodes)),
        unknown_size_values=tuple(map(printable, analysis.liveness.unknown_size_values)),
        control_flow_nodes=tuple(map(printable, costs.subgraph_nodes)),
        model_warnings=(*map(printable_text, analysis.model.warnings),
                        *precision_warnings(analysis.roofline)),
        model_notes=tuple(map(printable_text, analysis.model.notes)),
    )


def gpu_view(fit: GpuFit, at_max: RuntimeEstimate | None = None,
             max_batch: MaxBatchResult | None = None) -> GpuView:
    capacity, usable = bytes_quantity(fit.capacity_bytes), bytes_quantity(fit.usable_bytes)
    required = bytes_quantity(fit.required_bytes)
    parts = tuple((part_label(part), bytes_quantity(part.size_bytes)) for part in fit.parts)
    context = sum(probe(part.size_bytes) for part in fit.parts
                  if part.part is DevicePart.CONTEXT)
    reserve_percent = min(percent(context, capacity.probe), 100.0)
    peak_percent = 0.0
    if not required.is_formula:
        peak_percent = min(percent(required.probe - context, capacity.probe),
                           100.0 - reserve_percent)
    return GpuView(
        name=fit.gpu.name,
        full_name=fit.gpu.full_name,
        capacity=capacity,
        datasheet=bytes_quantity(fit.gpu.memory_bytes),
        reserve=bytes_quantity(fit.reserve.bytes),
        reserve_source=fit.reserve.source,
        usable=usable,
        required=required,
        fits=fit.fits,
        utilization_text=utilization_text(fit),
        overflow=bytes_quantity(fit.over_bytes or 0) if fit.fits is False else None,
        headroom=bytes_quantity(-(fit.over_bytes or 0)) if fit.fits else None,
        reserve_percent=reserve_percent,
        peak_percent=peak_percent,
        source=fit.gpu.source,
        basis=fit.basis,
        parts=parts,
        live_peak=bytes_quantity(fit.live_peak_bytes),
        failure=printable_text(out_of_memory_text(fit.out_of_memory) if fit.out_of_memory
                               else fit.failure),
        caveat=caveat_text(fit.caveat),
        error_band=printable_text(band_text(fit.error_band)) if fit.error_band else "",
        tight=printable_text(tight_text(fit)),
        **_at_max_fields(at_max, max_batch),
    )


def _at_max_fields(at_max: RuntimeEstimate | None, max_batch: MaxBatchResult | None
                   ) -> dict[str, Any]:
    if at_max is None or max_batch is None or not max_batch.max_batch:
        return {}
    from graphmem.pipeline.device_total import runtime_parts

    return {
        "at_max_dims": f"{printable(max_batch.batch_dim or '')}={max_batch.max_batch:,}",
        "at_max_basis": printable_text(max_batch.basis),
        "at_max_total": bytes_quantity(at_max.device_total_bytes),
        "at_max_parts": tuple((part_label(part), bytes_quantity(part.size_bytes))
                              for part in runtime_parts(at_max)),
    }


def utilization_text(fit: GpuFit) -> str:
    """The verdict's share of the GPU: its total over the capacity."""
    if fit.utilization is None:
        return "depends on the free dims"
    if fit.utilization < 0.001:
        return "<0.1% of the GPU's"
    return f"{fit.utilization:.1%} of the GPU's"


# ----- the headline: what was analyzed and the verdict, every fact in words -------------------


def mode_text(analysis: Analysis) -> str:
    """'training · adam · AMP bf16 · grad accum 8' or 'inference · float32'."""
    parts = [analysis.mode]
    training = analysis.training
    if training is not None:
        parts.append(str(training.optimizer))
    if training is not None and training.amp:
        parts.append(f"AMP {training.amp} (fp32 master weights)")
    else:
        parts.append(" + ".join(analysis.params.bytes_by_dtype) or "no parameters")
    if training is not None and training.grad_accum > 1:
        parts.append(f"grad accum {training.grad_accum}")
    return " · ".join(parts)


def batch_text(analysis: Analysis) -> str:
    parts = [bound] if (bound := dims_text(analysis.dims.bound)) else []
    training = analysis.training
    if training is not None and training.micro_batch:
        parts.append(f"micro-batch {training.micro_batch}")
        if training.effective_batch and training.effective_batch != training.micro_batch:
            parts.append(f"effective batch {training.effective_batch}")
    if free := dims_text(analysis.dims.free):
        parts.append(f"free: {free}")
    return ", ".join(parts) or "static shapes"


def headline_facts(analysis: Analysis, peak: Quantity, gpu: GpuView | None,
                   unsupported: int) -> tuple[Fact, ...]:
    """The answers first (fit, peak, max batch, runtime total), then what was analyzed."""
    facts = [*_fit_facts(analysis, gpu)]
    facts.insert(1 if gpu else 0, Fact("peak memory", peak.text, _peak_detail(analysis),
                                       answer=True, exact=f"{peak.exact_text} bytes"))
    flops = count_quantity(analysis.costs.total_flops, "FLOP")
    plural = "s" if unsupported != 1 else ""
    facts += [
        Fact("parameters", f"{analysis.params.count:,}",
             bytes_quantity(analysis.params.bytes).text),
        Fact("FLOPs", ("\u2265 " if unsupported else "") + flops.text,
             "per step, 1 MAC = 2 FLOPs" + (
                 f"; {unsupported:,} unsupported node{plural} not counted" if unsupported
                 else ""), exact=f"{flops.exact_text} FLOPs"),
        Fact("unsupported ops", f"{unsupported:,} node{plural}",
             "FLOPs not counted" if unsupported else "every op has a cost rule",
             "bad" if unsupported else "good"),
        Fact("model", printable(analysis.model.name), analysis.model.source_format),
        Fact("mode", mode_text(analysis)),
        Fact("batch and dims", batch_text(analysis)),
    ]
    return tuple(facts)  # the GPU is named by the verdict and its own box below


def _peak_detail(analysis: Analysis) -> str:
    """'live tensors, model order · step 9: /layer1/Add'; with several candidate steps, the
    peak is their maximum (the step named is the largest at the probe value)."""
    live = analysis.liveness
    peak_node = printable(live.order[live.peak_step])
    detail = f"live tensors, model order · step {live.peak_step}: {peak_node}"
    candidates = len(live.peak_candidates)
    if candidates > 1:
        detail += (f" at {dims_text(dict.fromkeys(analysis.dims.free, PROBE_DIM_VALUE))};"
                   f" the exact maximum of {candidates} candidate steps (below)")
    return detail


def _fit_facts(analysis: Analysis, gpu: GpuView | None) -> list[Fact]:
    facts = []
    if gpu is not None:
        facts.append(_verdict_fact(gpu))
    max_batch = analysis.max_batch
    if max_batch is not None and max_batch.max_batch is not None:
        facts.append(Fact("max batch", f"{max_batch.max_batch:,}",
                          f"largest batch whose {max_batch.basis} fits", answer=True))
    elif max_batch is not None and max_batch.reason:
        facts.append(Fact("max batch", "\u2013", printable_text(max_batch.reason), answer=True))
    runtime = analysis.runtime
    if runtime is not None:
        total = bytes_quantity(runtime.device_total_bytes)
        facts.append(Fact("on the device", total.text,
                          f"{runtime.runtime}: tensors, allocator, context (below)",
                          answer=True, exact=f"{total.exact_text} bytes"))
    roofline = analysis.roofline
    if roofline is not None:
        detail = "roofline lower bound"
        if roofline.est_throughput_per_s:
            detail += f" · {format_rate(roofline.est_throughput_per_s, 'samples/s')}"
        facts.append(Fact("est. latency", format_time(roofline.est_latency_s), detail))
    return facts


def _verdict_fact(gpu: GpuView) -> Fact:
    label = f"on {gpu.full_name}"
    basis = f" · {gpu.basis} {gpu.required.text}"
    if gpu.tight:
        return Fact(label, "tight", f"{gpu.tight} · {gpu.utilization_text}{basis}", "bad",
                    answer=True, key="fits")
    if gpu.fits and gpu.headroom is not None:
        return Fact(label, "fits", f"{gpu.headroom.text} to spare · {gpu.utilization_text}"
                    f"{basis}", "good", answer=True, key="fits")
    if gpu.fits is False and gpu.overflow is not None:
        return Fact(label, "does not fit", f"over by {gpu.overflow.text} ·"
                    f" {gpu.utilization_text}{basis}", "bad", answer=True, key="fits")
    if gpu.at_max_total is not None:
        return Fact(label, f"fits up to {gpu.at_max_dims}", f"{gpu.at_max_basis}"
                    f" {gpu.at_max_total.text} there, of {gpu.capacity.text}", "good",
                    answer=True, key="fits")
    return Fact(label, "fit depends on the free dims", f"{gpu.capacity.text} of memory",
                answer=True, key="fits")
