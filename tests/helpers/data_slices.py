"""Small ONNX graphs whose Slice takes its starts/ends/steps from the data (onnx.helper), for
graphmem/passes/extent_bounds.py's tests and benchmarks/data_bounded_slices.py.

Every graph reads x [ROWS, COLS] fp32 and makes its slice's indices from the data: `zero` is
Cast(ReduceSum(x * 0)) (0 for any finite x), and an index is `zero + k`, so no shape
inference can follow it (onnxruntime's names a new dim, onnx's an unk__N) while every run
takes the same slice. `KINDS` names each graph: the slice at top level, in a Loop body, in an
If branch, a Scan body, with steps, negative indices, two axes, a part of the rows; a Compress
and a TopK of a computed K.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
ROWS, COLS = 96, 32  # 96 rows: above graphmem's probe value for a free dim (64)
BIG = 2**62  # an end past every extent (onnx clamps it)


def _ints(values: object, name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _data_zero() -> list[onnx.NodeProto]:
    """`zero` [1] int64, 0 computed from x (the data: no inference follows it)."""
    return [helper.make_node("Mul", ["x", "f0"], ["x0"]),
            helper.make_node("ReduceSum", ["x0"], ["s0"], keepdims=0),
            helper.make_node("Cast", ["s0"], ["z0"], to=I64),
            helper.make_node("Reshape", ["z0", "one"], ["zero"])]


def _index(name: str, k: int | list[int]) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """`name` = zero + k: an index the data computes (k a list: one per sliced axis)."""
    return ([helper.make_node("Add", ["zero", f"{name}_k"], [name])],
            [_ints(k if isinstance(k, list) else [k], f"{name}_k")])


def _slice(out: str, starts: int | list[int], ends: int | list[int], axes: list[int],
           steps: int | None = None) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Slice(x, starts, ends, axes[, steps]) -> out, then Relu -> `out`_r (a second tensor of
    the slice's size)."""
    nodes, constants = [], [_ints(axes, f"{out}_axes")]
    names = ["x", f"{out}_s", f"{out}_e", f"{out}_axes"]
    for name, k in ((f"{out}_s", starts), (f"{out}_e", ends)):
        more_nodes, more = _index(name, k)
        nodes += more_nodes
        constants += more
    if steps is not None:
        more_nodes, more = _index(f"{out}_t", steps)
        nodes += more_nodes
        constants += more
        names.append(f"{out}_t")
    nodes += [helper.make_node("Slice", names, [out]),
              helper.make_node("Relu", [out], [f"{out}_r"])]
    return nodes, constants


def _model(nodes: list[onnx.NodeProto], constants: list[onnx.TensorProto], out: str,
           out_shape: list[int]) -> onnx.ModelProto:
    constants = [numpy_helper.from_array(np.array(0.0, np.float32), "f0"),
                 _ints([1], "one"), *constants]
    graph = helper.make_graph(
        _data_zero() + nodes, "g", [helper.make_tensor_value_info("x", F32, [ROWS, COLS])],
        [helper.make_tensor_value_info(out, F32, out_shape)], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _top(starts: int | list[int], ends: int | list[int], axes: list[int],
         steps: int | None = None) -> onnx.ModelProto:
    """The slice at top level; y = ReduceSum of its Relu along axis 0 -> [1, ...]."""
    nodes, constants = _slice("y", starts, ends, axes, steps)
    nodes.append(helper.make_node("ReduceSum", ["y_r"], ["out"], keepdims=0))
    return _model(nodes, constants, "out", [])


def _loop_body() -> onnx.GraphProto:
    """One iteration: x[zero:zero + ROWS] (the outer x and zero), Relu, summed over rows ->
    [COLS] as the scan output; cond passed through."""
    nodes, constants = _slice("b", 0, ROWS, [0])
    nodes += [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
              helper.make_node("ReduceSum", ["b_r", "rows"], ["col_sums"], keepdims=0)]
    return helper.make_graph(
        nodes, "body", [helper.make_tensor_value_info("i", I64, []),
                        helper.make_tensor_value_info("cond_in", BOOL, [])],
        [helper.make_tensor_value_info("cond_out", BOOL, []),
         helper.make_tensor_value_info("col_sums", F32, [COLS])], [*constants, _ints([0], "rows")])


def _loop() -> onnx.ModelProto:
    """A Loop of M = 3 over `_loop_body` (the body's slice reads the outer x): [3, COLS]."""
    nodes = [helper.make_node("Loop", ["m", "go"], ["sums"], body=_loop_body())]
    go = numpy_helper.from_array(np.array(True), "go")
    return _model(nodes, [_ints(3, "m"), go], "sums", [3, COLS])


def _branch(sliced: bool) -> onnx.GraphProto:
    """then: x[zero:zero + ROWS] Relu'd, summed over rows; else: x summed over rows."""
    if sliced:
        nodes, constants = _slice("t", 0, ROWS, [0])
        nodes.append(helper.make_node("ReduceSum", ["t_r", "rows"], ["col_sums"], keepdims=0))
    else:
        nodes = [helper.make_node("ReduceSum", ["x", "rows"], ["col_sums"], keepdims=0)]
        constants = []
    return helper.make_graph(nodes, "then" if sliced else "else", [],
                             [helper.make_tensor_value_info("col_sums", F32, [COLS])],
                             [*constants, _ints([0], "rows")])


def _if() -> onnx.ModelProto:
    """If (zero >= 0: always, but data) then `_branch(True)` else `_branch(False)`."""
    nodes = [helper.make_node("GreaterOrEqual", ["zero", "zero"], ["c1"]),
             helper.make_node("Squeeze", ["c1"], ["cond"]),
             helper.make_node("If", ["cond"], ["sums"], then_branch=_branch(True),
                              else_branch=_branch(False))]
    return _model(nodes, [], "sums", [COLS])


def _scan() -> onnx.ModelProto:
    """A Scan over x's rows whose body slices each row [COLS] at zero:zero + COLS (data: the
    outer `zero`), Relu'd and summed -> [ROWS]."""
    nodes, constants = _index("r_s", 0)
    more_nodes, more = _index("r_e", COLS)
    nodes += [*more_nodes, helper.make_node("Slice", ["row", "r_s", "r_e", "r_axes"], ["part"]),
              helper.make_node("Relu", ["part"], ["part_r"]),
              helper.make_node("ReduceSum", ["part_r"], ["total"], keepdims=0)]
    body = helper.make_graph(
        nodes, "body", [helper.make_tensor_value_info("row", F32, [COLS])],
        [helper.make_tensor_value_info("total", F32, [])], [*constants, *more,
                                                             _ints([0], "r_axes")])
    scan = helper.make_node("Scan", ["x"], ["totals"], body=body, num_scan_inputs=1)
    return _model([scan], [], "totals", [ROWS])


def _compress() -> onnx.ModelProto:
    """Compress x's rows where x[:, 0] > -1e30 (every finite row, but data) -> [n, COLS]."""
    nodes = [helper.make_node("Gather", ["x", "col0"], ["first"], axis=1),
             helper.make_node("Greater", ["first", "floor"], ["keep"]),
             helper.make_node("Compress", ["x", "keep"], ["y"], axis=0),
             helper.make_node("Relu", ["y"], ["y_r"]),
             helper.make_node("ReduceSum", ["y_r"], ["out"], keepdims=0)]
    floor = numpy_helper.from_array(np.array(-1e30, np.float32), "floor")
    return _model(nodes, [_ints(0, "col0"), floor], "out", [])


def _topk() -> onnx.ModelProto:
    """TopK of x along its rows with K = zero + ROWS (every row, but data) -> [K, COLS] x 2."""
    nodes, constants = _index("k", ROWS)
    nodes += [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=0),
              helper.make_node("Cast", ["indices"], ["as_float"], to=F32),
              helper.make_node("Add", ["values", "as_float"], ["y"]),
              helper.make_node("ReduceSum", ["y"], ["out"], keepdims=0)]
    return _model(nodes, constants, "out", [])


# name -> (the graph, whether the data takes the whole extent: the bound is what runs)
KINDS: dict[str, tuple[Callable[[], onnx.ModelProto], bool]] = {
    "top": (lambda: _top(0, ROWS, [0]), True),
    "top_part": (lambda: _top(ROWS // 4, ROWS // 2, [0]), False),  # 16 of the 64 rows
    "steps": (lambda: _top(0, ROWS, [0], steps=2), False),  # every other row: 32
    "negative": (lambda: _top(-ROWS, BIG, [0]), True),
    "reversed": (lambda: _top(-1, -BIG, [0], steps=-1), True),  # every row, backwards
    "two_axes": (lambda: _top([0, 0], [ROWS, COLS], [0, 1]), True),
    "two_axes_part": (lambda: _top([0, 8], [ROWS // 2, COLS], [0, 1]), False),
    "loop": (_loop, True),
    "if": (_if, True),
    "scan": (_scan, True),
    "compress": (_compress, True),
    "topk": (_topk, True),
}


def save(kind: str, folder: Path) -> Path:
    """The graph `kind` saved in `folder`, checked by onnx's checker."""
    model = KINDS[kind][0]()
    onnx.checker.check_model(model, full_check=True)
    path = folder / f"slice_{kind}.onnx"
    onnx.save(model, path)
    return path
