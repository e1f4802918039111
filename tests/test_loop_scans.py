"""A Loop's scan outputs sized by its trip count (graphmem/frontends/onnx/loop_scans.py), through
onnxruntime's symbolic rules and onnx's inference as graphmem runs them, checked against the
shapes onnxruntime's own run gives."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.frontends.onnx import infer
from graphmem.frontends.onnx.infer import infer_shapes
from graphmem.frontends.onnx.loop_scans import onnx_loop_scans

TABLE = (128, 8)  # the outer tensor the body reads a row of


def _body(cond: str) -> onnx.GraphProto:
    """Each iteration gathers row `i` of the outer `table` (a [8] scan output). `cond`: how the
    body's cond output is made: "pass" (its cond input, through Identity), "outer" (Cast of
    the outer constant true, as the TorchScript exporter writes EmbeddingBag), "less"
    (i < 3: the loop can stop early)."""
    nodes = [helper.make_node("Gather", ["table", "i"], ["row"], axis=0)]
    initializers = []
    if cond == "pass":
        nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    elif cond == "outer":
        nodes.append(helper.make_node("Cast", ["true"], ["cond_out"], to=TensorProto.BOOL))
    else:
        initializers.append(helper.make_tensor("three", TensorProto.INT64, [], [3]))
        nodes.append(helper.make_node("Less", ["i", "three"], ["cond_out"]))
    return helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("row", TensorProto.FLOAT, None)],
        initializer=initializers)


def _loop_model(trips: str, cond: str = "pass", start: str = "true",
                m: int = 5) -> onnx.ModelProto:
    """Loop(M, start) -> Relu. `trips`: "const" (M = `m`) or "shape" (M = Gather(Shape(offsets),
    0): offsets' symbolic dim `n`); `start`: the initial cond, a constant "true" or the graph
    input "go"."""
    nodes = []
    initializers = [helper.make_tensor("true", TensorProto.BOOL, [], [True])]
    if trips == "const":
        initializers.append(numpy_helper.from_array(np.array(m, np.int64), "M"))
    else:
        nodes += [helper.make_node("Shape", ["offsets"], ["shape"]),
                  helper.make_node("Constant", [], ["zero"],
                                   value=helper.make_tensor("z", TensorProto.INT64, [], [0])),
                  helper.make_node("Gather", ["shape", "zero"], ["M"], axis=0)]
    nodes += [helper.make_node("Loop", ["M", start], ["rows"], body=_body(cond)),
              helper.make_node("Relu", ["rows"], ["y"])]
    inputs = [helper.make_tensor_value_info("table", TensorProto.FLOAT, list(TABLE)),
              helper.make_tensor_value_info("offsets", TensorProto.INT64, ["n"]),
              helper.make_tensor_value_info("go", TensorProto.BOOL, [])]
    graph = helper.make_graph(nodes, "loop", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def _dims(model: onnx.ModelProto, name: str) -> list[int | str]:
    infos = {v.name: v for v in (*model.graph.value_info, *model.graph.output)}
    return [d.dim_param or d.dim_value for d in infos[name].type.tensor_type.shape.dim]


def _ort_shape(model: onnx.ModelProto, offsets: int) -> tuple[int, ...]:
    """The scan output's shape in onnxruntime's own run, `offsets` holding that many ids."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"table": np.zeros(TABLE, np.float32), "offsets": np.zeros(offsets, np.int64),
             "go": np.array(True)}
    return tuple(session.run(["y"], feeds)[0].shape)


def _onnx_path(model: onnx.ModelProto) -> onnx.ModelProto:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    onnx_loop_scans(inferred)
    return inferred


@pytest.mark.parametrize("cond", ["pass", "outer"])
def test_constant_trip_count_sizes_the_scan_output(cond: str) -> None:
    # M = 5, cond can never turn false: 5 iterations of a [8] row -> [5, 8]; onnxruntime's
    # run stacks the same 5 rows
    model = _loop_model("const", cond)
    inferred, _ = infer_shapes(model, [], {})
    assert _dims(inferred, "rows") == _dims(inferred, "y") == [5, 8]
    assert _dims(_onnx_path(model), "rows") == _dims(_onnx_path(model), "y") == [5, 8]
    assert _ort_shape(model, offsets=3) == (5, 8)


def test_negative_trip_count_runs_no_iteration() -> None:
    # M = -2: no iteration, an empty [0, 8] (onnxruntime's run gives the same)
    model = _loop_model("const", m=-2)
    inferred, _ = infer_shapes(model, [], {})
    assert _dims(inferred, "rows") == _dims(_onnx_path(model), "rows") == [0, 8]
    assert _ort_shape(model, offsets=3) == (0, 8)


def test_symbolic_trip_count_is_the_input_dim() -> None:
    # M = Shape(offsets)[0] = n: [n, 8], the input's own symbol (no new name); onnxruntime
    # runs 7 iterations at n = 7
    model = _loop_model("shape")
    inferred, _ = infer_shapes(model, [], {})
    assert _dims(inferred, "rows") == _dims(inferred, "y") == ["n", 8]
    assert _dims(_onnx_path(model), "y") == ["n", 8]
    assert _ort_shape(model, offsets=7) == (7, 8)


@pytest.mark.parametrize(("cond", "start"), [("less", "true"), ("pass", "go")])
def test_a_loop_that_can_stop_early_stays_unknown(cond: str, start: str) -> None:
    # cond = i < 3 stops a loop of n trips after 4 (the body runs at i = 0..3, its cond false
    # after i = 3: onnxruntime gives [4, 8] at n = 7, not [7, 8]); an initial
    # cond read from the data may stop it at once: M is no size for either
    model = _loop_model("shape", cond, start)
    inferred, _ = infer_shapes(model, [], {})
    first = _dims(inferred, "rows")[0]
    assert first not in ("n", 0) and isinstance(first, str)  # the engine's own new symbol
    assert _dims(_onnx_path(model), "rows")[0] not in ("n", 7)
    if cond == "less":
        assert _ort_shape(model, offsets=7) == (4, 8)


def test_onnx_fallback_sizes_the_scan_output(monkeypatch: pytest.MonkeyPatch) -> None:
    # onnxruntime's rules failing, graphmem's onnx inference gives the loop the same [n, 8]
    def fail(*_: object) -> None:
        raise RuntimeError("rules failed")

    monkeypatch.setattr(infer, "_ort_symbolic_inference", fail)
    warnings: list[str] = []
    inferred, engine = infer_shapes(_loop_model("shape"), warnings, {})
    assert engine == "onnx shape inference"
    assert _dims(inferred, "rows") == _dims(inferred, "y") == ["n", 8]
