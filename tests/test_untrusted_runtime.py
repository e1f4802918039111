"""The ort-cpu runtime model never opens the model's weights nor the model file again; only
`graphmem verify` loads weights, and says so; onnxruntime's telemetry is off."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphmem.frontends.onnx import ort_session
from graphmem.frontends.onnx.importer import read_model
from graphmem.frontends.onnx.ort_optimized import optimized_graph, weightless_copy
from graphmem.frontends.onnx.ort_plan_shapes import ort_plan_shapes
from tests.helpers.cli import run_cli_with_deadline as run_cli
from tests.helpers.untrusted import external, opened
from tests.onnx_builders import mlp_model, save_with_external_data

FOLDER_KEY = "session.model_external_initializers_file_folder_path"


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Any, str]]]:
    """Every onnxruntime session created: what it was given, and the external-data folder."""
    made: list[tuple[Any, str]] = []
    real = ort.InferenceSession

    def recording(source: Any, options: ort.SessionOptions | None = None, *args: Any,
                  **kwargs: Any) -> ort.InferenceSession:
        folder = ""
        if options is not None:
            try:
                folder = options.get_session_config_entry(FOLDER_KEY)
            except Exception:  # noqa: BLE001 - onnxruntime raises when the entry is not set
                folder = ""
        made.append((source, folder))
        return real(source, options, *args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", recording)
    yield made


@pytest.fixture
def external_mlp(tmp_path: Path) -> tuple[Path, Path]:
    """mlp.onnx with every weight in mlp.onnx.data next to it."""
    path = tmp_path / "model" / "mlp.onnx"
    path.parent.mkdir()
    return path, save_with_external_data(mlp_model(), path)


@pytest.mark.ort
def test_ort_cpu_runtime_model_never_opens_the_weights(
        external_mlp: tuple[Path, Path], tmp_path: Path, opened_paths: list[str],
        sessions: list[tuple[Any, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, data = external_mlp
    out = tmp_path / "out.json"
    code, _, err = run_cli(["analyze", str(path), "--batch", "4", "--runtime", "ort-cpu",
                            "--json", str(out), "--no-html"], capsys)
    assert code == 0, err
    runtime = json.loads(out.read_text())["memory"]["runtime"]
    assert runtime["runtime_peak_bytes"] > 0
    assert any("planned onnxruntime's optimized graph" in n for n in runtime["notes"])
    assert any("synthetic values" in n and "do not change memory" in n
               for n in runtime["notes"])
    assert opened(opened_paths, data.name) == []
    # by construction too (onnxruntime's own C++ reads are invisible to the audit hook): every
    # session got bytes, never a path, and was never pointed at the model's folder
    assert sessions
    for source, folder in sessions:
        assert isinstance(source, bytes)
        assert not folder or Path(folder).resolve() != path.parent.resolve()
        assert str(path.parent) not in folder


@pytest.mark.ort
def test_runtime_model_reads_the_model_file_as_the_importer_does(
        external_mlp: tuple[Path, Path], opened_paths: list[str]) -> None:
    # ort_plan_shapes and optimized_graph take the ModelProto read_model returns
    path, data = external_mlp
    model = read_model(path)
    shapes = ort_plan_shapes(model)
    # (the initializers' own dims are not read: no plan reads them, ort_plan_shapes.py)
    assert shapes["x"] == ("batch", 32) and "w1" not in shapes
    optimized = optimized_graph(model, "all", {"batch": 4})
    assert optimized.nodes_before == 4 and optimized.graph.nodes
    assert opened(opened_paths, data.name) == []
    assert opened(opened_paths, path.name) == [str(path)]  # read_model, once


def test_weightless_copy_fills_only_tensors_without_data() -> None:
    model = mlp_model()
    kept = numpy_helper.to_array(model.graph.initializer[1])
    for tensor in model.graph.initializer[::2]:  # w1 and w2 lose their data, b1 keeps it
        tensor.ClearField("raw_data")
    copy, filled = weightless_copy(model)
    assert filled == 2
    assert not model.graph.initializer[0].raw_data  # the original is untouched
    values = {t.name: numpy_helper.to_array(t) for t in copy.graph.initializer}
    assert values["w1"].shape == (32, 64) and np.all(values["w1"] > 0)  # nonzero
    np.testing.assert_array_equal(values["b1"], kept)


@pytest.mark.ort
def test_telemetry_is_off_before_any_session(external_mlp: tuple[Path, Path],
                                             monkeypatch: pytest.MonkeyPatch,
                                             sessions: list[tuple[Any, str]]) -> None:
    calls: list[str] = []
    monkeypatch.setattr(ort, "disable_telemetry_events", lambda: calls.append(len(sessions)))
    ort_session.quiet_onnxruntime.cache_clear()
    ort_session.max_ir_version.cache_clear()
    try:
        optimized_graph(external_mlp[0], "all")
    finally:
        ort_session.quiet_onnxruntime.cache_clear()  # the real one runs next time
    assert calls == [0] and sessions  # once, before the first session


@pytest.mark.ort
@pytest.mark.slow
def test_verify_says_it_loaded_the_weights(external_mlp: tuple[Path, Path],
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from graphmem.verify.runners import onnxruntime_runner

    path, data = external_mlp
    requests: list[dict[str, Any]] = []
    real = onnxruntime_runner._bounded_run

    def recording(folder: Path, request: dict[str, Any], *args: Any) -> Any:
        requests.append(request)
        return real(folder, request, *args)

    monkeypatch.setattr(onnxruntime_runner, "_bounded_run", recording)
    code, out, err = run_cli(["verify", str(path), "--batch", "4", "--no-optimized-run"],
                             capsys)
    assert code == 0, err
    assert f"verify loaded the model's weights from the model file and '{data.name}'" in out
    # the run (a child process: ort_child.py) gets the bytes graphmem checked, written to its
    # private folder, and external data from the model's folder only
    assert requests and all(Path(r["data_folder"]) == path.parent.resolve() for r in requests)


def test_verify_refuses_a_truncated_data_file_naming_the_tensor(
        external_mlp: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path, data = external_mlp
    data.write_bytes(data.read_bytes()[:100])
    code, _, err = run_cli(["verify", str(path), "--batch", "4"], capsys)
    assert code == 2 and "truncated" in err and "initializer 'w1'" in err, err


def test_verify_refuses_an_offset_that_is_not_a_number(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = mlp_model()
    weights = model.graph.initializer[0]
    weights.ClearField("raw_data")
    external(weights, "w.bin", 32 * 64 * 4)
    weights.external_data[1].value = "twelve"
    (tmp_path / "w.bin").write_bytes(bytes(32 * 64 * 4))
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    code, _, err = run_cli(["verify", str(path), "--batch", "2"], capsys)
    assert code == 2 and "not a number" in err, err


@pytest.mark.ort
def test_small_external_constants_run_with_synthetic_values(tmp_path: Path) -> None:
    # A shape read from external data: onnxruntime gets a filled copy and never the file
    shape = external(TensorProto(name="shape", data_type=TensorProto.INT64, dims=[2]),
                     "shape.bin", 16)
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["s"], value=shape, name="c"),
         helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "x"], ["y"], name="add")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    optimized = optimized_graph(path, "all")
    assert any("synthetic values in 1 weight tensor " in n for n in optimized.notes)
