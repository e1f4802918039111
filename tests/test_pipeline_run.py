"""The one pipeline: `analyze(request)` for both front doors, every re-run a replaced Request,
the runtime model chosen and fed by the front end, the typed results read without the JSON."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import onnx
import pytest

from graphmem.core.conventions import TrainingOptions
from graphmem.pipeline import run
from graphmem.pipeline.analysis import Analysis, Formula
from graphmem.pipeline.request import Request, RuntimeOptions, SuggestOptions
from graphmem.report.json.report import to_dict
from graphmem.runtime_models.base import RUNTIMES, RuntimeContext
from graphmem.runtime_models.select import MODELS, default_runtime
from tests.onnx_builders import mlp_model

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
PACKAGE = Path(__file__).resolve().parent.parent / "graphmem"


@pytest.fixture(scope="module")
def mlp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mlp") / "mlp.onnx"
    onnx.save(mlp_model(), path)
    return path


def test_peak_and_breakdown_are_the_liveness_results_not_the_json(mlp_path: Path) -> None:
    analysis = run.analyze(Request(mlp_path, batch=8))
    memory = to_dict(analysis)["memory"]
    assert analysis.peak_bytes == int(analysis.liveness.peak_bytes) == memory["peak_bytes"]
    assert analysis.breakdown == memory["breakdown"]


def test_with_free_dims_the_peak_is_a_formula_in_them(mlp_path: Path) -> None:
    free = run.analyze(Request(mlp_path))
    peak = free.peak_bytes
    assert isinstance(peak, Formula) and peak.free_dims == {"batch"}
    for batch in (1, 8, 1000):  # the max of the candidates is the bound analysis's peak
        assert peak.evaluate({"batch": batch}) == run.analyze(
            Request(mlp_path, batch=batch)).peak_bytes
    assert "batch" in str(peak)
    assert all(isinstance(size, Formula | int) for size in free.breakdown.values())


def test_peak_bytes_costs_microseconds_on_gpt2() -> None:
    # it used to build the whole JSON report: 0.57 s on GPT-2
    analysis = run.analyze(Request(SAMPLES / "gpt2.onnx", batch=1, dims={"seq": 128},
                                   plan=False))
    started = time.perf_counter()
    for _ in range(1000):
        assert analysis.peak_bytes > 0  # type: ignore[operator]
        assert analysis.breakdown
    assert (time.perf_counter() - started) / 1000 < 1e-3


@pytest.mark.parametrize(("is_onnx", "gpu", "training", "runtime"), [
    (True, False, False, "ort-cpu"), (True, True, False, "ort-cuda"),
    (True, False, True, None), (True, True, True, "torch-cuda"),
    (False, False, False, "torch-cpu"), (False, False, True, "torch-cpu"),
    (False, True, True, "torch-cuda")])
def test_default_runtime_per_input(is_onnx: bool, gpu: bool, training: bool,
                                   runtime: str | None) -> None:
    assert default_runtime(is_onnx, gpu, training) == runtime


def test_runtime_models_are_one_registry_with_one_signature() -> None:
    assert tuple(MODELS) == RUNTIMES
    for name, model in MODELS.items():
        assert model.name == name and callable(model.estimate) and callable(model.check)


@pytest.mark.ort
def test_the_default_runtime_is_the_pipelines_not_the_clis(mlp_path: Path) -> None:
    analysis = run.analyze(Request(mlp_path, batch=2, runtime=RuntimeOptions()))
    assert analysis.runtime is not None and analysis.runtime.runtime == "ort-cpu"
    assert run.analyze(Request(mlp_path, batch=2)).runtime is None  # not asked for


def test_the_runtime_model_reads_the_front_ends_view_not_the_file(
        mlp_path: Path, tmp_path: Path) -> None:
    # the ONNX front end's runtime inputs are what onnxruntime's planner sees; the runtime
    # model reads them, never a path (runtime_models/ imports no front end)
    analysis = run.analyze(Request(mlp_path, batch=2))
    assert analysis.runtime_inputs is not None
    shapes = analysis.runtime_inputs.plan_shapes()
    assert shapes["x"] == (2, 32) or shapes["x"] == ("batch", 32)
    context = RuntimeContext(analysis.graph, analysis.dims, False,
                             int(analysis.liveness.resident_bytes), threads=1,
                             ort_optimization="disabled", ort_source=analysis.runtime_inputs)
    estimate = MODELS["ort-cpu"].estimate(context)
    assert estimate.runtime == "ort-cpu" and estimate.runtime_peak_bytes > 0


def test_every_rerun_is_the_pipeline_on_a_replaced_request(
        mlp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # suggestions re-analyse through `analyze` itself: the AMP card's step is a Request
    # with amp set, whose analysis equals a fresh one
    seen: list[Request] = []
    real = run.analyze

    def recording(request: Request) -> Analysis:
        seen.append(request)
        return real(request)

    monkeypatch.setattr(run, "analyze", recording)
    base = run.analyze(Request(mlp_path, batch=8, training=TrainingOptions(),
                               suggest=SuggestOptions(True)))
    amp_runs = [r for r in seen[1:] if r.training is not None and r.training.amp == "bf16"]
    assert amp_runs and all(not r.plan and r.suggest.enabled is False for r in amp_runs)
    assert base.suggestions is not None
    (card,) = [s for s in base.suggestions.suggestions if s.kind == "amp"]
    fresh = real(amp_runs[0])
    assert card.new_peak_bytes == int(fresh.liveness.peak_bytes)


MODEL_FILE = '''
import pathlib
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.Linear(16, 16)
        self.attn.head_dim = 8
        self.attn.n_heads = 2
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(self.attn(x).relu())

def build():
    log = pathlib.Path(__file__).with_name("loads.txt")
    log.write_text(log.read_text() + "x" if log.exists() else "x")
    return Net()
'''


@pytest.mark.slow
@pytest.mark.torch
def test_a_torch_spec_is_loaded_once_per_request_chain(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "net.py").write_text(MODEL_FILE)
    spec = f"{tmp_path / 'net.py'}:build"
    training = run.analyze(Request(spec, ("32x16",), training=TrainingOptions(),
                                   suggest=SuggestOptions(True, budget_bytes=20_000)))
    assert training.suggestions is not None and len(training.suggestions.suggestions) > 2
    assert (tmp_path / "loads.txt").read_text() == "x"  # checkpoint, AMP, batch: re-traced
    from graphmem.pipeline.request import KvCacheOptions

    inference = run.analyze(Request(spec, ("4x16",), kv_cache=KvCacheOptions(auto=True)))
    assert inference.kv_cache is not None and inference.kv_cache.shape.layers == 1
    assert (tmp_path / "loads.txt").read_text() == "xx"  # once more, for the new chain
    assert inference.model.path == spec


# the seams of the redesign below the pipeline (the whole layering: tests/test_architecture.py)
SEAMS = ("frontends/imported.py", "frontends/onnx/runtime_inputs.py",
         "frontends/torch/import_step.py", "frontends/torch/spec.py", "suggest/driver.py",
         "suggest/cards.py", "suggest/onnx_step.py", "runtime_models/base.py",
         "runtime_models/select.py", "distributed/attach.py", "training/onnx_step.py")


@pytest.mark.parametrize("module", SEAMS)
def test_no_seam_below_the_pipeline_imports_it(module: str) -> None:
    """The front ends, suggestions, runtime models and distributed code get the pipeline's
    results as arguments (TYPE_CHECKING and function-local imports included); runtime models
    read no file and know no front end."""
    above = ("graphmem.pipeline", "graphmem.api", "graphmem.cli", "graphmem.report")
    if module.startswith(("runtime_models", "suggest", "distributed", "training")):
        above += ("graphmem.frontends", "onnx", "torch")
    for node in ast.walk(ast.parse((PACKAGE / module).read_text())):
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                 [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            assert not name.startswith(above), (module, name)
