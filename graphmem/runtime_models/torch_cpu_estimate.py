"""The torch-cpu runtime model's answer: the step in the model's order with each kernel's
scratch (graphmem/runtime_models/torch_cpu.py `scratch_bytes`) added while it runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from graphmem.core.ir import Graph
from graphmem.core.symbolic import SymInt
from graphmem.passes.dims import DimBinding, value_bytes
from graphmem.passes.memory_model import build_memory_model, live_profile, plan_dims
from graphmem.runtime_models.base import (
    LargestScratch,
    Runtime,
    RuntimeContext,
    RuntimeEstimate,
    default_threads,
)
from graphmem.runtime_models.torch_cpu import Dims, scratch_bytes


@dataclass(frozen=True)
class CpuPeak:
    peak_bytes: int  # residents + live tensors + the running node's scratch, at the peak
    tensors_bytes: int  # live tensors (residents included) during the peak's node
    scratch_bytes: int  # the peak node's scratch
    node: str  # the node running at the peak
    largest_scratch_bytes: int
    largest_scratch_node: str


def cpu_peak(graph: Graph, dims: Dims, sizes: Mapping[str, SymInt | None] | None = None,
             threads: int = 1) -> CpuPeak:
    """The step in the model's order with every node's scratch added while it runs
    (`sizes`: the graph's value sizes at `dims`, where the caller has them)."""
    bound = plan_dims(graph, dims)
    if sizes is None:
        sizes = value_bytes(graph, DimBinding(dict(bound), (), None))
    model = build_memory_model(graph, sizes, bound)
    during, _ = live_profile(model, range(model.node_count))
    best = (-1, 0, 0, "")
    largest = (0, "")
    for node, live in zip(graph.nodes, during, strict=True):
        extra = scratch_bytes(node, bound, threads)
        largest = max(largest, (extra, node.name))
        best = max(best, (live + extra, live, extra, node.name))
    return CpuPeak(best[0], best[1], best[2], best[3], *largest)


def torch_cpu_estimate(context: RuntimeContext) -> RuntimeEstimate:
    """Eager PyTorch on the CPU: the live tensors' peak with each kernel's scratch added at
    its own node (the peak may move to a node whose scratch is large)."""
    peak = cpu_peak(context.graph, context.dims.bound, context.sizes,
                    context.threads or default_threads())
    tensors = peak.tensors_bytes - context.resident_bytes
    return RuntimeEstimate(
        runtime=Runtime.TORCH_CPU,
        tensors_at_peak_bytes=tensors,
        allocator_overhead_bytes=0,
        context_bytes=0,
        runtime_peak_bytes=peak.peak_bytes - context.resident_bytes,
        device_total_bytes=peak.peak_bytes,
        workspace_bytes=peak.scratch_bytes,
        workspace_node=peak.node,
        largest_scratch=LargestScratch(peak.largest_scratch_node, peak.largest_scratch_bytes),
        resident_bytes=context.resident_bytes,
    )
