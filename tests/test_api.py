"""The Python API: every command-line capability from Python, one Request underneath, and a
Result that renders itself (JSON, HTML, a short repr, a notebook card)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import onnx
import pytest

import graphmem
from graphmem.distributed.strategies import DistributedConfig
from graphmem.pipeline.analysis import Analysis
from graphmem.pipeline.request import Request
from tests.onnx_builders import mlp_model

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
TINY_CNN = SAMPLES / "tiny_cnn.onnx"


@pytest.fixture(scope="module")
def mlp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mlp") / "mlp.onnx"
    onnx.save(mlp_model(), path)
    return path


def test_the_public_names() -> None:
    assert set(graphmem.__all__) == {"Request", "Result", "__version__", "analyze",
                                     "analyze_onnx", "analyze_torch", "check_model",
                                     "gpu_fits", "verify_model"}
    assert graphmem.Request is Request
    # each command's function is reachable from the package (`graphmem.verify` is the
    # package of the runners: the function is verify_model)
    assert all(callable(getattr(graphmem, name)) for name in graphmem.__all__
               if name != "__version__")
    with pytest.raises(AttributeError):
        graphmem.no_such_name  # noqa: B018


def test_result_is_an_analysis_with_no_new_fields(mlp_path: Path) -> None:
    result = graphmem.analyze_onnx(mlp_path, batch=4)
    assert isinstance(result, graphmem.Result) and isinstance(result, Analysis)
    assert [f.name for f in fields(graphmem.Result)] == [f.name for f in fields(Analysis)]


def test_three_ways_in_give_the_same_analysis(mlp_path: Path) -> None:
    by_path = graphmem.analyze(mlp_path, batch=4)
    by_request = graphmem.analyze(Request(mlp_path, batch=4))
    by_onnx = graphmem.analyze_onnx(str(mlp_path), batch=4)
    assert by_path.peak_bytes == by_request.peak_bytes == by_onnx.peak_bytes
    assert by_path.to_dict() == by_request.to_dict()
    with pytest.raises(TypeError, match="in the Request"):
        graphmem.analyze(Request(mlp_path), batch=4)


def test_repr_is_short_and_says_the_verdict(mlp_path: Path) -> None:
    fits = graphmem.analyze_onnx(mlp_path, batch=4, gpu="t4")
    lines = repr(fits).splitlines()  # the terminal summary's answer (tests/test_terminal.py)
    assert len(lines) <= 20 and lines[0].startswith("mlp.onnx") and "fits" in lines[1]
    assert fits.fits is True
    assert graphmem.analyze_onnx(mlp_path).fits is None  # no GPU
    free = repr(graphmem.analyze_onnx(mlp_path, gpu="t4")).splitlines()[1]
    assert free.startswith("fits on NVIDIA Tesla T4 up to batch=")  # its max batch


def test_notebook_card_escapes_the_model_name(mlp_path: Path) -> None:
    result = graphmem.analyze(Request(mlp_path, batch=4, label="<script>x</script>"))
    hostile = Request(mlp_path, batch=4, label="<img src=x onerror=alert(1)>")
    card = graphmem.analyze(hostile)._repr_html_()  # the summary names the model by its path
    assert "<img" not in card and "&lt;img" in card and card.startswith("<pre")
    assert result.model.path == "<script>x</script>"


def test_json_and_html_writers(mlp_path: Path, tmp_path: Path) -> None:
    result = graphmem.analyze_onnx(mlp_path, batch=4)
    result.to_json(tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text()) == result.to_dict()
    result.to_html(tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text().lstrip().startswith("<!")


# ----- every CLI capability from Python -------------------------------------------------------
@pytest.mark.ort
def test_runtime_model_from_python(mlp_path: Path) -> None:
    assert graphmem.analyze_onnx(mlp_path, batch=2).runtime is None
    auto = graphmem.analyze_onnx(mlp_path, batch=2, runtime="auto", threads=1)
    assert auto.runtime is not None and auto.runtime.runtime == "ort-cpu"
    cuda = graphmem.analyze_onnx(mlp_path, batch=2, gpu="t4", runtime="auto")
    assert cuda.runtime is not None and cuda.runtime.runtime == "ort-cuda"
    disabled = graphmem.analyze_onnx(mlp_path, batch=2, runtime="ort-cpu", threads=1,
                                     ort_optimization="disabled")
    assert disabled.runtime is not None
    assert any("as written" in note for note in disabled.runtime.notes)


def test_sweep_from_python() -> None:
    result = graphmem.analyze_onnx(TINY_CNN, sweep="batch=1,2,4", gpu="t4")
    assert result.sweep is not None and [p.value for p in result.sweep.points] == [1, 2, 4]


def test_onnx_suggestions_from_python() -> None:
    plain = graphmem.analyze_onnx(TINY_CNN, batch=4, train=True)
    assert plain.suggestions is None  # as before: only when asked
    suggested = graphmem.analyze_onnx(TINY_CNN, batch=4, train=True, suggest=True)
    assert suggested.suggestions is not None
    assert "amp" in {s.kind for s in suggested.suggestions.suggestions}
    inference = graphmem.analyze_onnx(TINY_CNN, batch=4, suggest=True)
    assert inference.suggestions is not None


@pytest.mark.slow
@pytest.mark.torch
def test_distributed_from_python() -> None:
    torch = pytest.importorskip("torch")
    from tests.torch_models.small import TinyGPT

    result = graphmem.analyze(TinyGPT(), [torch.zeros(4, 64, dtype=torch.long)], train=True,
                              gpu="a100-80gb", gpus=4, strategy="zero2")
    assert result.distributed is not None
    assert result.distributed.per_rank.config.strategy == "zero2"
    same = graphmem.analyze(TinyGPT(), ["4x64:int64"], train=True, gpu="a100-80gb",
                            distributed=DistributedConfig("zero2", 4))
    assert same.distributed == result.distributed


@pytest.mark.torch
def test_kv_cache_from_python() -> None:
    pytest.importorskip("torch")
    from tests.torch_models.small import TinyGPT

    given = graphmem.analyze(TinyGPT(), ["2x64:int64"], kv_cache=(4, 2, 16), kv_dtype="float16")
    assert given.kv_cache is not None and given.kv_cache.shape.per_token_bytes == 2 * 4 * 2 * 16 * 2
    assert given.kv_cache.batch == 2


@pytest.mark.slow
@pytest.mark.torch
def test_torch_suggestions_from_a_spec_string() -> None:
    pytest.importorskip("torch")
    result = graphmem.analyze_torch("tests/torch_models/small.py:build_convnet", ["16x3x32x32"],
                                    train=True, suggest=True, memory_budget_bytes=1 << 20)
    assert result.model.path == "tests/torch_models/small.py:build_convnet"
    assert result.suggestions is not None
    assert {"checkpoint", "amp", "batch"} <= {s.kind for s in result.suggestions.suggestions}


@pytest.mark.torch
def test_example_inputs_however_they_are_given() -> None:
    import torch

    from graphmem.errors import GraphmemError

    model = torch.nn.Linear(8, 4)
    # [2, 8] in, [2, 4] out, float32: one bare tensor is one input, never split into rows
    expected = graphmem.analyze(model, [torch.zeros(2, 8)]).peak_bytes
    assert graphmem.analyze(model, torch.zeros(2, 8)).peak_bytes == expected
    assert graphmem.analyze(model, (2, 8)).peak_bytes == expected  # one shape
    assert graphmem.analyze(model, "2x8").peak_bytes == expected
    # a dict is keyword inputs: Linear.forward(input)
    assert graphmem.analyze(model, {"input": torch.zeros(2, 8)}).peak_bytes == expected
    with pytest.raises(GraphmemError, match=r"forward\(input\)"):
        graphmem.analyze(model, {"x": torch.zeros(2, 8)})
