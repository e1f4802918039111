"""Terminal lines for `--runtime`: the runtime's peak and what the device holds. Render only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from graphmem.core.safe_text import markup_text
from graphmem.core.units import format_bytes
from graphmem.passes.device_parts import DevicePart
from graphmem.report.out_of_memory import out_of_memory_text
from graphmem.report.words import caveat_text, part_label, runtime_title
from graphmem.runtime_models.vocabulary import Runtime

if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis

# per runtime: what each line is, in a few words (the parts' labels: graphmem/report/words.py)
_PEAK = {
    Runtime.ORT_CPU: "mem_in_use_peak",
    Runtime.ORT_CUDA: "arena in use at its peak",
    Runtime.TORCH_CUDA: "torch.cuda.max_memory_allocated",
    Runtime.TORCH_CPU: "allocator's peak above the residents",
}
_TOTAL = {Runtime.ORT_CPU: "= process tensor memory", Runtime.TORCH_CPU: "= process tensor memory"}
_EXPLAIN: dict[Runtime, dict[DevicePart, str]] = {
    Runtime.ORT_CPU: {
        DevicePart.TENSORS: "buffers its plan holds at the peak",
        DevicePart.RESIDENT: "the file's initializers, the inputs",
        DevicePart.ALLOCATOR: "arena rounding, chunks handed out whole",
        DevicePart.SCRATCH: "kernel scratch (im2col, Where)"},
    Runtime.ORT_CUDA: {
        DevicePart.TENSORS: "buffers its plan holds at the peak",
        DevicePart.RESIDENT: "initializers and inputs",
        DevicePart.ALLOCATOR: "rounding, unused region space",
        DevicePart.CONTEXT: "CUDA context"},
    Runtime.TORCH_CUDA: {
        DevicePart.TENSORS: "graphmem's live tensors",
        DevicePart.ALLOCATOR: "segments less tensors and workspaces",
        DevicePart.CONTEXT: "CUDA context, cuBLAS workspaces"},
    Runtime.TORCH_CPU: {
        DevicePart.TENSORS: "graphmem's live tensors",
        DevicePart.RESIDENT: "parameters, buffers, optimizer state, inputs",
        DevicePart.SCRATCH: "the running kernel's scratch (oneDNN copies)"},
}
_WEIGHTS_POOL = "prepacked MatMul/Gemm weights, small initializers"


def print_runtime(analysis: Analysis, console: Console) -> None:
    estimate = getattr(analysis, "runtime", None)
    note = getattr(analysis, "runtime_note", "")
    if estimate is None:
        if note:
            console.print(f"[yellow]runtime:[/] {markup_text(note)}")
        return
    from graphmem.pipeline.device_total import runtime_parts  # the estimate's parts

    runtime = Runtime(estimate.runtime)
    explain = _EXPLAIN[runtime]
    table = Table(title=f"runtime: {runtime_title(runtime)}",
                  show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column()
    table.add_row("runtime peak", format_bytes(estimate.runtime_peak_bytes), _PEAK[runtime])
    for index, part in enumerate(runtime_parts(estimate)):
        why = _WEIGHTS_POOL if part.part is DevicePart.RUNTIME_WEIGHTS else explain.get(
            part.part, "")
        table.add_row(("+ " if index else "") + part_label(part),
                      format_bytes(int(part.size_bytes)), why)
    total = _TOTAL.get(runtime, "= device total (nvidia-smi)")
    if estimate.satisfied is False:  # the GPU runs out: the total is what the run would need
        total = "= device total (demand)"
    table.add_row(total, format_bytes(estimate.device_total_bytes), _capacity(analysis))
    console.print(table)
    if estimate.out_of_memory is not None:
        console.print(f"[red]{markup_text(out_of_memory_text(estimate.out_of_memory))}[/]")
    elif estimate.failure:
        console.print(f"[red]{markup_text(estimate.failure)}[/]")
    fit = analysis.fit
    if fit is not None and fit.runtime == estimate.runtime and fit.caveat is not None:
        caveat = markup_text(caveat_text(fit.caveat))
        console.print(f"[dim]verdict on this device total; {caveat}[/]")


def _capacity(analysis: Analysis) -> str:
    """The GPU's one verdict, where it is read from this runtime's device total."""
    fit, estimate = analysis.fit, analysis.runtime
    if fit is None or estimate is None or fit.runtime != estimate.runtime:
        return ""
    verdict = "[green]fits[/]" if fit.fits else "[red]does NOT fit[/]"
    return f"{fit.utilization or 0.0:.1%} of {format_bytes(fit.capacity_bytes)}: {verdict}"
