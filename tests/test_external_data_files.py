"""`external_data_files` (frontends/onnx/read.py) skips the parse where the file holds no
"location" bytes: its answer is the parsed model's, with and without external tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from graphmem.frontends.onnx import read
from graphmem.frontends.onnx.untrusted import external_location, external_tensors

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _parsed_answer(path: Path) -> list[Path]:
    """The general path: the whole model parsed, every external tensor's location."""
    model = onnx.load(str(path), load_external_data=False)
    return [path.parent / name for name in sorted(
        {external_location(t) for _, t in external_tensors(model)}) if name]


def _model(path: Path, weight: np.ndarray, external: bool) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [len(weight)])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [len(weight)])],
        [numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph), str(path), save_as_external_data=external,
              all_tensors_to_one_file=True, location="w.data", size_threshold=0)
    return path


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.onnx")))
def test_samples_name_what_the_parsed_model_names(name: str) -> None:
    assert read.external_data_files(SAMPLES / name) == _parsed_answer(SAMPLES / name)


def test_external_tensors_are_found(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.onnx", np.ones(4, np.float32), external=True)
    assert read.external_data_files(path) == _parsed_answer(path) == [tmp_path / "w.data"]


def test_location_bytes_inside_a_weight_still_parse(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A weight whose bytes spell "location" is parsed (and names no file)."""
    weight = np.frombuffer(b"location" * 2, np.float32).copy()
    path = _model(tmp_path / "m.onnx", weight, external=False)
    parsed: list[bytes] = []
    monkeypatch.setattr(read, "parse_model", lambda data: parsed.append(data) or onnx.load(
        str(path)))
    assert read.external_data_files(path) == _parsed_answer(path) == []
    assert len(parsed) == 1


def test_no_location_no_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _model(tmp_path / "m.onnx", np.ones(4, np.float32), external=False)
    monkeypatch.setattr(read, "parse_model", lambda data: pytest.fail("parsed"))
    assert read.external_data_files(path) == []
