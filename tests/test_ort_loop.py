"""What onnxruntime's Loop and Scan hold while they run (graphmem/runtime_models/ort_loop.py),
and the shapes and bounds the model reads (a body's reductions, a Loop's scan outputs, its
constants), against onnxruntime 1.31.1's measured `mem_in_use_peak`.

The Loop cases of tests/helpers/loop_models.py marked FIT are those the model was checked on
while it was written (its rules read in onnxruntime's loop.cc, scan_9.cc, execution_frame.cc
and mem_pattern_planner.h); HELD_OUT were run only once it was: both are exact, at both
optimization levels (benchmarks/results/ort_loops.md).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem import analyze_onnx
from graphmem.core.symbolic import SymInt
from graphmem.frontends.onnx import infer
from graphmem.ops.control_flow import ControlFlowNode
from graphmem.passes.extent_bounds import extent_bounds, extent_dims
from graphmem.runtime_models import ort_loop
from graphmem.runtime_models.ort_kernels import arena_weights_bytes
from graphmem.runtime_models.ort_loop import _pattern_bytes, loop_scratch, scan_scratch
from tests.helpers import loop_models
from tests.helpers.data_slices import save as save_slices
from tests.helpers.ort import measure_all, measure_data_trips

# the loops the quick run measures; the slow test measures every other case
QUICK_FIT, QUICK_HELD_OUT = ("m3", "cond_computed"), ("nested_if", "m7_scan_sizes")


def _node(path: Path, op_type: str) -> ControlFlowNode:
    analysis = analyze_onnx(path, plan=False)
    node = next(n for n in analysis.graph.nodes if n.op_type == op_type)
    assert isinstance(node, ControlFlowNode)
    return node


def _saved(model: onnx.ModelProto, folder: Path, name: str = "m") -> Path:
    path = folder / f"{name}.onnx"
    onnx.save(model, path)
    return path


def test_the_memory_pattern_places_each_tensor_in_the_best_gap_else_after_the_last() -> None:
    # an EmbeddingBag body: two 8-byte indices at 0 and 256 (each aligned to 256), the bag's
    # 32-byte ids at 512 (peak 768); the indices freed, the bag's rows [4, 16] fp32 (256 B)
    # take the 512-byte gap at 0 (waste 256): the block stays 768 (measured: 768 B a later
    # iteration takes, tests below)
    steps = [((0, 1, 2), (0, 1)), ((3,), (2,))]
    assert _pattern_bytes(steps, [8, 8, 32, 256], set()) == 768
    # no gap fits 600 B: after the last live block (256..512 -> 512..1112, 600 -> 768 aligned)
    steps = [((0, 1), (0,)), ((2,), ())]
    assert _pattern_bytes(steps, [256, 256, 600], set()) == 512 + 768
    # the excluded (the body's outputs) take no place in the block
    assert _pattern_bytes([((0, 1), ())], [256, 256], {1}) == 256


def test_a_loops_allocations_follow_loop_cc(tmp_path: Path) -> None:
    # M = 3; the body reads s [4, 16] and x: t = s + x, m0 = t * x, sc0 = Slice(m0),
    # s_out = -t, cond passed on (Identity: no buffer). 256 B each.
    # iteration number 8 B, condition 1 B; iteration 1 one by one (t, m0, sc0, m0 freed,
    # s_out, t freed); iterations 2 and 3: the block of t and m0 (512 B: m0 cannot take t's
    # place, both live), sc0 and s_out; the block freed at the iteration's end and the
    # state the iteration read (s_out of the one before) after it, but not after the last
    node = _node(_saved(loop_models.loop(loop_models.FIT["m3"]), tmp_path), "Loop")
    scratch = loop_scratch(node, {})
    assert scratch is not None and scratch.replaces_body
    assert scratch.sizes_bytes == (8, 1, 256, 256, 256, 256, 512, 256, 256, 512, 256, 256)
    assert scratch.frees_after == ((), (), (), (), (3,), (2,), (), (), (6, 5), (), (), (9,))
    # at the last allocation: 8 + 1, three sc0 (768), two generations of s_out (512) and
    # the block (512) = 1,801 B
    assert scratch.held_bytes == 8 + 1 + 3 * 256 + 2 * 256 + 512 == 1_801


def test_a_loop_of_more_events_than_the_bound_keeps_its_bodys_block(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # m3 is counted at 3 iterations x 8 events (2 x (3 outputs + 0 single) + 2) = 24: modelled
    # at a bound of 24, the body's block kept (None: kernel_scratch's) at 23
    node = _node(_saved(loop_models.loop(loop_models.FIT["m3"]), tmp_path), "Loop")
    monkeypatch.setattr(ort_loop, "MAX_LOOP_EVENTS", 24)
    assert loop_scratch(node, {}) is not None
    monkeypatch.setattr(ort_loop, "MAX_LOOP_EVENTS", 23)
    assert loop_scratch(node, {}) is None


def test_a_trip_count_the_data_sets_is_a_dim_of_its_own(tmp_path: Path) -> None:
    # M the graph input `m`: the trip count is the dim m_trips, free until --dim binds it. m3's
    # body over [4, 16]: Add, Mul and Neg of 64 FLOPs each (Slice, Identity: 0), 192 FLOPs
    # an iteration
    path = _saved(loop_models.loop(replace(loop_models.FIT["m3"], data_trips=True)), tmp_path)
    analysis = analyze_onnx(path, plan=False)
    loop = next(n for n in analysis.graph.nodes if isinstance(n, ControlFlowNode))
    trips = SymInt.symbol("m_trips")
    assert loop.trip_count == trips and "m_trips" in analysis.graph.free_dims()
    cost = next(n for n in analysis.costs.nodes if n.op_type == "Loop")
    assert cost.flops == 192 * trips and "M 'm' is data: the dim m_trips" in cost.note
    bound = analyze_onnx(path, plan=False, dims={"m_trips": 3})
    assert next(n for n in bound.costs.nodes if n.op_type == "Loop").flops == 576  # 3 * 192
    # the runtime model's Loop at the bound dim: m3's allocations (test above) at M = 3
    scratch = loop_scratch(loop, {"m_trips": 3})
    assert scratch is not None and scratch.held_bytes == 1_801
    assert loop_scratch(loop, {}) is None  # unbound: the body's block (ort-cpu refuses it)


@pytest.mark.parametrize("engine", ["onnxruntime", "onnx"])
def test_a_loop_of_data_trips_scans_out_its_trip_dim(tmp_path: Path, engine: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # m3 with M the input `m`, cond passed on (it cannot stop the loop): scan0 stacks one
    # [4, 16] slice an iteration, [m_trips, 4, 16], so --dim m_trips=3 binds every dim and
    # the peak is m3's own (M = 3 a constant: the same tensors, M 8 B a constant there and
    # an input here); before, scan0's first dim was the engine's `Loop_2_o0__d0`, left free
    if engine == "onnx":  # onnxruntime's rules failing: onnx's inference (loop_scans.py)
        monkeypatch.setattr(infer, "_ort_symbolic_inference", _fail)
    path = _saved(loop_models.loop(replace(loop_models.FIT["m3"], data_trips=True)), tmp_path)
    analysis = analyze_onnx(path, plan=False)
    scan0 = analysis.graph.values["scan0"]
    assert scan0.shape == (SymInt.symbol("m_trips"), 4, 16)
    assert analysis.graph.free_dims() == {"m_trips"}
    bound = analyze_onnx(path, plan=False, dims={"m_trips": 3})
    constant = analyze_onnx(_saved(loop_models.loop(loop_models.FIT["m3"]), tmp_path, "c"),
                            plan=False)
    assert isinstance(bound.peak_bytes, int) and bound.peak_bytes == constant.peak_bytes


def test_a_loop_cond_may_stop_keeps_its_scan_dim_at_most_m_trips(tmp_path: Path) -> None:
    # cond = i < 100 (computed) and M the input `m`: the loop may stop before M, so scan0's
    # first dim stays the engine's new symbol, bounded by M (m_trips, the maximum)
    case = replace(loop_models.FIT["cond_computed"], data_trips=True)
    graph = analyze_onnx(_saved(loop_models.loop(case), tmp_path), plan=False).graph
    first = graph.values["scan0"].shape[0]
    assert first is not None and first != SymInt.symbol("m_trips")
    found = [e for e in extent_dims(graph) if e.op_type == "Loop"]
    assert [e.tensor for e in found] == ["scan0"]
    assert list(extent_bounds(tuple(found), {"m_trips": 5})[0].values()) == [5]


@pytest.mark.parametrize("count", ["Size", "ReduceProd"])
def test_a_trip_count_worked_out_from_shapes_follows_the_batch(tmp_path: Path,
                                                               count: str) -> None:
    # M = Size(x) or ReduceProd(Shape(x)), x [batch, 4]: 4*batch iterations, each an Add of
    # 4 FLOPs (z = y + y, y [4]): 16*batch FLOPs and zs [4*batch, 4]; no data dim (before:
    # a free M_trips that --batch did not bind); onnxruntime's run at batch 3: zs [12, 4]
    path = _saved(loop_models.shape_trips_loop(count), tmp_path)
    analysis = analyze_onnx(path, plan=False)
    batch = SymInt.symbol("batch")
    loop = next(n for n in analysis.graph.nodes if isinstance(n, ControlFlowNode))
    assert loop.trip_count == 4 * batch and analysis.graph.free_dims() == {"batch"}
    assert next(c for c in analysis.costs.nodes if c.op_type == "Loop").flops == 16 * batch
    assert analysis.graph.values["zs"].shape == (4 * batch, 4)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {"x": np.zeros((3, 4), np.float32), "y": np.ones(4, np.float32)}
    assert session.run(["zs"], feeds)[0].shape == (12, 4)


def _fail(*_: object) -> None:
    raise RuntimeError("rules failed")


def test_a_loop_in_a_body_reading_data_as_m_has_its_dim_too(tmp_path: Path) -> None:
    # the inner Loop's M is the outer iteration number: the dim i_trips, which --dim binds,
    # and the inner scan output zs [i_trips, 4]. The outer Loop's 3 iterations each run
    # i_trips Adds of 4 FLOPs and a ReduceSum over zs (4 * i_trips FLOPs): at i_trips = 2,
    # 3 * (2 * 4 + 2 * 4) = 48. onnxruntime runs i = 0, 1, 2 inner iterations, (0 + 1 + 2)
    # * (4 + 4) = 24 FLOPs: one dim for every outer iteration, bound at the largest count
    # (2), is an upper bound (docs/control-flow.md)
    path = _saved(loop_models.nested_data_loop(3), tmp_path)
    assert "i_trips" in analyze_onnx(path, plan=False).graph.free_dims()
    bound = analyze_onnx(path, plan=False, dims={"i_trips": 2})
    (cost,) = bound.costs.nodes
    assert cost.flops == 3 * (2 * 4 + 2 * 4) == 48
    inner = next(n for n in bound.graph.nodes[0].bodies[0][1].nodes if n.op_type == "Loop")
    assert inner.outputs[0].shape == (SymInt.symbol("i_trips"), 4)


@pytest.mark.ort
@pytest.mark.parametrize("level", [pytest.param("disabled", marks=pytest.mark.slow), "all"])
def test_onnxs_test_loop11_is_exact_with_its_trip_count_bound(tmp_path: Path,
                                                               level: str) -> None:
    # M 5 (seed 0; cond true), y's dim (onnx infers none) 1: 3,100 B measured; the body's
    # peak as one block at 1 iteration was 796 B (-74.3%)
    path = _saved(loop_models.onnx_test_loop11(), tmp_path)
    predicted, measured, trips = measure_data_trips(path, level, "trip_count", seed=0,
                                                    dims={"Loop_0_o1__d0": 1}, high=6)
    assert (trips, predicted) == (5, measured), (trips, predicted, measured)


@pytest.mark.slow
@pytest.mark.ort
@pytest.mark.parametrize("name", ["m3", "nested_if"])  # fit; held out
def test_a_loop_of_data_trips_is_exact_at_its_drawn_count(tmp_path: Path, name: str) -> None:
    case = replace({**loop_models.FIT, **loop_models.HELD_OUT}[name], data_trips=True)
    predicted, measured, _ = measure_data_trips(_saved(loop_models.loop(case), tmp_path),
                                                "all", "m", seed=2)
    assert predicted == measured


def test_a_scans_outputs_come_first_and_its_state_takes_two_buffers(tmp_path: Path) -> None:
    # 6 rows: the state [16] fp32 (64 B) gets LoopStateVariable's a and b (6 > 2); each
    # iteration's intermediate r (64 B) one by one in the first, then a 256-byte block
    node = _node(_saved(loop_models.scan(6), tmp_path), "Scan")
    scratch = scan_scratch(node, {})
    assert scratch is not None and not scratch.before_outputs and scratch.outputs_at is None
    assert scratch.sizes_bytes == (64, 64, 64) + (256,) * 5
    one_row = scan_scratch(_node(_saved(loop_models.scan(1), tmp_path, "one"), "Scan"), {})
    assert one_row is not None and one_row.sizes_bytes == (64,)  # no a, no b, r alone


def _measured_exactly(path: Path) -> None:
    for level in ("disabled", "all"):
        predicted, measured = measure_all(path, None, level)
        assert predicted == measured, (level, predicted, measured)


@pytest.mark.ort
@pytest.mark.parametrize("name", QUICK_FIT)
def test_fit_loops_are_exact_against_onnxruntime(tmp_path: Path, name: str) -> None:
    _measured_exactly(_saved(loop_models.loop(loop_models.FIT[name]), tmp_path))


@pytest.mark.ort
@pytest.mark.parametrize("name", QUICK_HELD_OUT)
def test_held_out_loops_are_exact_against_onnxruntime(tmp_path: Path, name: str) -> None:
    _measured_exactly(_saved(loop_models.loop(loop_models.HELD_OUT[name]), tmp_path))


@pytest.mark.slow
@pytest.mark.ort
@pytest.mark.parametrize("name", sorted({*loop_models.FIT, *loop_models.HELD_OUT}
                                         - {*QUICK_FIT, *QUICK_HELD_OUT}))
def test_every_other_loop_case_is_exact_against_onnxruntime(tmp_path: Path, name: str) -> None:
    # the rest of the cases (the quick tests above run four); before (6eec831): -24.9% (m1)
    # to -42.0% (two_scans), the body's peak as one block
    case = {**loop_models.FIT, **loop_models.HELD_OUT}[name]
    _measured_exactly(_saved(loop_models.loop(case), tmp_path))


@pytest.mark.ort
@pytest.mark.parametrize("rows", [6, *loop_models.SCAN_HELD_OUT])
def test_scans_are_exact_against_onnxruntime(tmp_path: Path, rows: int) -> None:
    # before: 2,312 B against 2,824 at 6 rows (-18.1%): the state's two buffers missing
    _measured_exactly(_saved(loop_models.scan(rows), tmp_path))


@pytest.mark.ort
@pytest.mark.parametrize("name", sorted(loop_models.IF_CASES))
def test_an_ifs_branch_is_planned_one_tensor_at_a_time(tmp_path: Path, name: str) -> None:
    # the then branch's [16] fp32 a, Neg(a), Abs(a) live at once: 3 allocations of 64 B,
    # 768 B in the arena, where the branch's peak as one block was 192 B (256): 1,292 B
    # against 1,548. The data picks the branch: where the smaller (else) runs the plan,
    # which takes the branch that holds more, is above the run (an upper bound)
    chain, take_then, _ = loop_models.IF_CASES[name]
    path = _saved(loop_models.if_model(chain, take_then), tmp_path)
    for level in ("disabled", "all"):
        predicted, measured = measure_all(path, None, level)
        assert predicted == measured if take_then else predicted > measured, (
            level, predicted, measured)


def test_a_reduction_in_a_loop_body_keeps_its_shape(tmp_path: Path) -> None:
    # ReduceMax of opset 18 (axes an input, a Constant in the body) over x [4, 16] along 0:
    # [16] per iteration, [3, 16] over M = 3. onnxruntime's engine infers a body with an
    # engine of its own, which had none of graphmem's rules: [] then, and the Loop's
    # output [3] (an EmbeddingBag in max mode, docs/zoo.md)
    axes = helper.make_node("Constant", [], ["axes"],
                            value=numpy_helper.from_array(np.array([0], np.int64)))
    body = helper.make_graph(
        [axes, helper.make_node("ReduceMax", ["x", "axes"], ["r"], keepdims=0),
         helper.make_node("Identity", ["c"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "go"], ["maxes"], body=body)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("maxes", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(3, np.int64), "M"),
         numpy_helper.from_array(np.array(True), "go")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    node = _node(_saved(model, tmp_path), "Loop")
    assert node.outputs[0].shape == (3, 16)
    reduced = next(n for n in node.bodies[0][1].nodes if n.op_type == "ReduceMax")
    assert reduced.outputs[0].shape == (16,)


def test_a_loop_its_condition_may_stop_bounds_its_scan_outputs_by_m(tmp_path: Path) -> None:
    # cond = i < 100 (computed): the scan output's first dim is a new symbol, at most M = 3
    path = _saved(loop_models.loop(loop_models.FIT["cond_computed"]), tmp_path)
    graph = analyze_onnx(path, plan=False).graph
    found = [e for e in extent_dims(graph) if e.op_type == "Loop"]
    assert [e.tensor for e in found] == ["scan0"]
    assert list(extent_bounds(tuple(found), {})[0].values()) == [3]


def test_a_bodys_constants_are_in_the_arena_before_the_run(tmp_path: Path) -> None:
    # the Loop body slicing x by data holds four int64 [1] constants (its slice's start and
    # end offsets, axes, the rows to sum): 4 * 8 = 32 B besides the graph's own f0 (4 B),
    # one (8 B) and m (8 B) and go (1 B): 53 B
    analysis = analyze_onnx(save_slices("loop", tmp_path), plan=False)
    graph = analysis.graph
    assert arena_weights_bytes(graph, graph.nodes) == 4 + 8 + 8 + 1 + 4 * 8 == 53


def test_a_carried_value_that_grows_is_not_bounded_by_m(tmp_path: Path) -> None:
    # s = Concat(s, x) each iteration: s_fin has 1 + 2 * 3 rows, not at most M = 3; only
    # the scan output (one [16] row an iteration: its first dim at most M = 3) is bounded
    body = helper.make_graph(
        [helper.make_node("Concat", ["s", "x"], ["s_out"], axis=0),
         helper.make_node("Less", ["i", "limit"], ["c_out"]),
         helper.make_node("ReduceSum", ["x", "axes"], ["row"], keepdims=0)], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, ["rows", 16])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", TensorProto.FLOAT, ["rows_out", 16]),
         helper.make_tensor_value_info("row", TensorProto.FLOAT, [16])],
        [numpy_helper.from_array(np.array(100, np.int64), "limit"),
         numpy_helper.from_array(np.array([0], np.int64), "axes")])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "go", "s0"], ["s_fin", "rows_seen"], body=body)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16]),
         helper.make_tensor_value_info("s0", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("s_fin", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("rows_seen", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(3, np.int64), "M"),
         numpy_helper.from_array(np.array(True), "go")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    graph_ir = analyze_onnx(_saved(model, tmp_path), plan=False).graph
    bounded = [e.tensor for e in extent_dims(graph_ir) if e.op_type == "Loop"]
    # s_fin is [2 + Loop_0_o1__d0, 16]: a formula, never a lone new dim the data sets; the
    # rule reads a Loop's scan outputs alone (passes/extent_bounds.py `_scan_outputs`)
    assert bounded == ["rows_seen"]
