"""onnxruntime's symbolic engine as infer.py drives it: the nodes onnx already typed with
numbers only skip the engine's one-node onnx inference (same shapes, fewer calls), and the
engine's sympy remembers Min and Max by argument (ort_engine.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import sympy

from graphmem.frontends.onnx import infer
from graphmem.frontends.onnx.importer import import_onnx
from graphmem.frontends.onnx.ort_engine import sympy_for_engine
from tests.helpers.onnx_counters import count_one_node_calls

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
sys.path.insert(0, str(SAMPLES.parent / "benchmarks"))

from llama_graph import PRESETS, write_model  # noqa: E402 - benchmarks/ found via sys.path


def _imported_shapes(path: Path) -> dict[str, str]:
    imported = import_onnx(path)
    return {name: f"{value.shape} {value.dtype}" for name, value in imported.graph.values.items()}


@pytest.mark.parametrize("name", ["llama_graph tiny", "tiny_gpt.onnx"])
def test_static_nodes_skip_the_one_node_inference_with_the_same_shapes(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (samples/tiny_llama.onnx no longer leaves the engine static nodes: onnx follows its
    # rotary broadcast itself, seq_dims.py `for_onnx_pass`; the benchmark's exporter-shaped
    # decoder does, with its grouped-query Expand)
    path = SAMPLES / name
    if name == "llama_graph tiny":
        path = write_model(tmp_path / "tiny.onnx", PRESETS["tiny"])
    calls = count_one_node_calls(monkeypatch)
    skipped = _imported_shapes(path)
    with_skip = calls[0]
    monkeypatch.setattr(infer, "skip_static_nodes", lambda engine, static: None)
    calls[0] = 0
    assert _imported_shapes(path) == skipped
    assert 0 < with_skip < calls[0]  # the engine's own path runs only where onnx left dims open


def test_the_whole_model_path_ignores_declared_value_infos(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # an exporter's value infos are not onnx's inference: only unknown_part's model is marked
    seen: list[int] = []
    monkeypatch.setattr(infer, "skip_static_nodes",
                        lambda engine, static: seen.append(len(static)))
    model = infer.onnx.load(SAMPLES / "tiny_llama.onnx", load_external_data=False)
    infer._ort_symbolic_inference(model, [])
    assert seen == []
    # a model file is untrusted: carrying the marker's key does not make its value infos trusted
    forged = infer.onnx.ModelProto()
    forged.CopyFrom(model)
    forged.metadata_props.add(key=infer.STATIC_TYPES_KEY, value="onnx")
    infer._ort_symbolic_inference(forged, [])
    assert seen == []
    first = infer._onnx_inference(infer._without_value_info(model), [])
    assert first is not None
    infer._ort_symbolic_inference(infer.unknown_part(first, model.graph.input), [])
    assert len(seen) == 1 and seen[0] > 0


def test_min_and_max_are_remembered_by_argument_and_type() -> None:
    engine_sympy = sympy_for_engine(sympy)
    seq = sympy.Symbol("seq", integer=True, positive=True)
    first = engine_sympy.Min(seq, 8192)
    assert engine_sympy.Min(seq, 8192) is first
    assert first == sympy.Min(seq, 8192)
    assert isinstance(first, engine_sympy.Min) and not isinstance(first, engine_sympy.Max)
    assert engine_sympy.Max(seq, 0) == seq
    x = sympy.Symbol("x")
    assert engine_sympy.Min(x, 1) == sympy.Min(x, 1)
    assert engine_sympy.Min(x, 1.0) == sympy.Min(x, 1.0)  # not the Integer's cached result
    assert engine_sympy.Min(x, 1, evaluate=False) == sympy.Min(x, 1, evaluate=False)
    assert sympy.Min is not engine_sympy.Min  # sympy itself is left as it was
