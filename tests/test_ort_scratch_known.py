"""Which onnxruntime CPU kernels' scratch graphmem knows (graphmem/runtime_models/
ort_kernels.py `scratch_known`): modelled, or measured none; any other op is counted without
scratch and named in the runtime's notes, not silently zero."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem import analyze_onnx
from graphmem.core.ir import Node
from graphmem.frontends.onnx.importer import import_onnx, read_model
from graphmem.frontends.onnx.ort_optimized import _saved_optimized
from graphmem.ops.registry import registered_ops
from graphmem.runtime_models.ort_kernels import (
    CONTRIB_SCRATCH_OPS,
    NO_SCRATCH_CONTRIB_OPS,
    NO_SCRATCH_OPS,
    SCRATCH_OPS,
    scratch_known,
    unmeasured_scratch_ops,
)
from tests.helpers.samples import RUNNABLE, SAMPLE_MODELS, SAMPLES_DIR

CONTROL_FLOW = {"If", "Loop", "Scan"}  # priced by the control-flow pass, not a rule


def test_the_lists_name_ops_graphmem_prices_and_no_op_twice() -> None:
    onnx_ops = {op for domain, op in registered_ops() if domain in ("", "ai.onnx")}
    contrib = {op for domain, op in registered_ops() if domain == "com.microsoft"}
    assert onnx_ops >= NO_SCRATCH_OPS and onnx_ops >= SCRATCH_OPS - CONTROL_FLOW
    assert not NO_SCRATCH_OPS & SCRATCH_OPS
    assert contrib >= CONTRIB_SCRATCH_OPS
    assert not {op for domain, op in NO_SCRATCH_CONTRIB_OPS
                if domain == "com.microsoft"} & CONTRIB_SCRATCH_OPS


def test_every_op_of_the_measured_samples_is_known() -> None:
    # the samples are measured to the byte (benchmarks/results/accuracy.md): none of their
    # kernels took scratch graphmem does not model (their nodes read from the files alone)
    for sample in SAMPLE_MODELS:
        protos = onnx.load(str(sample), load_external_data=False).graph.node
        nodes = [Node(p.name, p.op_type, [], [], domain=p.domain) for p in protos]
        assert [n.op_type for n in nodes if not scratch_known(n)] == [], sample.name


@pytest.mark.ort
@pytest.mark.parametrize("level", ["basic", "extended", "all"])
def test_every_op_onnxruntime_runs_for_the_small_samples_is_known(level: str) -> None:
    # the kernels onnxruntime runs are those of the graph it optimizes (fusions, contrib and
    # nchwc ops): the runnable samples' optimized graphs, as ort_optimized.py saves them, have
    # none graphmem does not know (the large samples, mobilenet_v2, resnet50 and gpt2, 2 s
    # and more each, were checked by hand at each level on 2026-11-29: none either)
    for name in RUNNABLE:
        model = read_model(SAMPLES_DIR / f"{name}.onnx")
        with tempfile.TemporaryDirectory() as folder:
            saved, _ = _saved_optimized(model, level, Path(folder))
        nodes = [Node(p.name, p.op_type, [], [], domain=p.domain) for p in saved.graph.node]
        assert [n.op_type for n in nodes if not scratch_known(n)] == [], name


def test_the_ops_of_a_loops_body_and_of_an_if_in_it_are_named(tmp_path: Path) -> None:
    # a Loop (M = 2) whose body runs HardSwish, then an If whose then branch runs Sin: both
    # kernels run in onnxruntime's body sessions, both named (Relu, Identity: measured)
    path = tmp_path / "loop.onnx"
    onnx.save(_loop_model(), path)
    assert unmeasured_scratch_ops(import_onnx(path).graph) == ("HardSwish", "Sin")


def _loop_model() -> onnx.ModelProto:
    f32, i64, boolean = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    then = helper.make_graph([helper.make_node("Sin", ["h"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", f32, [4, 16])])
    other = helper.make_graph([helper.make_node("Relu", ["h"], ["r"])], "else", [],
                              [helper.make_tensor_value_info("r", f32, [4, 16])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["co"]), helper.make_node("HardSwish", ["x"], ["h"]),
         helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other)], "body",
        [helper.make_tensor_value_info("i", i64, []),
         helper.make_tensor_value_info("c", boolean, [])],
        [helper.make_tensor_value_info("co", boolean, []),
         helper.make_tensor_value_info("z", f32, [4, 16])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "go"], ["zs"], body=body)], "g",
        [helper.make_tensor_value_info("x", f32, [4, 16])],
        [helper.make_tensor_value_info("zs", f32, None)],
        [numpy_helper.from_array(np.array(2, np.int64), "M"),
         numpy_helper.from_array(np.array(True), "go")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_graphs_unmeasured_ops_are_found_once_each(tmp_path: Path) -> None:
    graph = import_onnx(_model(tmp_path)).graph
    assert unmeasured_scratch_ops(graph) == ("HardSwish", "Sin")


def _model(folder: Path) -> Path:
    """x [4, 16] -> HardSwish -> Sin -> Sin -> Relu -> y."""
    nodes = [helper.make_node("HardSwish", ["x"], ["h"]), helper.make_node("Sin", ["h"], ["s"]),
             helper.make_node("Sin", ["s"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])])
    path = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_an_op_not_measured_is_named_in_the_runtimes_notes(tmp_path: Path) -> None:
    # HardSwish and Sin: priced, never measured on onnxruntime's CPU kernels: each counted
    # without scratch, and said; Relu (measured) is not named
    result = analyze_onnx(_model(tmp_path), runtime="ort-cpu", ort_optimization="disabled",
                          plan=False)
    assert result.runtime is not None
    assert ("2 ops whose kernel's scratch is not known (HardSwish, Sin): counted as 0 bytes,"
            " the runtime peak may be low by it") in result.runtime.notes
