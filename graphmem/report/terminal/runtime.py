"""Terminal lines for `--runtime`: the runtime's peak and what the device holds. Render only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from graphmem.core.safe_text import markup_text
from graphmem.core.units import format_bytes
from graphmem.report.out_of_memory import out_of_memory_text

if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis

_LABELS = {
    "ort-cpu": "onnxruntime CPU",
    "ort-cuda": "onnxruntime CUDA (model, not measured)",
    "torch-cuda": "PyTorch CUDA caching allocator",
    "torch-cpu": "PyTorch CPU",
}


# per runtime: what each line is, in a few words
_EXPLAIN = {
    "ort-cpu": ("mem_in_use_peak", "buffers its plan holds at the peak",
                "the file's initializers, the inputs", "arena rounding, chunks handed out whole",
                "kernel scratch (im2col, Where)", "= process tensor memory"),
    "ort-cuda": ("arena in use at its peak", "buffers its plan holds at the peak",
                 "initializers and inputs", "rounding, unused region space",
                 "CUDA context", "= device total (nvidia-smi)"),
    "torch-cuda": ("torch.cuda.max_memory_allocated", "graphmem's live tensors",
                   "", "segments less tensors and workspaces",
                   "CUDA context, cuBLAS workspaces", "= device total (nvidia-smi)"),
    "torch-cpu": ("allocator's peak above the residents", "graphmem's live tensors",
                  "parameters, buffers, optimizer state, inputs", "",
                  "the running kernel's scratch (oneDNN copies)", "= process tensor memory"),
}


def print_runtime(analysis: Analysis, console: Console) -> None:
    estimate = getattr(analysis, "runtime", None)
    note = getattr(analysis, "runtime_note", "")
    if estimate is None:
        if note:
            console.print(f"[yellow]runtime:[/] {markup_text(note)}")
        return
    peak, tensors, resident, overhead, context, total = _EXPLAIN.get(
        estimate.runtime, ("",) * 5 + ("= device total",))
    table = Table(title=f"runtime: {_LABELS.get(estimate.runtime, estimate.runtime)}",
                  show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column()
    table.add_row("runtime peak", format_bytes(estimate.runtime_peak_bytes), peak)
    table.add_row("tensors at peak", format_bytes(estimate.tensors_at_peak_bytes), tensors)
    if estimate.runtime_weights_bytes:
        table.add_row("+ weights in the arena", format_bytes(estimate.runtime_weights_bytes),
                      "prepacked MatMul/Gemm weights, small initializers")
    if estimate.resident_bytes:
        table.add_row("+ weights and inputs", format_bytes(estimate.resident_bytes), resident)
    table.add_row("+ allocator overhead", format_bytes(estimate.allocator_overhead_bytes),
                  overhead)
    table.add_row(f"+ {estimate.workspace_label}",
                  format_bytes(estimate.context_bytes + estimate.workspace_bytes), context)
    if estimate.satisfied is False:  # the GPU runs out: the total is what the run would need
        total = "= device total (demand)"
    table.add_row(total, format_bytes(estimate.device_total_bytes), _capacity(analysis))
    console.print(table)
    if estimate.out_of_memory is not None:
        console.print(f"[red]{markup_text(out_of_memory_text(estimate.out_of_memory))}[/]")
    elif estimate.failure:
        console.print(f"[red]{markup_text(estimate.failure)}[/]")
    fit = analysis.fit
    if fit is not None and fit.runtime == estimate.runtime and fit.caveat:
        console.print(f"[dim]verdict on this device total; {markup_text(fit.caveat)}[/]")


def _capacity(analysis: Analysis) -> str:
    """The GPU's one verdict, where it is read from this runtime's device total."""
    fit, estimate = analysis.fit, analysis.runtime
    if fit is None or estimate is None or fit.runtime != estimate.runtime:
        return ""
    verdict = "[green]fits[/]" if fit.fits else "[red]does NOT fit[/]"
    return f"{fit.utilization or 0.0:.1%} of {format_bytes(fit.capacity_bytes)}: {verdict}"
