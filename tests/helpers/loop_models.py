"""Hand-built ONNX Loops (and a Scan) for graphmem/runtime_models/ort_loop.py, measured
against onnxruntime in tests/test_ort_loop.py and benchmarks/ort_loops.py.

`loop(...)`: x = Relu(xin) [ROWS, COLS] fp32, then a Loop of M iterations whose body reads x
from the outer scope: t = s + x (or x + x without loop state), `chain` Sigmoids or Relus
after it (each in place where onnxruntime may), then per loop-carried value s_out = Neg(u),
per scan output k: Mul(u, x) sliced to `scan_cols[k]` columns (a scan output of its own
size), and the condition as `cond` says: passed on (Identity of the body's cond), a body
constant (true), or computed (i < 100: never stops before M). `nested_if`: the body's u
goes through an If (a Relu or a Neg branch, chosen by the iteration number's parity) first.
The graph's output is a ReduceSum over the last scan output (or the state).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
ROWS, COLS = 4, 16


@dataclass(frozen=True)
class LoopCase:
    trips: int = 3
    state: bool = True
    scan_cols: tuple[int, ...] = (COLS,)
    chain: int = 0
    cond: str = "identity"  # identity | constant | computed
    nested_if: bool = False
    reuse: bool = False  # a chain of non-in-place ops whose buffers the plan reuses
    data_trips: bool = False  # M the graph input `m` (int64 scalar): the trip count is data


def _body(case: LoopCase) -> onnx.GraphProto:
    inputs = [helper.make_tensor_value_info("i", I64, []),
              helper.make_tensor_value_info("c", BOOL, [])]
    outputs: list[onnx.ValueInfoProto] = []
    nodes: list[onnx.NodeProto] = []
    constants: list[onnx.TensorProto] = []
    if case.state:
        inputs.append(helper.make_tensor_value_info("s", F32, [ROWS, COLS]))
        nodes.append(helper.make_node("Add", ["s", "x"], ["t"]))
    else:
        nodes.append(helper.make_node("Add", ["x", "x"], ["t"]))
    last = "t"
    for k in range(case.chain):
        op = "Neg" if case.reuse else ("Sigmoid" if k % 2 else "Relu")
        nodes.append(helper.make_node(op, [last], [f"e{k}"]))
        last = f"e{k}"
    if case.nested_if:
        nodes += _parity_if(last, constants)
        last = "branched"
    cond_name = _cond(case, nodes, constants)
    outputs.append(helper.make_tensor_value_info(cond_name, BOOL, []))
    if case.state:
        nodes.append(helper.make_node("Neg", [last], ["s_out"]))
        outputs.append(helper.make_tensor_value_info("s_out", F32, [ROWS, COLS]))
    for k, cols in enumerate(case.scan_cols):
        nodes.append(helper.make_node("Mul", [last, "x"], [f"m{k}"]))
        constants += [numpy_helper.from_array(np.array([0], np.int64), f"z{k}"),
                      numpy_helper.from_array(np.array([cols], np.int64), f"w{k}"),
                      numpy_helper.from_array(np.array([1], np.int64), f"a{k}")]
        nodes.append(helper.make_node("Slice", [f"m{k}", f"z{k}", f"w{k}", f"a{k}"],
                                      [f"sc{k}"]))
        outputs.append(helper.make_tensor_value_info(f"sc{k}", F32, [ROWS, cols]))
    return helper.make_graph(nodes, "body", inputs, outputs, constants)


def _cond(case: LoopCase, nodes: list[onnx.NodeProto],
          constants: list[onnx.TensorProto]) -> str:
    if case.cond == "identity":
        nodes.append(helper.make_node("Identity", ["c"], ["c_out"]))
        return "c_out"
    if case.cond == "constant":
        constants.append(numpy_helper.from_array(np.array(True), "always"))
        return "always"
    constants.append(numpy_helper.from_array(np.array(100, np.int64), "limit"))
    nodes.append(helper.make_node("Less", ["i", "limit"], ["c_out"]))
    return "c_out"


def _parity_if(value: str, constants: list[onnx.TensorProto]) -> list[onnx.NodeProto]:
    """branched = Relu(value) on even iterations, Neg(value) on odd ones."""
    constants.append(numpy_helper.from_array(np.array(2, np.int64), "two"))
    constants.append(numpy_helper.from_array(np.array(0, np.int64), "zero"))
    then = helper.make_graph([helper.make_node("Relu", [value], ["r"]),
                              helper.make_node("Sigmoid", ["r"], ["then_out"])], "then", [],
                             [helper.make_tensor_value_info("then_out", F32, [ROWS, COLS])])
    other = helper.make_graph([helper.make_node("Neg", [value], ["n"]),
                               helper.make_node("Abs", ["n"], ["else_out"])], "else", [],
                              [helper.make_tensor_value_info("else_out", F32, [ROWS, COLS])])
    return [helper.make_node("Mod", ["i", "two"], ["parity"]),
            helper.make_node("Equal", ["parity", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["branched"], then_branch=then, else_branch=other)]


def loop(case: LoopCase) -> onnx.ModelProto:
    outs = (["s_fin"] if case.state else []) + [f"scan{k}" for k in range(len(case.scan_cols))]
    inputs = ["m" if case.data_trips else "M", "go"] + (["s0"] if case.state else [])
    nodes = [helper.make_node("Relu", ["xin"], ["x"])]
    if case.state:
        nodes.append(helper.make_node("Neg", ["xin"], ["s0"]))
    nodes += [helper.make_node("Loop", inputs, outs, body=_body(case)),
              helper.make_node("ReduceSum", [outs[-1]], ["y"], keepdims=0)]
    constants = [numpy_helper.from_array(np.array(True), "go")]
    if case.data_trips:
        return _model(nodes, constants, [helper.make_tensor_value_info("m", I64, [])])
    constants.append(numpy_helper.from_array(np.array(case.trips, np.int64), "M"))
    return _model(nodes, constants)


def scan(rows: int = 6) -> onnx.ModelProto:
    """A Scan over xin's `rows` rows [rows, COLS] with a running sum (state [COLS]) and two
    scan outputs per row: Relu(row + state) [COLS] and its Sigmoid."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "row"], ["acc_out"]),
         helper.make_node("Relu", ["acc_out"], ["r"]),
         helper.make_node("Neg", ["r"], ["y1"]),
         helper.make_node("Sigmoid", ["y1"], ["y2"])], "scan_body",
        [helper.make_tensor_value_info("acc", F32, [COLS]),
         helper.make_tensor_value_info("row", F32, [COLS])],
        [helper.make_tensor_value_info("acc_out", F32, [COLS]),
         helper.make_tensor_value_info("y1", F32, [COLS]),
         helper.make_tensor_value_info("y2", F32, [COLS])])
    nodes = [helper.make_node("Relu", ["xin"], ["x"]),
             helper.make_node("ReduceSum", ["x", "axis0"], ["acc0"], keepdims=0),
             helper.make_node("Scan", ["acc0", "x"], ["acc_fin", "ys1", "ys2"], body=body,
                              num_scan_inputs=1),
             helper.make_node("Add", ["ys1", "ys2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("xin", F32,
                                                                         [rows, COLS])],
                              [helper.make_tensor_value_info("y", F32, None)],
                              [numpy_helper.from_array(np.array([0], np.int64), "axis0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _model(nodes: list[onnx.NodeProto], constants: list[onnx.TensorProto],
           more_inputs: list[onnx.ValueInfoProto] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("xin", F32,
                                                                         [ROWS, COLS]),
                                           *(more_inputs or [])],
                              [helper.make_tensor_value_info("y", F32, None)], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


# the cases the model was written against (its rules read in onnxruntime's source, checked
# on these) and those held out: run only once the model was written, reported as measured
FIT = {
    "m3": LoopCase(),
    "m1": LoopCase(trips=1),
    "m5": LoopCase(trips=5),
    "no_state": LoopCase(state=False),
    "two_scans": LoopCase(scan_cols=(COLS, COLS)),
    "in_place_chain": LoopCase(chain=3),
    "cond_constant": LoopCase(cond="constant"),
    "cond_computed": LoopCase(cond="computed"),
}
HELD_OUT = {
    "m7_scan_sizes": LoopCase(trips=7, scan_cols=(16, 3, 64 // 4)),
    "reused_chain": LoopCase(chain=4, reuse=True),
    "state_only": LoopCase(scan_cols=()),
    "nested_if": LoopCase(nested_if=True),
    "computed_no_state": LoopCase(state=False, cond="computed", scan_cols=(5, 9), trips=4),
}
SCAN_HELD_OUT = (1, 2, 12)  # Scan lengths: no loop-state buffer, one (a), both (a and b)


def if_model(chain: int = 0, take_then: bool = True) -> onnx.ModelProto:
    """x = Relu(xin) [4, 16]; If (sum(x) > -1, always true; with `take_then` False: < -1,
    never) then: a = ReduceSum(x, 0) [16], Neg(a) and Abs(a) live together, their Add, x times
    it, `chain` Negs, a Relu; else: Neg(x). Then a Sigmoid of the If's output."""
    nodes = [helper.make_node("ReduceSum", ["x", "ax0"], ["a"], keepdims=0),
             helper.make_node("Neg", ["a"], ["b"]), helper.make_node("Abs", ["a"], ["c"]),
             helper.make_node("Add", ["b", "c"], ["d"]),
             helper.make_node("Mul", ["x", "d"], ["e0"])]
    for k in range(chain):
        nodes.append(helper.make_node("Neg", [f"e{k}"], [f"e{k + 1}"]))
    nodes.append(helper.make_node("Relu", [f"e{chain}"], ["then_out"]))
    then = helper.make_graph(nodes, "then", [], [helper.make_tensor_value_info(
        "then_out", F32, [ROWS, COLS])], [numpy_helper.from_array(np.array([0], np.int64), "ax0")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["else_out"])], "else", [],
                              [helper.make_tensor_value_info("else_out", F32, [ROWS, COLS])])
    graph_nodes = [helper.make_node("Relu", ["xin"], ["x"]),
                   helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                   helper.make_node("Greater" if take_then else "Less", ["s", "bar"], ["go"]),
                   helper.make_node("If", ["go"], ["y0"], then_branch=then, else_branch=other),
                   helper.make_node("Sigmoid", ["y0"], ["y"])]
    return _model(graph_nodes, [numpy_helper.from_array(np.array(-1.0, np.float32), "bar")])


# If: fit on the first (written against it), the other two held out (the else branch run:
# the plan takes the branch that holds more, an upper bound)
IF_CASES = {"if_small_tensors": (0, True, "fit"), "if_neg_chain": (3, True, "held out"),
            "if_else_runs": (0, False, "held out")}


def onnx_test_loop11() -> onnx.ModelProto:
    """onnx's own node test case `test_loop11` (onnx/backend/test/case/node/loop.py): M the
    graph input `trip_count` (int64 scalar), cond the input `cond`, y [1] fp32 carried; the
    body adds x[i] (a constant [5] sliced by the iteration number) to y and scans y out. Its
    module registers its cases when imported: the one case taken, not all 1,884 collected."""
    import onnx.backend.test.case.node as node_cases
    import onnx.backend.test.case.node.loop  # noqa: F401  (registers test_loop11)

    return next(case.model for case in node_cases._NodeTestCases if case.name == "test_loop11")


def nested_data_loop(trips: int = 3) -> onnx.ModelProto:
    """A Loop of `trips` iterations over x [4] whose body runs an inner Loop of M = the outer
    iteration number `i` (data: a body input) making z = x + x [4] each time, then
    sums the inner scan output into the outer one."""
    inner = helper.make_graph(
        [helper.make_node("Identity", ["c2"], ["c2o"]),
         helper.make_node("Add", ["x", "x"], ["z"])],
        "inner", [helper.make_tensor_value_info("j", I64, []),
                  helper.make_tensor_value_info("c2", BOOL, [])],
        [helper.make_tensor_value_info("c2o", BOOL, []),
         helper.make_tensor_value_info("z", F32, [4])])
    outer = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["co"]),
         helper.make_node("Loop", ["i", "t"], ["zs"], body=inner),
         helper.make_node("ReduceSum", ["zs"], ["r"], keepdims=0),
         helper.make_node("Unsqueeze", ["r", "ax"], ["ro"])], "outer",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("c", BOOL, [])],
        [helper.make_tensor_value_info("co", BOOL, []),
         helper.make_tensor_value_info("ro", F32, [1])],
        [numpy_helper.from_array(np.array(True), "t"),
         numpy_helper.from_array(np.array([0], np.int64), "ax")])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "go"], ["out"], body=outer)], "g",
        [helper.make_tensor_value_info("x", F32, [4])],
        [helper.make_tensor_value_info("out", F32, None)],
        [numpy_helper.from_array(np.array(trips, np.int64), "M"),
         numpy_helper.from_array(np.array(True), "go")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def shape_trips_loop(count: str) -> onnx.ModelProto:
    """A Loop whose M is x's element count, x [batch, 4] fp32: `count` "Size" (Size(x)) or
    "ReduceProd" (ReduceProd(Shape(x)), opset 18: no axes, every dim), 4*batch either way;
    each iteration makes z = y + y [4] (y an input), scanned out as zs [M, 4]."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["co"]), helper.make_node("Add", ["y", "y"], ["z"])],
        "body", [helper.make_tensor_value_info("i", I64, []),
                 helper.make_tensor_value_info("c", BOOL, [])],
        [helper.make_tensor_value_info("co", BOOL, []),
         helper.make_tensor_value_info("z", F32, [4])])
    nodes = ([helper.make_node("Size", ["x"], ["M"])] if count == "Size" else
             [helper.make_node("Shape", ["x"], ["dims"]),
              helper.make_node("ReduceProd", ["dims"], ["M"], keepdims=0)])
    nodes.append(helper.make_node("Loop", ["M", "go"], ["zs"], body=body))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F32, ["batch", 4]),
                     helper.make_tensor_value_info("y", F32, [4])],
        [helper.make_tensor_value_info("zs", F32, None)],
        [numpy_helper.from_array(np.array(True), "go")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model
