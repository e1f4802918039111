"""Roofline estimate of each node's time on a GPU, and of the whole model's latency.

For each node (Williams, Waterman and Patterson's roofline model):

    compute time = FLOPs / peak FLOP/s for the node's dtype
    memory time  = (bytes read + bytes written) / memory bandwidth
    time         = max(compute time, memory time)

The node is compute-bound when its compute time is the larger, memory-bound otherwise; its
arithmetic intensity is FLOPs per byte moved. The model's latency is the sum over nodes
(one node after another, as a single stream runs them) and its throughput, where a batch dim
is bound, is batch / latency.

This is a LOWER BOUND from datasheet peaks, not a benchmark: real kernels reach a fraction of
peak FLOP/s and bandwidth, pay launch overheads (a few microseconds per kernel), and do not
overlap perfectly; fused kernels can beat the per-node sum of memory traffic. Other caveats:
- the dtype of a node is that of its first floating output (else its first floating input,
  else float32); float16/bfloat16 use the dense tensor-core rate for every op (elementwise ops
  do not run on tensor cores, but they are memory-bound anyway), float32 the non-tensor rate;
  float64, float8 and complex have no rate in the GPU table: float64 uses the float32 rate
  and float8 the float16 rate, which keeps the estimate a bound only where those rates are
  not lower than the real one (fp8 tensor cores can be 2x faster than fp16 on Hopper);
- nodes whose FLOPs are unknown (unsupported ops, unknown shapes) count memory time only;
- bytes are tensor sizes: a weight read once per node, caches not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, eq

from graphmem.core.ir import DType, Graph, Node
from graphmem.devices.gpus import GpuSpec
from graphmem.passes.costs import CostReport, CostStatus
from graphmem.passes.memory_model import size_at

TOP_NODES = 10

# Element types without a rate in the GPU table -> the rate used instead (see docstring).
_RATE_DTYPE = {
    DType.FLOAT32: "float32",
    DType.FLOAT16: "float16",
    DType.BFLOAT16: "bfloat16",
    DType.FLOAT64: "float32",
    DType.FLOAT8: "float16",
    DType.COMPLEX64: "float32",
    DType.COMPLEX128: "float32",
}


_REDUCED = ("float16", "bfloat16")  # precisions chosen for speed


@dataclass(frozen=True)
class NodeTime:
    name: str
    est_time_s: float
    bound: str  # "compute" | "memory"
    intensity_flops_per_byte: float | None  # None when the node moves no bytes
    flops: int
    bytes_moved: int  # bytes read + bytes written
    rate_dtype: str  # which FLOP rate was used: float32 | float16 | bfloat16
    flops_known: bool


@dataclass(frozen=True)
class RooflineResult:
    """Per-node roofline times on one GPU; a lower bound, not a measurement."""

    gpu_name: str
    est_latency_s: float  # sum of the per-node times
    batch: int | None  # the bound batch dim, when the model has one
    est_throughput_per_s: float | None  # batch / latency (samples per second)
    compute_bound_time_s: float
    memory_bound_time_s: float
    nodes: tuple[NodeTime, ...]  # model order
    top: tuple[NodeTime, ...]  # the nodes taking the most time, longest first
    nodes_without_flops: int  # counted with memory time only
    # FLOPs in a reduced precision this GPU runs no faster than float32, by dtype: bfloat16
    # on a T4 or V100 (no bf16 tensor cores) is timed at the FP32 rate; () when none
    unaccelerated_flops: tuple[tuple[str, int], ...] = ()


def estimate_roofline(graph: Graph, costs: CostReport, gpu: GpuSpec, dims: Mapping[str, int],
                      batch_dim: str | None = None) -> RooflineResult:
    """Roofline times with every dim bound by `dims` (costs may still be symbolic)."""
    # A decoder's nodes share a few hundred costs (passes/costs.py gives the nodes of one
    # signature the same SymInt objects): each distinct (FLOPs, bytes, status, rate) is timed
    # once, keyed by the objects' identity (`costs` keeps them alive meanwhile).
    # Nodes of one cost signature (`CostReport.groups`: the same op, shapes and dtypes, so
    # the same rate dtype and cost objects) have one key: it is found once per signature.
    timed: dict[tuple[int, int, int, bool, str], NodeTime] = {}
    by_group: dict[int, NodeTime] = {}
    groups = costs.groups if len(costs.groups) == len(costs.nodes) else (-1,) * len(costs.nodes)
    times = []
    new = object.__new__
    for node, cost, group in zip(graph.nodes, costs.nodes, groups, strict=True):
        shared = by_group.get(group)
        if shared is None:
            rate_dtype = node_rate_dtype(node)
            known = cost.status is CostStatus.OK
            key = (id(cost.flops), id(cost.bytes_read), id(cost.bytes_written), known,
                   rate_dtype)
            shared = timed.get(key)
            if shared is None:
                shared = timed[key] = node_time(
                    cost.name, size_at(cost.flops, dims),
                    size_at(cost.bytes_read + cost.bytes_written, dims),
                    gpu.flops_per_s_for(rate_dtype), gpu.memory_bandwidth_bytes_per_s,
                    rate_dtype, known)
            if group >= 0:
                by_group[group] = shared
        # the shared time under this node's name, its fields copied as one dict (the frozen
        # dataclass's __init__ sets its 8 fields one `object.__setattr__` at a time), then
        # the name stored over the copy's (no keywords dict per node)
        timed_node = new(NodeTime)
        fields = timed_node.__dict__
        fields.update(shared.__dict__)
        fields["name"] = cost.name
        times.append(timed_node)
    return summarize(gpu, times, dims.get(batch_dim) if batch_dim else None)


def summarize(gpu: GpuSpec, times: Sequence[NodeTime], batch: int | None) -> RooflineResult:
    # each total adds the same floats in the same node order as a loop would, iterated in C
    seconds = list(map(_SECONDS, times))
    bounds = list(map(_BOUND, times))
    latency = sum(seconds, 0.0)
    throughput = batch / latency if batch is not None and latency > 0 else None
    return RooflineResult(
        gpu_name=gpu.name,
        est_latency_s=latency,
        batch=batch,
        est_throughput_per_s=throughput,
        compute_bound_time_s=sum(compress(seconds, map(eq, bounds, repeat("compute"))), 0.0),
        memory_bound_time_s=sum(compress(seconds, map(eq, bounds, repeat("memory"))), 0.0),
        nodes=tuple(times),
        # largest first; a stable sort keeps equal times in node order, reversed or not
        top=tuple(sorted(times, key=_SECONDS, reverse=True)[:TOP_NODES]),
        nodes_without_flops=len(times) - sum(map(attrgetter("flops_known"), times)),
        unaccelerated_flops=unaccelerated_flops(gpu, times),
    )


_SECONDS = attrgetter("est_time_s")
_BOUND = attrgetter("bound")


def unaccelerated_flops(gpu: GpuSpec, times: Sequence[NodeTime]) -> tuple[tuple[str, int], ...]:
    """The FLOPs of each reduced precision whose rate on `gpu` is no more than its float32
    rate (the precision buys no speed there), where there are any."""
    slow = [dtype for dtype in _REDUCED if gpu.flops_per_s_for(dtype) <= gpu.fp32_flops_per_s]
    totals = [(dtype, sum(t.flops for t in times if t.rate_dtype == dtype)) for dtype in slow]
    return tuple((dtype, flops) for dtype, flops in totals if flops > 0)


def node_time(name: str, flops: int, bytes_moved: int, flop_rate: float,
              bandwidth: float, rate_dtype: str = "float32", flops_known: bool = True
              ) -> NodeTime:
    """max(FLOPs / FLOP rate, bytes / bandwidth), and which of the two it is."""
    compute_s = flops / flop_rate
    memory_s = bytes_moved / bandwidth
    return NodeTime(
        name=name,
        est_time_s=max(compute_s, memory_s),
        bound="compute" if compute_s > memory_s else "memory",
        intensity_flops_per_byte=flops / bytes_moved if bytes_moved else None,
        flops=flops,
        bytes_moved=bytes_moved,
        rate_dtype=rate_dtype,
        flops_known=flops_known,
    )


def node_rate_dtype(node: Node) -> str:
    """The FLOP rate a node runs at: its first floating output's dtype, else its first
    floating input's (see docstring)."""
    # by the dtype's identity (members are singletons): an Enum member hashes in Python
    for value in node.outputs:
        rate = _RATE_BY_ID.get(id(value.dtype))
        if rate is not None:
            return rate
    for read in node.inputs:
        if read is not None and (rate := _RATE_BY_ID.get(id(read.dtype))) is not None:
            return rate
    return "float32"


_RATE_BY_ID = {id(dtype): rate for dtype, rate in _RATE_DTYPE.items()}
