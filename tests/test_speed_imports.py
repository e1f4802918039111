"""Start-up and repeated work, checked by behaviour (never by timing): the ONNX path and
`graphmem --help` import no framework they do not use, and the shapes onnxruntime's planner
sees are inferred once per import however many runtime estimates an analysis makes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from graphmem.cli import main
from graphmem.cli.commands import COMMAND_TABLE
from graphmem.errors import GraphmemError
from graphmem.frontends.onnx import runtime_inputs
from graphmem.pipeline import run
from graphmem.pipeline.request import Request

ROOT = Path(__file__).resolve().parent.parent
RESNET50 = ROOT / "samples" / "resnet50.onnx"
# frameworks an ONNX analysis never needs: torch's import alone is seconds of start-up
FRAMEWORKS = ("torch", "transformers", "onnxruntime")
# what an ONNX analysis needs only for some models or outputs: sympy for dims written as
# expressions (onnxruntime's rules), jinja2 for the HTML report; onnx, numpy and rich for any
# command that reads a model
HEAVY = (*FRAMEWORKS, "sympy", "jinja2", "onnx", "numpy", "rich", "accelerate", "scipy")


def _modules_after(argv: list[str], packages: tuple[str, ...] = HEAVY) -> dict[str, object]:
    """Run `graphmem <argv>` in a fresh interpreter; its exit code and which of `packages`
    (and their submodules; a dotted entry: every module it begins) it imported, printed as
    JSON on the last line of stderr."""
    script = (
        "import json, sys\n"
        "from graphmem.cli.main import main\n"
        "try:\n"
        "    code = main(sys.argv[1:])\n"
        "except SystemExit as done:\n"
        "    code = done.code\n"
        f"packages = {packages!r}\n"
        # a dotted name is a prefix (graphmem.gate), else a top-level package (onnx)
        "prefixes = tuple(p for p in packages if '.' in p)\n"
        "found = sorted(m for m in sys.modules\n"
        "               if m.split('.')[0] in packages or m.startswith(prefixes))\n"
        "print(json.dumps({'code': code, 'modules': found}), file=sys.stderr)\n"
    )
    return _last_json_line(script, argv)


def _last_json_line(script: str, argv: list[str]) -> dict[str, object]:
    """Run `script` in a fresh interpreter with `argv`: the JSON on the last line of its
    stderr."""
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, check=False)
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.slow
def test_an_onnx_analysis_imports_no_torch(tmp_path: Path) -> None:
    result = _modules_after(["analyze", str(RESNET50), "--gpu", "t4", "--batch", "32",
                             "--json", str(tmp_path / "r.json"), "--no-html"])
    assert result["code"] == 0
    # onnxruntime's symbolic shape inference is loaded from its file, not as the package
    # (whose __init__ imports torch when installed); no runtime model here needs a session.
    # onnx types every value of ResNet-50 with the input's own dim names: the rules (and
    # sympy) are not needed, and no dim is an expression; --no-html: no jinja2
    assert _packages(result) == ["numpy", "onnx", "rich"]


# graphmem's own modules for what an analysis was not asked for: a training job across GPUs,
# serving, fine-tuning, suggestions, budgets (`graphmem check`), the CUDA and PyTorch runtime
# models. Imported, they were a third of a small model's command (their dataclasses alone).
NOT_ASKED_FOR = ("graphmem.gate", "graphmem.suggest", "graphmem.distributed.",
                 "graphmem.frontends.torch.finetune", "graphmem.frontends.torch.nf4",
                 "graphmem.frontends.torch.weight_layout", "graphmem.runtime_models.torch_",
                 "graphmem.runtime_models.cuda_allocator", "graphmem.runtime_models.ort_cuda",
                 "graphmem.report.html.distributed", "graphmem.report.html.llm")
# what every ONNX analysis reads: the option table's words, and the KV cache of a graph's
# past inputs (found or not)
ALWAYS = ["graphmem.distributed.attach", "graphmem.distributed.kv_cache",
          "graphmem.distributed.vocabulary"]


def test_an_onnx_analysis_imports_only_what_it_was_asked_for(tmp_path: Path) -> None:
    sample = ROOT / "samples" / "tiny_cnn.onnx"
    result = _modules_after(["analyze", str(sample), "--html", str(tmp_path / "r.html"),
                             "--json", str(tmp_path / "r.json")], NOT_ASKED_FOR)
    assert result["code"] == 0 and (tmp_path / "r.html").is_file()
    assert result["modules"] == ALWAYS
    # asked for, they load: a GPU's verdict is onnxruntime's CUDA model
    result = _modules_after(["analyze", str(sample), "--gpu", "t4", "--no-html"],
                            NOT_ASKED_FOR)
    assert "graphmem.runtime_models.ort_cuda" in result["modules"]  # type: ignore[operator]


# the GPU's table and error bands, its fit, the runtime models' base and arena, the roofline,
# the largest batch, the device total and the verdict: an analysis given no GPU (and no
# --runtime) asks none of them; made at import, their 30-odd frozen dataclasses were a tenth
# of a small model's command (runtime_models/vocabulary.py, passes/device_parts.py hold the
# words the option table, the Request and the reports read)
GPU_ONLY = ("graphmem.devices.gpus", "graphmem.devices.error_bands", "graphmem.passes.fit",
            "graphmem.runtime_models.base", "graphmem.runtime_models.bfc_arena",
            "graphmem.passes.roofline", "graphmem.passes.max_batch",
            "graphmem.pipeline.device_total", "graphmem.pipeline.verdict",
            "graphmem.pipeline.dim_probe")


def test_an_analysis_without_a_gpu_imports_none_of_the_gpu_s_modules(tmp_path: Path) -> None:
    sample = ROOT / "samples" / "tiny_cnn.onnx"
    result = _modules_after(["analyze", str(sample), "--html", str(tmp_path / "r.html"),
                             "--json", str(tmp_path / "r.json")], GPU_ONLY)
    assert result == {"code": 0, "modules": []} and (tmp_path / "r.json").is_file()
    loaded = _modules_after(["analyze", str(sample), "--no-html", "--verbose"], GPU_ONLY)
    assert loaded == {"code": 0, "modules": []}
    # asked for, they load: the verdict reads onnxruntime's CUDA model on the GPU's table
    loaded = _modules_after(["analyze", str(sample), "--gpu", "t4", "--batch", "2",
                             "--no-html"], GPU_ONLY)
    assert loaded["code"] == 0
    assert {"graphmem.devices.gpus", "graphmem.passes.fit", "graphmem.pipeline.verdict",
            "graphmem.runtime_models.base"} <= set(loaded["modules"])  # type: ignore[arg-type]


# the standard library's modules only some commands use: tomllib for a GPU's tables (the CUDA
# reserve, the error bands; its parser compiles a dozen regexes, ~2 ms), traceback for --debug
LAZY_STDLIB = ("tomllib", "traceback")


@pytest.mark.slow
def test_an_analysis_without_a_gpu_or_debug_imports_neither_tomllib_nor_traceback(
        tmp_path: Path) -> None:
    sample = ROOT / "samples" / "tiny_cnn.onnx"
    result = _modules_after(["analyze", str(sample), "--html", str(tmp_path / "r.html")],
                            LAZY_STDLIB)
    assert result == {"code": 0, "modules": []}
    # a GPU's verdict reads its TOML tables (the CUDA reserve, the error bands)
    result = _modules_after(["analyze", str(sample), "--gpu", "t4", "--no-html"], LAZY_STDLIB)
    assert result["code"] == 0 and "tomllib" in result["modules"]  # type: ignore[operator]


class _Failing:
    """A command whose run raises `error` (raised from `cause` when given)."""

    def __init__(self, error: BaseException, cause: BaseException | None = None) -> None:
        self.error, self.cause = error, cause

    def add_parser(self, commands: Any) -> None:
        commands.add_parser("gpus")

    def run(self, args: object, console: object) -> int:
        raise self.error from self.cause


@pytest.mark.parametrize(("error", "cause", "code", "line"), [
    # a bug: "internal error" and, with --debug, the bug's own traceback
    (RuntimeError("a bug"), None, 3, "internal error (RuntimeError: a bug)"),
    # a model's exit: its traceback
    (SystemExit(7), None, 2, "the model's code raised SystemExit(7)"),
    # a usage error that wraps the user's exception: the cause's traceback
    (GraphmemError("bad model"), ValueError("its own words"), 2, "bad model")])
def test_debug_prints_each_errors_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        error: BaseException, cause: BaseException | None, code: int, line: str) -> None:
    # traceback is imported only for --debug (cli/main.py `_print_traceback`): each of the
    # three paths still prints one, and only with --debug
    monkeypatch.setitem(main.COMMANDS, "gpus", _Failing(error, cause))
    assert main.main(["gpus"]) == code
    plain = capsys.readouterr().err
    assert main.main(["gpus", "--debug"]) == code
    debug = capsys.readouterr().err
    assert "Traceback" not in plain and line in plain and plain.count("\n") == 1
    assert debug.endswith(plain)
    if cause is None:  # the exception being handled, raised here: its frames
        assert debug.startswith("Traceback (most recent call last)")
        assert type(error).__name__ in debug
    else:  # the cause as raised (never raised here, so without frames)
        assert debug == f"ValueError: {cause}\n{plain}"


def _packages(result: dict[str, object]) -> list[str]:
    return sorted({m.split(".")[0] for m in result["modules"]})  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["nonsense"], []])
def test_help_imports_no_model_library(argv: list[str]) -> None:
    # the command table lists each command by name and summary (graphmem/cli/commands.py):
    # no command's module, no pipeline, no onnx, sympy or rich
    result = _modules_after(argv)
    assert result["code"] == (0 if argv and argv[0].startswith("--") else 2)
    assert result["modules"] == []


@pytest.mark.slow
def test_a_command_imports_only_its_own_module() -> None:
    script = ("import sys\nfrom graphmem.cli.main import main\n"
              "try:\n    main(['gpus', '--help'])\nexcept SystemExit:\n    pass\n"
              "print(sorted(m for m in sys.modules if m.startswith('graphmem.cli.')))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, check=True)
    loaded = done.stdout.strip().splitlines()[-1]
    assert "graphmem.cli.gpus" in loaded
    assert all(f"graphmem.cli.{name}'" not in loaded for name in ("analyze", "check", "verify"))


@pytest.mark.slow
@pytest.mark.torch
def test_a_config_analysis_imports_neither_onnx_nor_transformers_extras(tmp_path: Path) -> None:
    # a PyTorch model needs no onnx; transformers imports accelerate and scipy when they are
    # installed, and a model built from its config on the meta device uses neither
    # (frontends/torch/hf_config.py UNUSED_INTEGRATIONS)
    from tests.helpers.llm_configs import TINY_LLAMA

    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    result = _modules_after(["analyze", str(tmp_path), "--train", "--batch", "1", "--dim",
                             "seq=8", "--no-html", "--json", str(tmp_path / "r.json")])
    assert result["code"] == 0
    found = _packages(result)
    assert "torch" in found and "transformers" in found
    assert not {"onnx", "onnxruntime", "accelerate", "scipy"} & set(found)


def test_a_plain_dim_is_read_without_sympy() -> None:
    # a dim the model names (`batch`) is a DimName; an expression goes through sympy's
    # parser and comes out with the same factor for the same dim
    from graphmem.core.dim_name import DimName
    from graphmem.core.symbolic import SymInt, parse_dim, parse_size

    batch = parse_size("batch")
    ((monomial, coefficient),) = batch.terms().items()
    assert coefficient == 1 and type(monomial[0][0]) is DimName
    assert batch == SymInt.symbol("batch") == SymInt.from_sympy(parse_dim("batch"))
    # 2*batch from sympy, + 3*batch read plain: one term, 5*batch
    assert (parse_size("2*batch") + 3 * batch).terms() == {monomial: 5}
    assert parse_size("b", {"b": "batch size"}) == SymInt.symbol("batch size")


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


@pytest.mark.parametrize(("words", "imported"), [
    (["analyze", "model.onnx", "--no-html"], True),
    (["--debug", "gpus"], True),
    (["--help"], False),  # no command named: nothing imported
    (["anlyze", "model.onnx"], False),  # a mistyped command: argparse's error, later
])
def test_start_command_imports_the_command_with_the_collector_paused(
        words: list[str], imported: bool) -> None:
    """The console script's start (cli/main.py `start_command`): the named command's module
    imported with no automatic collection, the collector enabled again afterwards, and the
    objects alive then frozen (gc.freeze), in a fresh interpreter."""
    script = (
        "import gc, json, sys\n"
        "from graphmem.cli import main\n"
        "from graphmem.cli.commands import COMMAND_TABLE\n"
        "collections = []\n"
        "gc.callbacks.append(lambda phase, info: collections.append(phase))\n"
        "main.start_command(sys.argv[1:])\n"
        "done = len(collections)\n"
        "print(json.dumps({'commands': sorted(m for m, _ in COMMAND_TABLE.values()\n"
        "                                     if m in sys.modules),\n"
        "                  'collections': done, 'enabled': gc.isenabled(),\n"
        "                  'frozen': gc.get_freeze_count()}), file=sys.stderr)\n"
    )
    result = _last_json_line(script, words)
    named = [m for name, (m, _) in COMMAND_TABLE.items() if name in words]
    assert result["commands"] == (named if imported else [])
    # importing a command's modules would set off dozens of collections, and the collector
    # enabled before the freeze one more, of everything imported
    assert result["collections"] == 0
    assert result["enabled"] is True and result["frozen"] > 0
