"""Group FLOPs, parameters and peak memory by module path, torchinfo-style, at a depth."""

from __future__ import annotations

from dataclasses import dataclass

from graphmem.core.ir import Graph, Role, Value
from graphmem.core.symbolic import SymInt, sum_sizes
from graphmem.passes.costs import CostReport
from graphmem.passes.liveness import LivenessResult

TOP = "(top level)"


@dataclass(frozen=True)
class ModuleRow:
    module: str
    params: int
    macs: SymInt
    flops: SymInt
    bytes_at_peak: SymInt  # activations made by this module's nodes that are live at the peak


@dataclass(frozen=True)
class ModuleReport:
    depth: int
    rows: tuple[ModuleRow, ...]  # in order of first appearance in the schedule


def module_at_depth(path: str, depth: int) -> str:
    return ".".join(path.split(".")[:depth]) if path else TOP


def parameter_module(name: str) -> str:
    """`layer1.0.conv1.weight` -> `layer1.0.conv1`; names without a dotted path -> ''."""
    head, dot, _ = name.rpartition(".")
    return head if dot and " " not in name and "/" not in name and ":" not in name else ""


def _owner_module(parameter: Value) -> str:
    """By its dotted name (`fc.weight`), else the module of the first node that reads it
    (exporters rename folded weights `onnx::Conv_497`)."""
    by_name = parameter_module(parameter.name)
    if by_name or not parameter.consumers:
        return by_name
    return parameter.consumers[0].module_path


def _costs_by_module(graph: Graph, costs: CostReport,
                     depth: int) -> tuple[dict[str, SymInt], dict[str, SymInt]]:
    """(MACs, FLOPs) per module at `depth`, in order of first appearance: each module's sizes
    summed at once (a decoder's layers repeat the same few paths and sizes)."""
    at_depth: dict[str, str] = {}
    macs: dict[str, list[SymInt]] = {}
    flops: dict[str, list[SymInt]] = {}
    for node, cost in zip(graph.nodes, costs.nodes, strict=True):
        key = at_depth.get(node.module_path)
        if key is None:
            key = at_depth[node.module_path] = module_at_depth(node.module_path, depth)
        macs.setdefault(key, []).append(cost.macs)
        flops.setdefault(key, []).append(cost.flops)
    return ({k: sum_sizes(v) for k, v in macs.items()},
            {k: sum_sizes(v) for k, v in flops.items()})


def group_by_module(graph: Graph, costs: CostReport, liveness: LivenessResult,
                    depth: int) -> ModuleReport:
    macs, flops = _costs_by_module(graph, costs, depth)
    order = dict.fromkeys(macs)
    params: dict[str, int] = {}
    for value in graph.values_with_role(Role.PARAMETER):
        key = module_at_depth(_owner_module(value), depth)
        params[key] = params.get(key, 0) + int(value.numel or 0)
    live: dict[str, list[SymInt]] = {}  # summed at once (10^5 outputs live at the peak)
    modules_by_node = {node.name: node.module_path for node in graph.nodes}
    for tensor in liveness.live_at_peak:
        if tensor.producer is not None:
            key = module_at_depth(modules_by_node.get(tensor.producer, ""), depth)
            live.setdefault(key, []).append(tensor.nbytes)
    at_peak = {key: sum_sizes(sizes) for key, sizes in live.items()}
    keys = list(order) + [k for k in params if k not in order]
    rows = tuple(
        ModuleRow(key, params.get(key, 0), macs.get(key, SymInt()), flops.get(key, SymInt()),
                  at_peak.get(key, SymInt()))
        for key in keys
    )
    return ModuleReport(depth=depth, rows=rows)
