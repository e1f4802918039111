"""The roofline times each distinct cost once (passes/roofline.py `estimate_roofline`): the
same NodeTimes, node for node, as timing every node on its own, on the samples and where
nodes share cost objects but not their FLOP rate."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from graphmem import analyze_onnx
from graphmem.core.ir import DType, Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.devices.gpus import GpuSpec, find_gpu
from graphmem.passes.costs import CostReport, CostStatus, compute_costs
from graphmem.passes.memory_model import size_at
from graphmem.passes.roofline import NodeTime, estimate_roofline, node_rate_dtype, node_time

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def plain_times(graph: Graph, costs: CostReport, gpu: GpuSpec,
                dims: dict[str, int]) -> tuple[NodeTime, ...]:
    """Each node timed on its own, its rate from the first floating output or input."""
    times = []
    for node, cost in zip(graph.nodes, costs.nodes, strict=True):
        rate = next((v.dtype for v in (*node.outputs, *node.present_inputs)
                     if v.dtype in _RATES), None)
        rate_dtype = _RATES[rate] if rate is not None else "float32"
        times.append(node_time(cost.name, size_at(cost.flops, dims),
                               size_at(cost.bytes_read + cost.bytes_written, dims),
                               gpu.flops_per_s_for(rate_dtype),
                               gpu.memory_bandwidth_bytes_per_s, rate_dtype,
                               cost.status is CostStatus.OK))
    return tuple(times)


_RATES = {DType.FLOAT32: "float32", DType.FLOAT16: "float16", DType.BFLOAT16: "bfloat16",
          DType.FLOAT64: "float32", DType.FLOAT8: "float16", DType.COMPLEX64: "float32",
          DType.COMPLEX128: "float32"}


@pytest.mark.parametrize("name", ["gpt2.onnx", "tiny_llama.onnx", "resnet50.onnx",
                                  "tiny_gpt.dynamo.onnx", "mobilenet_v2.onnx"])
@pytest.mark.parametrize("gpu_name", ["a100-80gb", "t4"])
def test_times_shared_by_cost_are_each_nodes_own(name: str, gpu_name: str) -> None:
    analysis = analyze_onnx(SAMPLES / name, batch=2, plan=False)
    graph, gpu = analysis.graph, find_gpu(gpu_name)
    dims = {**{name: 7 for name in graph.free_dims()}, **analysis.dims.bound}  # seq=7
    costs = compute_costs(graph, analysis.dims)
    result = estimate_roofline(graph, costs, gpu, dims)
    assert result.nodes == plain_times(graph, costs, gpu, dims)
    # the sharing is real: nodes share their cost objects
    keys = {(id(c.flops), id(c.bytes_read), id(c.bytes_written)) for c in costs.nodes}
    assert len(keys) < len(costs.nodes)


def value(name: str, dtype: DType, role: Role = Role.ACTIVATION) -> Value:
    return Value(name, dtype, (SymInt.const(64), SymInt.const(64)), role)


def test_one_cost_at_two_rates_and_a_node_with_no_floating_tensor() -> None:
    # Three Relu nodes given the very same cost objects: fp16 output (tensor-core rate),
    # fp32 output, and int64 in and out (float32 by default); 1,000,000 FLOPs and
    # 2 * 64 * 64 * 4 = 32,768 bytes each
    x = value("x", DType.FLOAT16, Role.INPUT)
    outputs = [value("h", DType.FLOAT16), value("f", DType.FLOAT32), value("i", DType.INT64)]
    ints = value("j", DType.INT64, Role.INPUT)
    nodes = [Node("half", "Relu", [x], [outputs[0]]), Node("single", "Cast", [x], [outputs[1]]),
             Node("whole", "Relu", [ints], [outputs[2]])]
    for node in nodes:
        node.outputs[0].producer = node
    values = {v.name: v for v in (x, ints, *outputs)}
    graph = Graph("rates", nodes, values, [x, ints], outputs)
    cost = compute_costs(graph).nodes[0]
    flops, read, written = SymInt.const(1_000_000), SymInt.const(16_384), SymInt.const(16_384)
    report = dataclasses.replace(compute_costs(graph), nodes=tuple(
        dataclasses.replace(cost, name=n.name, flops=flops, bytes_read=read,
                            bytes_written=written) for n in nodes))
    gpu = find_gpu("a100-80gb")
    times = estimate_roofline(graph, report, gpu, {}).nodes
    assert [t.rate_dtype for t in times] == ["float16", "float32", "float32"]
    assert [t.name for t in times] == ["half", "single", "whole"]
    assert times == plain_times(graph, report, gpu, {})
    assert [node_rate_dtype(n) for n in nodes] == ["float16", "float32", "float32"]
    assert times[0].est_time_s < times[1].est_time_s  # 312 vs 19.5 TFLOP/s: compute-bound
