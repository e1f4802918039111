"""Which onnxruntime CPU kernels' scratch graphmem knows (graphmem/runtime_models/
ort_kernels.py `scratch_known`): modelled, or measured none; any other op is counted without
scratch and named in the runtime's notes, not silently zero."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from graphmem import analyze_onnx
from graphmem.core.ir import Node
from graphmem.frontends.onnx.importer import import_onnx
from graphmem.ops.registry import registered_ops
from graphmem.runtime_models.ort_kernels import (
    CONTRIB_SCRATCH_OPS,
    NO_SCRATCH_CONTRIB_OPS,
    NO_SCRATCH_OPS,
    SCRATCH_OPS,
    scratch_known,
    unmeasured_scratch_ops,
)
from tests.helpers.samples import SAMPLE_MODELS

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
