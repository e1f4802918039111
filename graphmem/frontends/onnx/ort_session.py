"""Settings every onnxruntime session graphmem creates shares (the optimized-graph runtime model
here, verify's runner above): telemetry off, and the IR version this onnxruntime reads."""

from __future__ import annotations

import re
from functools import cache

import onnx
from onnx import helper

from graphmem.frontends.onnx.ort_import import ort

_IR_VERSION_ERROR = re.compile(r"max supported IR version: (\d+)")


@cache
def quiet_onnxruntime() -> None:
    """No telemetry: onnxruntime would queue events (node names included) under the user's
    cache folder. Called before any session is created."""
    ort.disable_telemetry_events()


@cache
def max_ir_version() -> int | None:
    """The highest model IR version this onnxruntime loads (None: it did not say)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "probe",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    probe = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    probe.ir_version = 1 << 20
    quiet_onnxruntime()
    try:
        ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as error:  # noqa: BLE001 - onnxruntime raises its own types
        match = _IR_VERSION_ERROR.search(str(error))
        return int(match.group(1)) if match else None
    return None
