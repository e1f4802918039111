"""Roofline: hand-computed node times on an A100, and the whole-model sums."""

import pytest

from graphmem.core.ir import DType, Graph, Node, Role, Value
from graphmem.core.symbolic import SymInt
from graphmem.devices.gpus import find_gpu
from graphmem.passes.costs import compute_costs
from graphmem.passes.dims import DimBinding
from graphmem.passes.roofline import estimate_roofline, node_rate_dtype


def value(name: str, shape: tuple[int | SymInt, ...], dtype: DType, role: Role) -> Value:
    dims = tuple(d if isinstance(d, SymInt) else SymInt.const(d) for d in shape)
    return Value(name, dtype, dims, role)


def single_node_graph(op: str, inputs: list[Value], output: Value) -> Graph:
    node = Node(op.lower(), op, list(inputs), [output])
    output.producer = node
    for v in inputs:
        v.consumers.append(node)
    values = {v.name: v for v in (*inputs, output)}
    output.role = Role.OUTPUT
    graph_inputs = [v for v in inputs if v.role is Role.INPUT]
    return Graph(op, [node], values, graph_inputs, [output])


def test_a_large_fp16_matmul_is_compute_bound_at_the_tensor_core_rate() -> None:
    n = 4096
    a = value("a", (n, n), DType.FLOAT16, Role.INPUT)
    b = value("b", (n, n), DType.FLOAT16, Role.PARAMETER)
    graph = single_node_graph("MatMul", [a, b], value("c", (n, n), DType.FLOAT16,
                                                       Role.ACTIVATION))
    a100 = find_gpu("a100-40gb")
    assert a100.fp16_flops_per_s == 312e12 and a100.memory_bandwidth_bytes_per_s == 1555e9
    result = estimate_roofline(graph, compute_costs(graph), a100, {})
    (node,) = result.nodes
    # 2 * 4096^3 = 137,438,953,472 FLOPs at 312 TFLOP/s = 440.5 us; the bytes,
    # 3 * 4096^2 * 2 = 100,663,296 at 1555 GB/s, take 64.7 us: compute-bound
    assert node.flops == 2 * n**3
    assert node.bytes_moved == 3 * n * n * 2
    assert node.est_time_s == pytest.approx(2 * n**3 / 312e12)
    assert node.bound == "compute"
    assert node.intensity_flops_per_byte == pytest.approx(2 * n**3 / (6 * n * n))  # 1365.3
    assert result.est_latency_s == node.est_time_s
    assert result.compute_bound_time_s == node.est_time_s and result.memory_bound_time_s == 0


def test_relu_is_memory_bound_at_the_bandwidth() -> None:
    count = 1 << 20
    x = value("x", (count,), DType.FLOAT32, Role.INPUT)
    graph = single_node_graph("Relu", [x], value("y", (count,), DType.FLOAT32, Role.ACTIVATION))
    result = estimate_roofline(graph, compute_costs(graph), find_gpu("a100-40gb"), {})
    (node,) = result.nodes
    # reads 4 MiB and writes 4 MiB: 8,388,608 B / 1555 GB/s = 5.39 us; its 1,048,576 FLOPs at
    # 19.5 TFLOP/s (fp32) take 54 ns
    assert node.bytes_moved == 8 * count and node.flops == count
    assert node.est_time_s == pytest.approx(8 * count / 1555e9)
    assert node.bound == "memory"
    assert node.intensity_flops_per_byte == pytest.approx(1 / 8)


def test_latency_sums_nodes_and_throughput_divides_the_batch() -> None:
    batch = SymInt.symbol("batch")
    x = value("x", (batch, 1024), DType.FLOAT32, Role.INPUT)
    graph = single_node_graph("Relu", [x], value("y", (batch, 1024), DType.FLOAT32,
                                                  Role.ACTIVATION))
    binding = DimBinding(bound={}, free=("batch",), batch_dim="batch")
    costs = compute_costs(graph, binding)  # symbolic in batch; the roofline binds it
    t4 = find_gpu("t4")
    result = estimate_roofline(graph, costs, t4, {"batch": 32}, batch_dim="batch")
    # 32 * 1024 floats read and written: 262,144 B at 320 GB/s = 819.2 ns
    bandwidth = t4.memory_bandwidth_bytes_per_s
    assert result.est_latency_s == pytest.approx(2 * 32 * 1024 * 4 / bandwidth)
    assert result.batch == 32
    assert result.est_throughput_per_s == pytest.approx(32 / result.est_latency_s)
    assert result.top[0].name == "relu"


def test_node_dtype_is_its_first_floating_output() -> None:
    ids = value("ids", (4,), DType.INT64, Role.INPUT)
    table = value("table", (10, 8), DType.BFLOAT16, Role.PARAMETER)
    out = value("emb", (4, 8), DType.BFLOAT16, Role.ACTIVATION)
    node = Node("gather", "Gather", [table, ids], [out])
    assert node_rate_dtype(node) == "bfloat16"
    shape = Node("shape", "Shape", [ids], [value("s", (1,), DType.INT64, Role.ACTIVATION)])
    assert node_rate_dtype(shape) == "float32"  # no floating tensor: the fp32 rate
