"""ONNX If/Loop/Scan: bodies imported as graphs, costed (If: the larger branch, Loop/Scan: body x
trip count), the bodies' own peak a transient of the node; shapes compared with onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.core.symbolic import SymInt
from graphmem.frontends.onnx.control_flow import control_flow_warnings
from graphmem.frontends.onnx.importer import import_onnx
from graphmem.ops.control_flow import BODY_SCRATCH_SUFFIX, ControlFlowNode
from graphmem.passes.costs import CostStatus, NodeCost, compute_costs
from graphmem.passes.dims import DimBinding
from graphmem.passes.liveness import analyze_liveness

FLOAT = TensorProto.FLOAT
info = helper.make_tensor_value_info


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto],
           initializers: list[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializers)
    # IR 8: the onnxruntime installed here reads up to IR 13
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _weight(name: str, rows: int, cols: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ones((rows, cols), np.float32) * 0.01, name)


def _scalar(name: str, value: object, dtype: type) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype), name)


def if_model() -> onnx.ModelProto:
    """then: x[4,6] @ w[6,8] -> Relu (a [4,8] intermediate); else: x + x, reshaped."""
    then_graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["mm"], name="then_mm"),
         helper.make_node("Relu", ["mm"], ["t"], name="then_relu")],
        "then", [], [info("t", FLOAT, [4, 8])])
    else_graph = helper.make_graph(
        [helper.make_node("Concat", ["x", "x2"], ["e"], name="else_cat", axis=1)],
        "else", [], [info("e", FLOAT, [4, 8])])
    return _model(
        [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["x2"], name="slice"),
         helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_graph,
                          else_branch=else_graph)],
        [info("x", FLOAT, [4, 6]), info("cond", TensorProto.BOOL, [])],
        [info("y", FLOAT, [4, 8])],
        [_weight("w", 6, 8), _scalar("starts", [0], np.int64), _scalar("ends", [2], np.int64),
         _scalar("axes", [1], np.int64)])


def _loop_body(hidden: int = 6) -> onnx.GraphProto:
    """h <- Relu(h @ w): one [4, hidden] intermediate (the MatMul's) per iteration."""
    return helper.make_graph(
        [helper.make_node("MatMul", ["h", "w"], ["mm"], name="body_mm"),
         helper.make_node("Relu", ["mm"], ["h_next"], name="body_relu"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond")],
        "body",
        [info("i", TensorProto.INT64, []), info("cond_in", TensorProto.BOOL, []),
         info("h", FLOAT, ["n", hidden])],
        [info("cond_out", TensorProto.BOOL, []), info("h_next", FLOAT, ["n", hidden])])


def loop_model(trip: str) -> onnx.ModelProto:
    """Loop over h[n, 6] with M = 5 (`const`), M = n (`dim`: Shape(x)[0]) or no M (`none`)."""
    nodes = []
    m_name = {"const": "M", "dim": "M_dim", "none": ""}[trip]
    if trip == "dim":
        nodes += [helper.make_node("Shape", ["x"], ["x_shape"], name="shape"),
                  helper.make_node("Gather", ["x_shape", "zero"], ["M_dim"], name="gather")]
    nodes.append(helper.make_node("Loop", [m_name, "cond", "x"], ["y"], name="loop",
                                  body=_loop_body()))
    return _model(nodes, [info("x", FLOAT, ["n", 6])], [info("y", FLOAT, ["n", 6])],
                  [_weight("w", 6, 6), _scalar("cond", True, np.bool_),
                   _scalar("M", 5, np.int64), _scalar("zero", 0, np.int64)])


def scan_model() -> onnx.ModelProto:
    """A running sum over the `seq` axis of x[seq, 8], with a per-step x_t @ w[8, 8] output."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_t", "w"], ["mm"], name="scan_mm"),
         helper.make_node("Add", ["acc", "mm"], ["acc_next"], name="scan_add"),
         helper.make_node("Relu", ["mm"], ["step_out"], name="scan_relu")],
        "scan_body", [info("acc", FLOAT, [8]), info("x_t", FLOAT, [8])],
        [info("acc_next", FLOAT, [8]), info("step_out", FLOAT, [8])])
    return _model(
        [helper.make_node("Scan", ["acc0", "x"], ["acc", "steps"], name="scan", body=body,
                          num_scan_inputs=1)],
        [info("acc0", FLOAT, [8]), info("x", FLOAT, ["seq", 8])],
        [info("acc", FLOAT, [8]), info("steps", FLOAT, ["seq", 8])],
        [_weight("w", 8, 8)])


def _imported(model: onnx.ModelProto, tmp_path: Path) -> tuple[onnx.ModelProto, Path]:
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return model, path


def _node_cost(path: Path, op_type: str, dims: dict[str, int] | None = None) -> NodeCost:
    graph = import_onnx(path).graph
    graph.check()
    binding = DimBinding(bound=dims or {}, free=(), batch_dim=None)
    return next(n for n in compute_costs(graph, binding).nodes if n.op_type == op_type)


def _run_ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.ort
def test_if_counts_the_larger_branch_and_lists_both(tmp_path: Path) -> None:
    _, path = _imported(if_model(), tmp_path)
    cost = _node_cost(path, "If")
    then_branch, else_branch = cost.branches
    # then: [4, 6] @ [6, 8] = 4*8*6 = 192 MACs, 384 FLOPs, + Relu over 32 elements = 416
    assert (then_branch.name, then_branch.macs, then_branch.flops) == ("then_branch", 192, 416)
    # its own peak: the [4, 8] float MatMul result = 128 bytes (the Relu's is the If's output)
    assert then_branch.peak_bytes == 128
    assert (else_branch.name, else_branch.macs, else_branch.peak_bytes) == ("else_branch", 0, 0)
    assert then_branch.counted and not else_branch.counted
    assert (cost.status, cost.macs, cost.flops) == (CostStatus.OK, 192, 416)
    assert "then_branch" in cost.note
    assert cost.output_shapes == ("[4, 8]",)  # the transient is not an output shape
    for flag in (True, False):  # onnxruntime runs both branches to the shape graphmem says
        (out,) = _run_ort(path, {"x": np.ones((4, 6), np.float32), "cond": np.array(flag)})
        assert out.shape == (4, 8)


def test_if_branch_peak_is_a_transient_of_the_node_in_liveness(tmp_path: Path) -> None:
    _, path = _imported(if_model(), tmp_path)
    graph = import_onnx(path).graph
    node = next(n for n in graph.nodes if n.op_type == "If")
    scratch = graph.values["branch" + BODY_SCRATCH_SUFFIX]
    assert scratch.producer is node and scratch.nbytes == 128 and not scratch.consumers
    sizes = {name: v.nbytes for name, v in graph.values.items()}
    liveness = analyze_liveness(graph, sizes)
    step = liveness.order.index("branch")
    # at the If: x (96) + w (192) + slice indices (3 x 8) + cond (1) + x2 [4, 2] (32, read by
    # the else branch) + y [4, 8] (128) + the then branch's intermediate (128)
    assert liveness.live_bytes_per_step[step] == 96 + 192 + 24 + 1 + 32 + 128 + 128


@pytest.mark.ort
def test_loop_with_constant_trip_count_is_body_times_m(tmp_path: Path) -> None:
    _, path = _imported(loop_model("const"), tmp_path)
    cost = _node_cost(path, "Loop", {"n": 4})
    # one iteration: [4, 6] @ [6, 6] = 4*6*6 = 144 MACs (288 FLOPs) + Relu 24 = 312 FLOPs;
    # M = 5: 5 * 144 = 720 MACs, 5 * 312 = 1560 FLOPs
    assert (cost.macs, cost.flops) == (720, 1560)
    assert cost.status is CostStatus.OK and "M = 5" in cost.note
    assert control_flow_warnings(import_onnx(path).graph) == []
    (body,) = cost.branches
    assert (body.name, body.flops, body.peak_bytes) == ("body", 312, 4 * 6 * 4)
    (out,) = _run_ort(path, {"x": np.ones((4, 6), np.float32)})
    assert out.shape == (4, 6)


def test_loop_trip_count_from_an_input_dim_is_a_formula(tmp_path: Path) -> None:
    _, path = _imported(loop_model("dim"), tmp_path)
    graph = import_onnx(path).graph
    loop = next(n for n in graph.nodes if isinstance(n, ControlFlowNode))
    assert loop.trip_count == SymInt.symbol("n")
    cost = _node_cost(path, "Loop")
    # n iterations of [n, 6] @ [6, 6] (36n MACs) + Relu (6n): 36n^2 MACs, 78n^2 FLOPs
    n = SymInt.symbol("n")
    assert cost.macs == n * n * 36 and cost.flops == n * n * 78
    assert _node_cost(path, "Loop", {"n": 3}).macs == 324  # 36 * 3 * 3


def test_loop_without_trip_count_counts_one_iteration_and_says_so(tmp_path: Path) -> None:
    _, path = _imported(loop_model("none"), tmp_path)
    graph = import_onnx(path).graph
    loop = next(n for n in graph.nodes if isinstance(n, ControlFlowNode))
    assert loop.trip_count is None
    assert control_flow_warnings(graph) == [
        "Loop loop: trip count unknown: 1 iteration counted (no M input: `cond` decides)"]
    cost = _node_cost(path, "Loop", {"n": 4})
    assert "trip count unknown: 1 iteration counted" in cost.note
    # onnxruntime's inference gives up on a Loop without M and onnx's leaves the body's
    # MatMul unshaped: the node stays flagged, counting what is known once (Relu: 4 * 6)
    assert cost.status is CostStatus.SUBGRAPH and "without a cost: MatMul" in cost.note
    assert cost.flops == 24


@pytest.mark.ort
def test_scan_is_body_times_the_scan_axis_length(tmp_path: Path) -> None:
    _, path = _imported(scan_model(), tmp_path)
    cost = _node_cost(path, "Scan")
    seq = SymInt.symbol("seq")
    # per step: [8] @ [8, 8] = 64 MACs (128 FLOPs) + Add 8 + Relu 8 = 144 FLOPs; seq steps
    assert cost.macs == seq * 64 and cost.flops == seq * 144
    graph = import_onnx(path).graph
    assert graph.values["steps"].shape_text() == "[seq, 8]"  # concatenated over the steps
    acc, steps = _run_ort(path, {"acc0": np.zeros(8, np.float32),
                                 "x": np.ones((7, 8), np.float32)})
    assert acc.shape == (8,) and steps.shape == (7, 8)
    assert _node_cost(path, "Scan", {"seq": 7}).flops == 7 * 144


def test_nested_if_inside_a_loop_is_costed_recursively(tmp_path: Path) -> None:
    inner = if_model().graph.node[1]  # If: then x @ w -> Relu, else Concat(x, x2)
    body = helper.make_graph(
        [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["x2"], name="slice"),
         inner, helper.make_node("Identity", ["cond_in"], ["cond_out"], name="c")],
        "body", [info("i", TensorProto.INT64, []), info("cond_in", TensorProto.BOOL, [])],
        [info("cond_out", TensorProto.BOOL, []), info("y", FLOAT, [4, 8])])
    model = _model(
        [helper.make_node("Loop", ["M", "cond"], ["ys"], name="loop", body=body)],
        [info("x", FLOAT, [4, 6]), info("cond", TensorProto.BOOL, [])],
        [info("ys", FLOAT, [3, 4, 8])],
        [_weight("w", 6, 8), _scalar("M", 3, np.int64), _scalar("starts", [0], np.int64),
         _scalar("ends", [2], np.int64), _scalar("axes", [1], np.int64)])
    _, path = _imported(model, tmp_path)
    cost = _node_cost(path, "Loop")
    # 3 iterations of the If's larger branch: 3 * 192 MACs, 3 * 416 FLOPs (Slice: 0)
    assert (cost.macs, cost.flops) == (3 * 192, 3 * 416)
    loop = next(n for n in import_onnx(path).graph.nodes if isinstance(n, ControlFlowNode))
    (_, body), = loop.bodies
    body.check()  # each body is a well-formed graph of its own, nested ones too
    inner = next(n for n in body.nodes if isinstance(n, ControlFlowNode))
    assert [name for name, _ in inner.bodies] == ["then_branch", "else_branch"]
    for _, branch in inner.bodies:
        branch.check()


@pytest.mark.torch
@pytest.mark.ort
@pytest.mark.slow
def test_torch_cond_exported_to_onnx_is_an_if_with_both_branches(tmp_path: Path) -> None:
    """torch.onnx.export (dynamo) writes torch.cond as an ONNX If: both Linear branches
    costed, shapes as onnxruntime runs them."""
    import torch

    class Gate(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up, self.small = torch.nn.Linear(16, 64), torch.nn.Linear(16, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, lambda x: torch.relu(self.up(x)) * 2,
                              lambda x: self.small(x), (x,))

    path = tmp_path / "cond.onnx"
    torch.onnx.export(Gate().eval(), (torch.randn(4, 16),), str(path), dynamo=True)
    cost = _node_cost(path, "If")
    then_branch, else_branch = cost.branches
    # both: Gemm [4, 16] x [16, 64] = 4 * 16 * 64 = 4,096 MACs; then adds Relu and Mul
    assert then_branch.macs == else_branch.macs == 4096
    assert then_branch.counted and int(then_branch.flops) > int(else_branch.flops)
    assert cost.macs == 4096 and cost.status is CostStatus.OK
    (out,) = _run_ort(path, {"x": np.ones((4, 16), np.float32)})
    assert out.shape == (4, 64)
    graph = import_onnx(path).graph
    assert graph.outputs[0].shape_text() == "[4, 64]"


@pytest.mark.torch
@pytest.mark.ort
@pytest.mark.slow
def test_scripted_loop_exported_to_onnx_has_a_symbolic_trip_count(tmp_path: Path) -> None:
    """A TorchScript `for i in range(x.size(0))` exports as Loop with M = Gather(Shape(x), 0):
    the body x trip count is a formula in the dim, equal to FlopCounterMode's count of the
    eager loop once bound."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    class Recurrent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.step = torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.zeros(x.shape[1], 8)
            for i in range(x.size(0)):
                h = torch.relu(self.step(x[i]) + h)
            return h

    model = Recurrent()
    path = tmp_path / "loop.onnx"
    torch.onnx.export(torch.jit.script(model), (torch.randn(5, 4, 8),), str(path),
                      dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "steps"}})
    cost = _node_cost(path, "Loop")
    # per step: x[i] [4, 8] @ [8, 8] = 4 * 8 * 8 = 256 MACs
    assert cost.macs == SymInt.symbol("steps") * 256 and "M = steps" in cost.note
    counter = FlopCounterMode(display=False)
    with counter:
        model(torch.randn(5, 4, 8))
    assert counter.get_total_flops() == 2 * int(_node_cost(path, "Loop", {"steps": 5}).macs)
    (out,) = _run_ort(path, {"x": np.ones((5, 4, 8), np.float32)})
    assert out.shape == (4, 8)
