"""`graphmem verify`: the prediction next to the measurement, on the terminal and as JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from graphmem.core.output_files import write_output_text
from graphmem.core.safe_text import markup, markup_dims, markup_text
from graphmem.core.units import format_bytes
from graphmem.core.version import __version__
from graphmem.verify.onnx_run import NodeComparison, Verification, percent_error
from graphmem.verify.runners.onnxruntime_runner import MeasuredRun

if TYPE_CHECKING:
    from graphmem.verify.torch_run import TorchVerification

_NODE_ROWS = 20


def print_verification(result: Verification, console: Console, all_nodes: bool = False) -> None:
    measured = result.measured
    dims = markup_dims(result.dims, "fixed shapes")
    threads = measured.threads or "default (one per core)"
    console.print(f"[bold]{markup_text(result.model_path)}[/] · {dims} · onnxruntime"
                  f" {measured.ort_version} {measured.provider}, intra-op threads {threads}",
                  soft_wrap=True)
    for note in measured.notes:
        console.print(f"[yellow]note:[/] {markup_text(note)}", soft_wrap=True)
    console.print(_peak_table(result))
    if result.runtime_order_note:
        console.print(f"[yellow]note:[/] {markup_text(result.runtime_order_note)}",
                      soft_wrap=True)
    console.print(_measured_detail(result), soft_wrap=True)
    _print_nodes(result, console, all_nodes)


def _pct(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else f"{value:+.1f}%"


def _peak_table(result: Verification) -> Table:
    measured = result.measured
    predicted = format_bytes(result.predicted_activation_peak_bytes)
    requested = format_bytes(measured.max_requested_at_node_end_bytes)
    table = Table(title="activation peak (no inputs, no weights): graphmem vs onnxruntime")
    for column in ("onnxruntime measure", "graphmem", "onnxruntime", "error"):
        table.add_column(column, justify="left" if column.endswith("measure") else "right")
    if result.runtime is not None:
        table.add_row("mem_in_use_peak, ORT_DISABLE_ALL: graphmem's model of onnxruntime",
                      format_bytes(result.runtime.runtime_peak_bytes),
                      format_bytes(measured.peak_bytes), _pct(result.runtime_model_error_pct))
        table.add_row("peak - weights, ORT_DISABLE_ALL: graphmem's model of onnxruntime",
                      format_bytes(result.runtime_model_activation_bytes or 0),
                      format_bytes(measured.activation_peak_bytes),
                      _pct(result.runtime_model_activation_error_pct))
    table.add_row("peak - weights, ORT_DISABLE_ALL: live-tensor peak", predicted,
                  format_bytes(measured.activation_peak_bytes), _pct(result.error_pct))
    table.add_row("requested at a kernel's end", predicted, requested,
                  _pct(result.requested_error_pct))
    runtime = result.predicted_in_runtime_order_bytes
    table.add_row("  the same, graphmem in ORT's order",
                  format_bytes(runtime) if runtime is not None else "-", requested,
                  _pct(result.runtime_order_error_pct))
    if result.optimized is not None:
        optimized = result.optimized.activation_peak_bytes
        if result.runtime_optimized is not None:
            table.add_row("mem_in_use_peak, ORT_ENABLE_ALL: graphmem's model on onnxruntime's"
                          " optimized graph",
                          format_bytes(result.runtime_optimized.runtime_peak_bytes),
                          format_bytes(result.optimized.peak_bytes),
                          _pct(result.runtime_model_optimized_error_pct))
        table.add_row("peak - weights, ORT_ENABLE_ALL: live-tensor peak", predicted,
                      format_bytes(optimized),
                      _pct(percent_error(result.predicted_activation_peak_bytes, optimized)))
    return table


def _measured_detail(result: Verification) -> str:
    measured = result.measured
    return (
        f"peak - weights: onnxruntime's mem_in_use_peak {format_bytes(measured.peak_bytes)}"
        f" ({measured.peak_bytes:,} B, the CPU arena's high-water mark: outputs,"
        " intermediates, kernel scratch, rounded up by the arena) less"
        f" {format_bytes(measured.weights_in_arena_bytes)} in use before the first kernel (the"
        f" weights or their prepacked copies); mem_arena_held"
        f" {format_bytes(measured.arena_held_bytes)}. requested at a kernel's end: the largest"
        " mem_bytes_requested_in_use after a kernel, less the weights (no rounding, no"
        f" scratch). graphmem's peak {format_bytes(result.predicted_peak_bytes)} ="
        f" {format_bytes(result.predicted_resident_bytes)} inputs and weights +"
        f" {format_bytes(result.predicted_activation_peak_bytes)}"
        " activations (graph outputs included).")


def _print_nodes(result: Verification, console: Console, all_nodes: bool) -> None:
    nodes = result.nodes
    equal = sum(1 for n in nodes if n.matches)
    console.print(f"per-node output bytes (ORT_DISABLE_ALL): {equal} of {len(nodes)} kernels"
                  f" equal to graphmem's; {len(result.unmatched_runtime_nodes)} not matched to a"
                  " graphmem node", soft_wrap=True)
    rows = list(nodes) if all_nodes else list(result.mismatched_nodes)[:_NODE_ROWS]
    if not rows:
        return
    title = "every node" if all_nodes else "nodes whose output bytes differ"
    table = Table(title=f"{title} (onnxruntime's execution order)")
    for column in ("node", "op", "graphmem", "onnxruntime (output_size)", ""):
        table.add_column(column, overflow="fold")
    for node in rows:
        table.add_row(markup(node.name), markup(node.op_type), _bytes(node.predicted_bytes),
                      f"{node.measured_bytes:,}", "" if node.matches else "[red]differs[/]")
    console.print(table)
    hidden = len(result.mismatched_nodes) - len(rows)
    if not all_nodes and hidden > 0:
        console.print(f"... and {hidden} more (--all-nodes lists every node)")


def _bytes(value: int | None) -> str:
    return "unknown" if value is None else f"{value:,}"


# ----- JSON --------------------------------------------------------------------------------


def verification_to_dict(result: Verification) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "kind": "graphmem verify",
        "graphmem_version": __version__,
        "model": result.model_path,
        "dims": result.dims,
        "inputs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype,
                    "int_high": s.high} for s in result.inputs],
        "predicted": {
            "peak_bytes": result.predicted_peak_bytes,
            "resident_bytes": result.predicted_resident_bytes,
            "activation_peak_bytes": result.predicted_activation_peak_bytes,
            "activation_peak_in_runtime_order_bytes": result.predicted_in_runtime_order_bytes,
            "runtime_order_note": result.runtime_order_note or None,
        },
        "measured": _run(result.measured),
        "optimized": _run(result.optimized) if result.optimized else None,
        "runtime_model": None if result.runtime is None else {
            "name": result.runtime.runtime,
            "runtime_peak_bytes": result.runtime.runtime_peak_bytes,
            "runtime_weights_bytes": result.runtime.runtime_weights_bytes,
            "arena_held_bytes": result.runtime.arena_held_bytes,
            "error_pct": _finite(result.runtime_model_error_pct),
            "activation_error_pct": _finite(result.runtime_model_activation_error_pct),
        },
        "runtime_model_optimized": None if result.runtime_optimized is None else {
            "name": result.runtime_optimized.runtime,
            "runtime_peak_bytes": result.runtime_optimized.runtime_peak_bytes,
            "error_pct": _finite(result.runtime_model_optimized_error_pct),
        },
        "error_pct": _finite(result.error_pct),
        "requested_error_pct": _finite(result.requested_error_pct),
        "runtime_order_error_pct": _finite(result.runtime_order_error_pct),
        "nodes": [_node(n) for n in result.nodes],
        "unmatched_runtime_nodes": list(result.unmatched_runtime_nodes),
    }


def _run(run: MeasuredRun) -> dict[str, Any]:
    return {
        "onnxruntime_version": run.ort_version,
        "provider": run.provider,
        "graph_optimization": run.optimization,
        "intra_op_threads": run.threads,
        "mem_in_use_peak_bytes": run.peak_bytes,
        "mem_arena_held_bytes": run.arena_held_bytes,
        "weights_in_arena_bytes": run.weights_in_arena_bytes,
        "activation_peak_bytes": run.activation_peak_bytes,
        "max_in_use_at_node_end_bytes": run.max_in_use_at_node_end_bytes,
        "max_requested_at_node_end_bytes": run.max_requested_at_node_end_bytes,
        "kernel_count": len(run.nodes),
        "notes": list(run.notes),
    }


def _node(node: NodeComparison) -> dict[str, Any]:
    return {"name": node.name, "op": node.op_type, "predicted_output_bytes": node.predicted_bytes,
            "measured_output_bytes": node.measured_bytes, "equal": node.matches}


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else round(value, 3)


def verification_json_text(result: Verification) -> str:
    return json.dumps(verification_to_dict(result), indent=2) + "\n"


def write_verification_json(result: Verification, path: Path) -> None:
    write_output_text(path, [verification_json_text(result)])


def print_torch_verification(result: TorchVerification, console: Console) -> None:
    step = "training step" if result.train else "inference step"
    if result.train:
        step += f", {result.optimizer}" + (f", amp {result.amp}" if result.amp else "")
    console.print(f"[bold]{markup_text(result.model)}[/] · inputs"
                  f" {markup_text(', '.join(result.inputs))}"
                  f" · one {step} on {result.measured.device}", soft_wrap=True)
    table = Table(title="activation peak (no parameters, optimizer state or inputs)")
    for column in ("graphmem", "measured", "error"):
        table.add_column(column, justify="right")
    table.add_row(format_bytes(result.predicted_activation_peak_bytes),
                  format_bytes(result.measured.peak_bytes), _pct(result.error_pct))
    console.print(table)
    if result.traced_for is not None:
        console.print(f"graphmem traced the step as CUDA runs it on"
                      f" {markup_text(result.traced_for)} (docs/cuda-trace.md)", soft_wrap=True)
    _print_kernel_scratch(result, console)
    for warning in result.prediction_warnings:  # e.g. the routing the prediction assumed
        console.print(f"prediction: {markup_text(warning)}", soft_wrap=True)
    console.print(f"measured with {markup_text(result.measured.method)}; graphmem's figure is"
                  " memory.activation_peak_bytes of `graphmem analyze` with the same options",
                  soft_wrap=True)


def _print_kernel_scratch(result: TorchVerification, console: Console) -> None:
    """The CPU's buffers kernels allocate and free before returning: measured, labelled,
    never added to the tensor peak the error compares (docs/verify.md#pytorch-models)."""
    measured = result.measured
    if measured.kernel_scratch_bytes is None or measured.allocator_peak_bytes is None:
        return
    where = f", inside {markup_text(measured.scratch_kernel)}" if measured.scratch_kernel else ""
    console.print(f"kernels' scratch (measured, not in either figure above):"
                  f" +{format_bytes(measured.kernel_scratch_bytes)}; the allocator's peak is"
                  f" {format_bytes(measured.allocator_peak_bytes)}{where}: buffers a CPU kernel"
                  " allocates and frees before it returns (oneDNN's reorders and convolution"
                  " scratch), no tensor of the step", soft_wrap=True)
    predicted = result.predicted_allocator_peak_bytes
    if predicted is None:
        return
    table = Table(title="allocator's peak (the activation peak with kernels' scratch)")
    for column in ("graphmem (torch-cpu)", "of it scratch", "measured", "error"):
        table.add_column(column, justify="right")
    table.add_row(format_bytes(predicted), format_bytes(result.predicted_scratch_bytes or 0),
                  format_bytes(measured.allocator_peak_bytes),
                  _pct(result.allocator_error_pct))
    console.print(table)
    if result.predicted_scratch_node:
        console.print(f"graphmem's peak with scratch is while"
                      f" {markup_text(result.predicted_scratch_node)} runs"
                      " (graphmem analyze --runtime torch-cpu)", soft_wrap=True)


def torch_verification_json(result: TorchVerification) -> str:
    data = {
        "graphmem_version": __version__,
        "model": result.model,
        "inputs": list(result.inputs),
        "mode": "training" if result.train else "inference",
        "optimizer": result.optimizer,
        "amp": result.amp,
        "device": result.measured.device,
        "method": result.measured.method,
        "predicted_activation_peak_bytes": result.predicted_activation_peak_bytes,
        "measured_peak_bytes": result.measured.peak_bytes,
        "error_pct": _finite(result.error_pct),
        # CPU only (null on a GPU, where max_memory_allocated includes it): the allocator's
        # peak, kernels' scratch included, and how far it is above the tensor peak
        "measured_allocator_peak_bytes": result.measured.allocator_peak_bytes,
        "measured_kernel_scratch_bytes": result.measured.kernel_scratch_bytes,
        "scratch_kernel": result.measured.scratch_kernel,
        # graphmem's torch-cpu model (CPU only): the peak with kernels' scratch, its scratch
        "predicted_allocator_peak_bytes": result.predicted_allocator_peak_bytes,
        "predicted_kernel_scratch_bytes": result.predicted_scratch_bytes,
        "predicted_allocator_error_pct": _finite(result.allocator_error_pct),
        # the GPU whose CUDA kernels the prediction traced (docs/cuda-trace.md); null: the CPU's
        "traced_for": result.traced_for,
        # what the prediction assumed (the MoE routing policy, a default input...)
        "prediction_warnings": list(result.prediction_warnings),
    }
    return json.dumps(data, indent=2) + "\n"
