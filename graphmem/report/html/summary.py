"""The report's headline (what was analyzed and the verdict, first) and the memory and FLOPs
breakdown by module, from the JSON report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphmem.report.html.quantity import Quantity, bytes_quantity, count_quantity, format_time
from graphmem.report.safe_text import dims_text, printable

MAX_MODULE_BARS = 12  # the largest modules as bars; the table below has every one


@dataclass(frozen=True)
class Fact:
    label: str
    value: str
    detail: str = ""
    tone: str = ""  # "good" | "bad" | "": the text always says it too


def mode_text(config: Mapping[str, Any], bytes_by_dtype: Mapping[str, Any]) -> str:
    """'training · adam · AMP bf16 · grad accum 8' or 'inference · float32'."""
    parts = [str(config.get("mode", ""))]
    if config.get("optimizer"):
        parts.append(str(config["optimizer"]))
    if config.get("amp"):
        parts.append(f"AMP {config['amp']} (fp32 master weights)")
    else:
        parts.append(" + ".join(bytes_by_dtype) or "no parameters")
    if (config.get("grad_accum") or 1) > 1:
        parts.append(f"grad accum {config['grad_accum']}")
    return " · ".join(parts)


def batch_text(report: Mapping[str, Any]) -> str:
    dims, config = report["dims"], report["config"]
    bound = dims_text(dims["bound"])
    free = dims_text(dims["free"])
    parts = [bound] if bound else []
    if config.get("micro_batch"):
        parts.append(f"micro-batch {config['micro_batch']}")
        if config.get("effective_batch") and config["effective_batch"] != config["micro_batch"]:
            parts.append(f"effective batch {config['effective_batch']}")
    if free:
        parts.append(f"free: {free}")
    return ", ".join(parts) or "static shapes"


def headline_facts(report: Mapping[str, Any], peak: Quantity, unsupported: int) -> tuple[Fact, ...]:
    gpu = report.get("gpu") or {}
    flops = count_quantity(report["flops"]["total"], "FLOP")
    facts = [
        Fact("model", printable(report["model"]["name"]), report["model"]["format"]),
        Fact("mode", mode_text(report["config"], report["params"]["bytes_by_dtype"])),
        Fact("batch and dims", batch_text(report)),
        Fact("peak memory", peak.text, _peak_detail(report)),
        Fact("parameters", f"{report['params']['count']:,}",
             bytes_quantity(report["params"]["bytes"]).text),
        Fact("FLOPs", ("\u2265 " if unsupported else "") + flops.text,
             "per step, 1 MAC = 2 FLOPs" + (
                 f"; {unsupported:,} unsupported node{'s' if unsupported != 1 else ''}"
                 " not counted" if unsupported else "")),
        Fact("unsupported ops", f"{unsupported:,} node{'s' if unsupported != 1 else ''}",
             "FLOPs not counted" if unsupported else "every op has a cost rule",
             "bad" if unsupported else "good"),
    ]
    if gpu:
        facts += _gpu_facts(gpu)
    return tuple(facts)


def _peak_detail(report: Mapping[str, Any]) -> str:
    """'live tensors, model order · step 9: /layer1/Add', and whether the step depends on
    the free dims (several candidate steps: this one is the largest at large values)."""
    memory = report["memory"]
    detail = (f"live tensors, {report['config']['schedule']} · step {memory['peak_step']}:"
              f" {printable(memory['peak_node'])}")
    candidates = len(memory.get("peak_candidates") or ())
    if candidates > 1:
        detail += f" · the largest at large {dims_text(report['dims']['free'])}"
        detail += f" (1 of {candidates} candidate steps, below)"
    return detail


def _gpu_facts(gpu: Mapping[str, Any]) -> list[Fact]:
    fits = gpu.get("fits")
    verdict = {True: ("fits", "good"), False: ("does not fit", "bad"),
               None: ("depends on the free dims", "")}[fits]
    facts = [Fact("GPU", gpu.get("full_name") or gpu.get("name", ""),
                  f"{bytes_quantity(gpu['usable_bytes']).text} usable"),
             Fact("fits", verdict[0], "", verdict[1])]
    max_batch = gpu.get("max_batch")
    if max_batch is not None:
        facts.append(Fact("max batch", f"{max_batch:,}", "largest batch whose peak fits"))
    elif gpu.get("max_batch_reason"):
        facts.append(Fact("max batch", "\u2013", str(gpu["max_batch_reason"])))
    latency = gpu.get("est_latency_s")
    if latency is not None:
        throughput = gpu.get("est_throughput_per_s")
        detail = "roofline lower bound"
        if throughput:
            detail += f" · {throughput:,.0f} samples/s"
        facts.append(Fact("est. latency", format_time(latency), detail))
    return facts


@dataclass(frozen=True)
class ModuleRowView:
    module: str
    params: int
    flops: Quantity
    at_peak: Quantity
    params_percent: float
    flops_percent: float
    at_peak_percent: float


@dataclass(frozen=True)
class ModuleBreakdown:
    depth: int
    rows: tuple[ModuleRowView, ...]  # in order of appearance
    by_memory: tuple[ModuleRowView, ...]  # largest activations at the peak first
    by_flops: tuple[ModuleRowView, ...]
    by_params: tuple[ModuleRowView, ...]


def module_breakdown(modules: Mapping[str, Any] | None) -> ModuleBreakdown | None:
    if not modules or not modules.get("rows"):
        return None
    raw = modules["rows"]
    flops = [count_quantity(r["flops"], "FLOP") for r in raw]
    at_peak = [bytes_quantity(r["bytes_at_peak"]) for r in raw]
    top_params = max((r["params"] for r in raw), default=0)
    top_flops = max((q.probe for q in flops), default=0)
    top_peak = max((q.probe for q in at_peak), default=0)
    rows = tuple(
        ModuleRowView(printable(r["module"]), r["params"], f, p, _share(r["params"], top_params),
                      _share(f.probe, top_flops), _share(p.probe, top_peak))
        for r, f, p in zip(raw, flops, at_peak, strict=True)
    )
    return ModuleBreakdown(
        depth=modules["depth"],
        rows=rows,
        by_memory=_top(rows, lambda r: r.at_peak.probe),
        by_flops=_top(rows, lambda r: r.flops.probe),
        by_params=_top(rows, lambda r: r.params),
    )


def _share(part: int, largest: int) -> float:
    """Bar length: relative to the largest row, so the top bar is full width."""
    return 100.0 * part / largest if largest > 0 else 0.0


def _top(rows: Sequence[ModuleRowView], key: Any) -> tuple[ModuleRowView, ...]:
    ranked = sorted((r for r in rows if key(r) > 0), key=lambda r: -key(r))
    return tuple(ranked[:MAX_MODULE_BARS])
