"""`graphmem verify`: a real onnxruntime run (CPU) next to graphmem's prediction.

The model is tests/onnx_builders.mlp_model at batch 32: graphmem's activation peak is
h + hb = 2 * 32*64*4 = 16384 bytes (at bias1), and the node outputs are
fc1 8192, bias1 8192, relu1 8192, fc2 32*10*4 = 1280 bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.cli.main import main
from graphmem.verify.onnx_run import percent_error
from graphmem.verify.runners.onnxruntime_runner import InputSpec, random_feeds
from tests.onnx_builders import mlp_model, save_with_external_data


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    return path


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphmem: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.ort
@pytest.mark.slow
def test_verify_prints_prediction_measurement_and_error(
        mlp: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "verify.json"
    code, out, err = run(["verify", str(mlp), "--batch", "32", "--json", str(out_json)], capsys)
    assert code == 0, err
    assert "ORT_DISABLE_ALL" in out and "mem_in_use_peak" in out and "16.0 KiB" in out
    result = json.loads(out_json.read_text())
    predicted, measured = result["predicted"], result["measured"]
    assert predicted["activation_peak_bytes"] == 16384
    assert measured["graph_optimization"] == "disabled"
    assert measured["provider"] == "CPUExecutionProvider"
    # the arena's high-water mark holds the weights it keeps plus the activations
    assert measured["mem_in_use_peak_bytes"] == (measured["weights_in_arena_bytes"]
                                                 + measured["activation_peak_bytes"])
    assert measured["mem_arena_held_bytes"] >= measured["mem_in_use_peak_bytes"] > 0
    assert 8192 <= measured["activation_peak_bytes"] <= 4 * 16384
    assert result["error_pct"] == pytest.approx(
        (16384 - measured["activation_peak_bytes"]) / measured["activation_peak_bytes"] * 100,
        abs=1e-3)
    assert result["optimized"]["graph_optimization"] == "all"
    # graphmem's runtime model, planned on the graph each session ran, against each session
    for key, run_key in (("runtime_model", "measured"), ("runtime_model_optimized", "optimized")):
        model, measured_run = result[key], result[run_key]
        assert model["runtime_peak_bytes"] == pytest.approx(
            measured_run["mem_in_use_peak_bytes"], rel=0.03), key
    # per node: ORT's output_size is graphmem's output bytes, node for node
    outputs = {n["name"]: (n["predicted_output_bytes"], n["measured_output_bytes"])
               for n in result["nodes"]}
    assert outputs == {"fc1": (8192, 8192), "bias1": (8192, 8192), "relu1": (8192, 8192),
                       "fc2": (1280, 1280)}
    assert "4 of 4 kernels equal" in out
    # onnxruntime 1.31 reads IR version 13 at most; onnx 1.23 writes 14: said, not hidden
    if onnx.load(mlp).ir_version > 13:
        assert "IR version" in out


@pytest.mark.ort
@pytest.mark.slow
def test_verify_external_data_present_and_missing(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ext.onnx"
    data = save_with_external_data(mlp_model(), path)
    code, _, err = run(["verify", str(path), "--batch", "4", "--no-optimized-run"], capsys)
    assert code == 0, err
    data.unlink()
    code, _, err = run(["verify", str(path), "--batch", "4"], capsys)
    one_error(code, err, "ext.onnx.data", "missing")


def test_verify_needs_bound_dims(mlp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["verify", str(mlp)], capsys)
    one_error(code, err, "dims left free (batch)", "--batch/--dim")


@pytest.mark.ort
def test_verify_cuda_says_when_it_is_not_there(mlp: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["verify", str(mlp), "--batch", "4", "--provider", "cuda",
                          "--no-optimized-run"], capsys)
    if code == 0:  # a machine with a GPU and onnxruntime-gpu
        assert "CUDAExecutionProvider" in out
    else:
        one_error(code, err, "--provider cuda", "--provider cpu")


def test_verify_bad_input_is_one_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"not a model")
    code, _, err = run(["verify", str(path), "--batch", "4"], capsys)
    one_error(code, err, "junk.onnx")


def embedding_model(vocab: int) -> onnx.ModelProto:
    """ids[batch, seq] (int64) -> Gather(table[vocab, 8]) -> Relu -> y[batch, seq, 8]."""
    table = numpy_helper.from_array(np.ones((vocab, 8), np.float32), "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
             helper.make_node("Relu", ["e"], ["y"], name="act")]
    graph = helper.make_graph(
        nodes, "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])],
        initializer=[table])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.ort
@pytest.mark.slow
def test_integer_inputs_stay_inside_the_table_they_index(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "embed.onnx"
    onnx.save(embedding_model(vocab=7), path)  # ids >= 7 would make onnxruntime fail
    out_json = tmp_path / "v.json"
    code, _, err = run(["verify", str(path), "--batch", "16", "--dim", "seq=64",
                        "--no-optimized-run", "--json", str(out_json)], capsys)
    assert code == 0, err
    result = json.loads(out_json.read_text())
    assert result["inputs"] == [{"name": "ids", "shape": [16, 64], "dtype": "int64",
                                 "int_high": 7}]


def test_random_feeds() -> None:
    feeds = random_feeds([InputSpec("x", (2, 3), "float16"), InputSpec("ids", (5,), "int32", 3),
                          InputSpec("mask", (4,), "bool")])
    assert feeds["x"].dtype == np.float16 and feeds["x"].shape == (2, 3)
    assert feeds["ids"].dtype == np.int32 and feeds["ids"].max() < 3
    assert feeds["mask"].dtype == np.bool_


def test_percent_error() -> None:
    assert percent_error(110, 100) == pytest.approx(10.0)
    assert percent_error(90, 100) == pytest.approx(-10.0)
    assert percent_error(0, 0) == 0.0
