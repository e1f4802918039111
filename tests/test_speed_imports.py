"""Start-up and repeated work, checked by behaviour (never by timing): the ONNX path and
`graphmem --help` import no framework they do not use, and the shapes onnxruntime's planner
sees are inferred once per import however many runtime estimates an analysis makes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphmem.frontends.onnx import runtime_inputs
from graphmem.pipeline import run
from graphmem.pipeline.request import Request

ROOT = Path(__file__).resolve().parent.parent
RESNET50 = ROOT / "samples" / "resnet50.onnx"
# frameworks an ONNX analysis never needs: torch's import alone is seconds of start-up
FRAMEWORKS = ("torch", "transformers", "onnxruntime")


def _modules_after(argv: list[str]) -> dict[str, object]:
    """Run `graphmem <argv>` in a fresh interpreter; its exit code and which of FRAMEWORKS
    (and their submodules) it imported, printed as JSON on the last line of stderr."""
    script = (
        "import json, sys\n"
        "from graphmem.cli.main import main\n"
        "try:\n"
        "    code = main(sys.argv[1:])\n"
        "except SystemExit as done:\n"
        "    code = done.code\n"
        f"frameworks = {FRAMEWORKS!r}\n"
        "found = sorted(m for m in sys.modules if m.split('.')[0] in frameworks)\n"
        "print(json.dumps({'code': code, 'modules': found}), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, check=False)
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.slow
def test_an_onnx_analysis_imports_no_torch(tmp_path: Path) -> None:
    result = _modules_after(["analyze", str(RESNET50), "--gpu", "t4", "--batch", "32",
                             "--json", str(tmp_path / "r.json"), "--no-html"])
    assert result["code"] == 0
    # onnxruntime's symbolic shape inference is loaded from its file, not as the package
    # (whose __init__ imports torch when installed); no runtime model here needs a session
    assert [m for m in result["modules"] if m.split(".")[0] in ("torch", "transformers")] == []


@pytest.mark.slow
def test_help_imports_neither_torch_nor_onnxruntime() -> None:
    result = _modules_after(["--help"])
    assert result["code"] == 0
    assert result["modules"] == []


def test_plan_shapes_are_inferred_once_per_import(monkeypatch: pytest.MonkeyPatch) -> None:
    # --gpu with a bound batch: the verdict's runtime estimate plus the largest-batch search's
    # estimates at other batches all ask for the planner's shapes, which no dim changes
    calls: list[object] = []
    original = runtime_inputs.ort_plan_shapes

    def counted(source: object) -> object:
        calls.append(source)
        return original(source)  # type: ignore[arg-type]

    monkeypatch.setattr(runtime_inputs, "ort_plan_shapes", counted)
    analysis = run.analyze(Request(RESNET50, batch=32, gpu="t4"))
    assert analysis.runtime is not None and analysis.max_batch is not None
    assert len(calls) == 1
    source = analysis.runtime_inputs
    assert source is not None and source.plan_shapes() is source.plan_shapes()
