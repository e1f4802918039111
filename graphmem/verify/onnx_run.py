"""`graphmem verify`: graphmem's prediction next to what onnxruntime measured on a real run.

What is compared (numbers in README "Check the numbers"):
- graphmem's activation peak (`memory.activation_peak_bytes`: the live-tensor peak in the
  model's order, less inputs, weights and constants) against onnxruntime's measured activation
  peak: `mem_in_use_peak` less the arena bytes in use before the first kernel (the weights the
  arena holds). Both exclude the caller's inputs and the weights; both include graph outputs.
  The comparison run uses ORT_DISABLE_ALL, so onnxruntime runs the very graph graphmem analyzed.
- the bytes onnxruntime requested, at the end of each kernel (`mem_bytes_requested_in_use`
  less the weights): no arena rounding, no scratch that lives inside one kernel; and
  graphmem's liveness replayed in onnxruntime's execution order (from the profile) against
  it, which sets "different order" and "arena rounding" apart from "different memory model";
- a second run at ORT_ENABLE_ALL (fusions, layout changes), as a deployment runs it: not
  compared node by node (its nodes are renamed and fused), but its `mem_in_use_peak` against
  graphmem's model planned on onnxruntime's optimized graph (`runtime_optimized`);
- per node, graphmem's output bytes against onnxruntime's `output_size`, nodes matched by name
  (else by onnxruntime's node index with the same op type).

verify is the one graphmem command that loads a model's weights (the run's notes say so): its
external data files must be regular files inside the model's folder, checked before any run
(frontends/onnx/untrusted.py, `safe_data_file`); analyze and check never read them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from graphmem.core.ir import DType, Graph, Node, Role, Value
from graphmem.core.progress import steps
from graphmem.core.symbolic import SymInt
from graphmem.core.units import format_bytes
from graphmem.errors import GraphmemError
from graphmem.passes.dims import value_bytes
from graphmem.passes.liveness import analyze_liveness
from graphmem.pipeline import run
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.request import Request, SuggestOptions
from graphmem.pipeline.runtime import runtime_estimate
from graphmem.runtime_models.base import RuntimeEstimate
from graphmem.verify.runners.onnxruntime_runner import InputSpec, MeasuredRun, RunLimits

# Integer inputs are token ids or indices: below this, and below the size of any table they
# index with Gather, so random values never index out of range.
INT_INPUT_HIGH = 100

_NUMPY_DTYPES = {
    DType.FLOAT32: "float32", DType.FLOAT16: "float16", DType.FLOAT64: "float64",
    DType.INT64: "int64", DType.INT32: "int32", DType.INT16: "int16", DType.INT8: "int8",
    DType.UINT64: "uint64", DType.UINT32: "uint32", DType.UINT16: "uint16",
    DType.UINT8: "uint8", DType.BOOL: "bool",
}


@dataclass(frozen=True)
class NodeComparison:
    name: str
    op_type: str
    predicted_bytes: int | None  # graphmem's output bytes; None: a shape it does not know
    measured_bytes: int  # onnxruntime's output_size

    @property
    def matches(self) -> bool:
        return self.predicted_bytes == self.measured_bytes


@dataclass(frozen=True)
class Verification:
    model_path: str
    dims: dict[str, int]
    inputs: tuple[InputSpec, ...]
    predicted_peak_bytes: int  # residents + activations, model order
    predicted_resident_bytes: int  # inputs + weights + constants
    predicted_activation_peak_bytes: int
    predicted_in_runtime_order_bytes: int | None  # activation peak in onnxruntime's order
    runtime_order_note: str  # why it is missing, when it is
    measured: MeasuredRun  # ORT_DISABLE_ALL: the graph graphmem analyzed
    optimized: MeasuredRun | None  # ORT_ENABLE_ALL
    nodes: tuple[NodeComparison, ...]  # execution order
    unmatched_runtime_nodes: tuple[str, ...]
    # graphmem's model of onnxruntime CPU (graphmem/runtime_models/ort_cpu.py): its prediction of
    # the measured `mem_in_use_peak` at ORT_DISABLE_ALL, weights in the arena included
    runtime: RuntimeEstimate | None = None
    # the same model planned on onnxruntime's ORT_ENABLE_ALL graph, against `optimized`
    runtime_optimized: RuntimeEstimate | None = None

    @property
    def runtime_model_optimized_error_pct(self) -> float | None:
        """The runtime model of the ORT_ENABLE_ALL session against its `mem_in_use_peak`."""
        if self.runtime_optimized is None or self.optimized is None:
            return None
        return percent_error(self.runtime_optimized.runtime_peak_bytes,
                             self.optimized.peak_bytes)

    @property
    def runtime_model_error_pct(self) -> float | None:
        """The runtime model against the measured `mem_in_use_peak` (ORT_DISABLE_ALL)."""
        if self.runtime is None:
            return None
        return percent_error(self.runtime.runtime_peak_bytes, self.measured.peak_bytes)

    @property
    def runtime_model_activation_bytes(self) -> int | None:
        """The runtime model's peak less the weights it puts in the arena before the run."""
        if self.runtime is None:
            return None
        return self.runtime.runtime_peak_bytes - self.runtime.runtime_weights_bytes

    @property
    def runtime_model_activation_error_pct(self) -> float | None:
        """The same less the weights on both sides: the run's own allocations alone."""
        predicted = self.runtime_model_activation_bytes
        if predicted is None:
            return None
        return percent_error(predicted, self.measured.activation_peak_bytes)

    @property
    def error_pct(self) -> float:
        """(predicted - measured) / measured activation peak, in %; > 0: graphmem above."""
        return percent_error(self.predicted_activation_peak_bytes,
                             self.measured.activation_peak_bytes)

    @property
    def requested_error_pct(self) -> float:
        """Against the bytes onnxruntime requested (no arena rounding, no kernel scratch)."""
        return percent_error(self.predicted_activation_peak_bytes,
                             self.measured.max_requested_at_node_end_bytes)

    @property
    def runtime_order_error_pct(self) -> float | None:
        """graphmem in onnxruntime's order against the requested bytes: the allocation models
        alone (in-place reuse, aliasing, planned buffers), with order and rounding set apart."""
        if self.predicted_in_runtime_order_bytes is None:
            return None
        return percent_error(self.predicted_in_runtime_order_bytes,
                             self.measured.max_requested_at_node_end_bytes)

    @property
    def mismatched_nodes(self) -> tuple[NodeComparison, ...]:
        return tuple(n for n in self.nodes if not n.matches)


def percent_error(predicted: int, measured: int) -> float:
    if measured == 0:
        return 0.0 if predicted == 0 else float("inf")
    return (predicted - measured) / measured * 100


def check_run_threads(flag: str, threads: int | None) -> None:
    """A run starts each thread it is given: more than the machine's cores only slows it (1,024
    threads on a 3-node MLP ran past 300 s; 256 took 3.2 s), so verify takes at most one per
    core. (analyze's --threads describes the machine modelled, and takes up to MAX_THREADS.)"""
    cores = os.cpu_count() or 1
    if threads is not None and threads > cores:
        raise GraphmemError(f"{flag} {threads}: this machine has {cores} cores and verify runs"
                            f" one thread each: give at most {cores}")


def verify_onnx(path: str | Path, batch: int | None = None,
                dims: Mapping[str, int] | None = None, provider: str = "cpu",
                threads: int | None = None, seed: int = 0,
                optimized_run: bool = True, limits: RunLimits | None = None) -> Verification:
    """Analyze, run on onnxruntime (twice: optimizations off, then all on), compare; the
    external data files are checked (inside the model's folder, regular, long enough) first.
    Each run is a child process under `limits` (time and memory); a run graphmem predicts
    above the memory limit is refused before it starts."""
    from graphmem.verify.runners.onnxruntime_runner import check_external_data, run_onnx

    check_run_threads("threads", threads)
    path = Path(path)
    analysis = run.analyze(Request(path, batch=batch, dims=dict(dims or {}), plan=False,
                                   suggest=SuggestOptions(enabled=False)))
    specs = input_specs(analysis)
    check_external_data(path)  # before a run: the one error names the missing file
    limits = limits or RunLimits()
    _check_predicted_peak(analysis, limits.address_space_bytes)
    with steps("onnxruntime runs", 2 if optimized_run else 1) as done:
        measured = run_onnx(path, specs, provider, "disabled", threads, seed, limits)
        done(1)
        optimized = None
        if optimized_run:
            optimized = run_onnx(path, specs, provider, "all", threads, seed, limits)
            done(2)
    result = compare(analysis, specs, measured, optimized)
    if provider != "cpu":
        return result
    estimate = runtime_estimate(analysis, "ort-cpu", None, threads=threads,
                                ort_optimization="disabled")
    # graphmem's model of the optimized run builds a session of synthetic weights here, in
    # this process: about 4x the model's tensors, bounded by the same memory limit
    optimized_estimate = runtime_estimate(
        analysis, "ort-cpu", None, threads=threads, ort_optimization="all",
        optimize_max_bytes=limits.child_bytes // 4) if optimized else None
    return dataclasses.replace(result, runtime=estimate, runtime_optimized=optimized_estimate)


def _check_predicted_peak(analysis: Analysis, memory_bytes: int) -> None:
    """A run graphmem predicts above verify's memory limit is refused before it starts."""
    peak = analysis.peak_bytes
    if isinstance(peak, int) and peak > memory_bytes:
        raise GraphmemError(
            f"graphmem predicts {format_bytes(peak)} of live tensors for this run, above"
            f" verify's memory limit of {format_bytes(memory_bytes)}: raise --memory-limit"
            " or lower --batch/--dim (graphmem analyze needs no run)")


def input_specs(analysis: Analysis) -> tuple[InputSpec, ...]:
    """The graph's inputs at the bound dims; an error naming the dims when one is free."""
    graph, bound = analysis.graph, analysis.dims.bound
    specs = []
    for value in graph.inputs:
        if value.role is not Role.INPUT:
            continue
        shape = _bound_shape(value, bound)
        if value.dtype not in _NUMPY_DTYPES:
            raise GraphmemError(f"input {value.name} is {value.dtype.label}: verify makes up"
                                " float, integer and bool inputs only")
        specs.append(InputSpec(value.name, shape, _NUMPY_DTYPES[value.dtype],
                               _index_high(value)))
    return tuple(specs)


def _bound_shape(value: Value, bound: Mapping[str, int]) -> tuple[int, ...]:
    if value.shape is None or any(d is None for d in value.shape):
        raise GraphmemError(f"input {value.name} has an unknown shape: verify cannot make it up")
    dims = [d.bind(bound) for d in value.shape if d is not None]
    free = sorted({name for d in dims for name in d.free_symbols()})
    if free:
        binds = " ".join(f"--dim {d}=N" for d in free)
        raise GraphmemError(f"dims left free ({', '.join(free)}): bind the dims with"
                            f" --batch/--dim ({binds}); verify runs the model at numbers")
    return tuple(int(d) for d in dims)


def _index_high(value: Value) -> int:
    """Integer inputs stay below INT_INPUT_HIGH and below any table they index (Gather)."""
    high = INT_INPUT_HIGH
    for node in value.consumers:
        if node.op_type != "Gather" or node.input(1) is not value:
            continue
        table = node.input(0)
        if table is None or table.shape is None:
            continue
        axis = node.attr_int("axis", 0) % max(len(table.shape), 1)
        size = table.shape[axis]
        if size is not None and size.is_constant:
            high = min(high, int(size))
    return high


def compare(analysis: Analysis, inputs: Sequence[InputSpec], measured: MeasuredRun,
            optimized: MeasuredRun | None = None) -> Verification:
    graph, bound = analysis.graph, analysis.dims.bound
    sizes = value_bytes(graph, analysis.dims)
    matched = _match_nodes(graph, measured)
    liveness = analysis.liveness
    runtime_peak, note = _runtime_order_peak(graph, sizes, matched, measured, bound)
    comparisons = tuple(
        NodeComparison(event.name, event.op_type,
                       _output_bytes(node, sizes) if node else None, event.output_bytes)
        for event, node in zip(measured.nodes, matched, strict=True))
    return Verification(
        model_path=analysis.model.path,
        dims=dict(bound),
        inputs=tuple(inputs),
        predicted_peak_bytes=int(liveness.peak_bytes),
        predicted_resident_bytes=int(liveness.resident_bytes),
        predicted_activation_peak_bytes=int(liveness.activation_peak_bytes),
        predicted_in_runtime_order_bytes=runtime_peak,
        runtime_order_note=note,
        measured=measured,
        optimized=optimized,
        nodes=comparisons,
        unmatched_runtime_nodes=tuple(e.name for e, n in zip(measured.nodes, matched,
                                                              strict=True) if n is None),
    )


def _match_nodes(graph: Graph, measured: MeasuredRun) -> list[Node | None]:
    """The graphmem node of each profiled kernel: same name, else same index and op type."""
    by_name = {node.name: node for node in graph.nodes}
    matched: list[Node | None] = []
    for event in measured.nodes:
        node = by_name.get(event.name)
        if node is None or node.op_type != event.op_type:
            index = event.node_index
            node = graph.nodes[index] if index is not None and index < len(graph.nodes) else None
            if node is not None and node.op_type != event.op_type:
                node = None
        matched.append(node)
    return matched


def _output_bytes(node: Node, sizes: Mapping[str, SymInt | None]) -> int | None:
    total = 0
    for value in node.outputs:
        size = sizes.get(value.name)
        if size is None or not size.is_constant:
            return None
        total += int(size)
    return total


def _runtime_order_peak(graph: Graph, sizes: Mapping[str, SymInt | None],
                        matched: list[Node | None], measured: MeasuredRun,
                        bound: Mapping[str, int]) -> tuple[int | None, str]:
    """graphmem's activation peak in the order onnxruntime ran the nodes."""
    order = [n for n in matched if n is not None]
    if len(order) != len(graph.nodes) or len(set(map(id, order))) != len(order):
        return None, (f"onnxruntime ran {len(measured.nodes)} kernels and {len(order)} match"
                      f" graphmem's {len(graph.nodes)} nodes one to one: no common order")
    liveness = analyze_liveness(graph, sizes, order=order, dims=bound)
    if not liveness.activation_peak_bytes.is_constant:
        return None, "the peak in onnxruntime's order depends on unknown sizes"
    return int(liveness.activation_peak_bytes), ""
