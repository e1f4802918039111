"""One GRU, LSTM or RNN node as an ONNX model; graphmem's predicted and onnxruntime's measured
`mem_in_use_peak` for a model, the run in this process (tests/test_ort_rnn_scratch.py,
benchmarks/ort_rnn_grid.py)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from graphmem import analyze_onnx
from graphmem.pipeline.runtime import runtime_estimate

GATES = {"GRU": 3, "LSTM": 4, "RNN": 1}
LEVELS = {"disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
          "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}


@dataclass(frozen=True)
class RnnCase:
    """X [seq, batch, input_size] through one node; W, R (and B, P) initializers unless
    `weights_fed` (graph inputs: not packed); initial states as graph inputs; sequence_lens
    a constant of full lengths; `outputs` the ones the node names (the others omitted)."""

    op: str
    direction: str = "forward"
    batch: int = 1
    seq: int = 5
    hidden: int = 8
    input_size: int = 4
    bias: bool = True
    initial: bool = False
    lengths: bool = False
    outputs: tuple[str, ...] = ("Y", "Y_h")
    linear_before_reset: int = 0  # GRU only
    peepholes: bool = False  # LSTM only
    weights_fed: bool = False

    @property
    def directions(self) -> int:
        return 2 if self.direction == "bidirectional" else 1


def rnn_model(case: RnnCase, path: Path) -> Path:
    """The node as a model saved at `path`."""
    rng = np.random.default_rng(0)
    d, gates = case.directions, GATES[case.op]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                            [case.seq, case.batch, case.input_size])]
    weights: list[onnx.TensorProto] = []

    def weight(name: str, shape: tuple[int, ...]) -> str:
        if case.weights_fed:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        else:
            values = (rng.standard_normal(shape) * 0.1).astype(np.float32)
            weights.append(numpy_helper.from_array(values, name))
        return name

    names = ["X", weight("W", (d, gates * case.hidden, case.input_size)),
             weight("R", (d, gates * case.hidden, case.hidden)),
             weight("B", (d, 2 * gates * case.hidden)) if case.bias else ""]
    if case.lengths:
        weights.append(numpy_helper.from_array(np.full(case.batch, case.seq, np.int32), "L"))
    names.append("L" if case.lengths else "")
    states = ["h0", "c0"] if case.op == "LSTM" else ["h0"]
    for state in states:
        if case.initial:
            inputs.append(helper.make_tensor_value_info(state, TensorProto.FLOAT,
                                                        [d, case.batch, case.hidden]))
        names.append(state if case.initial else "")
    if case.peepholes:
        names.append(weight("P", (d, 3 * case.hidden)))
    while names[-1] == "":
        names.pop()
    shapes = {"Y": [case.seq, d, case.batch, case.hidden], "Y_h": [d, case.batch, case.hidden],
              "Y_c": [d, case.batch, case.hidden]}
    made = [name if name in case.outputs else "" for name in ["Y", "Y_h", "Y_c"][:len(states) + 1]]
    while made[-1] == "":
        made.pop()
    attributes: dict[str, object] = {"hidden_size": case.hidden, "direction": case.direction}
    if case.op == "GRU":
        attributes["linear_before_reset"] = case.linear_before_reset
    node = helper.make_node(case.op, names, made, name=case.op.lower(), **attributes)
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n]) for n in made if n]
    graph = helper.make_graph([node], "rnn", inputs, outputs, weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def predicted_peak(path: Path, level: str = "disabled") -> int:
    """graphmem's ort-cpu `mem_in_use_peak` for the model at one thread and `level`."""
    analysis = analyze_onnx(path, plan=False)
    return runtime_estimate(analysis, "ort-cpu", None, threads=1,
                            ort_optimization=level).runtime_peak_bytes


def measured_peak(path: Path, level: str = "disabled", threads: int = 1) -> int:
    """onnxruntime's `mem_in_use_peak` over one run on random inputs (CPU, `threads` intra-op
    threads, the profiler on), in this process: what tests/helpers/ort.py `measure_all`
    measures in a child, at a tenth of its cost."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = LEVELS[level]
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as folder:
        options.profile_file_prefix = str(Path(folder) / "profile")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds = {}
        for spec in session.get_inputs():
            if "int" in spec.type:
                feeds[spec.name] = rng.integers(0, 8, spec.shape).astype(np.int64)
            else:
                feeds[spec.name] = rng.random(spec.shape, np.float32)
        session.run(None, feeds)
        with open(session.end_profiling()) as profile:
            events = json.load(profile)
    return max(int(event["args"]["mem_in_use_peak"]) for event in events
               if event.get("cat") == "Node" and "mem_in_use_peak" in event.get("args", {}))
