"""`analyze` and `check` open the model file and nothing else of the user's (issue: a model
named files graphmem then read). Asserted with an audit hook on every `open`, with the model's
external data file and a secret beside it present: only library files (Python, installed
packages, graphmem's own), graphmem's private temp folders and the outputs asked for may be
opened besides the model."""

from __future__ import annotations

import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import graphmem
from graphmem.cli.main import main
from tests.onnx_builders import mlp_model, save_with_external_data

_OPENED: list[str] = []
_RECORDING = [False]


def _hook(event: str, args: tuple) -> None:
    if _RECORDING[0] and event == "open" and isinstance(args[0], str | bytes | Path):
        _OPENED.append(str(Path(args[0] if not isinstance(args[0], bytes)
                                else args[0].decode(errors="replace")).absolute()))


sys.addaudithook(_hook)  # audit hooks cannot be removed: this one records only when asked


@pytest.fixture
def opened() -> Iterator[list[str]]:
    _OPENED.clear()
    _RECORDING[0] = True
    try:
        yield _OPENED
    finally:
        _RECORDING[0] = False


def _library_roots() -> list[str]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sysconfig.get_paths().values(),
             str(Path(graphmem.__file__).parent), str(Path(graphmem.__file__).parents[1] /
                                                      "templates")}
    return sorted(str(Path(r).resolve()) for r in roots if r)


def _users_files(paths: list[str], tmp_path: Path, outputs: set[Path]) -> set[str]:
    """The opened paths that are neither libraries, nor devices of the process, nor
    graphmem's own temp folders, nor an output the command was asked to write (nor the
    temporary file an output is written to before its rename, which must be gone)."""
    roots = _library_roots()
    private_temp = str(Path(tempfile.gettempdir()).resolve() / "graphmem-")
    folders = {output.parent for output in outputs}
    found = set()
    for text in paths:
        path = Path(text)
        resolved = str(path.resolve())
        if any(resolved.startswith(root) for root in roots) or path in outputs:
            continue
        if path.parent in folders and path.name.startswith(".graphmem-"):
            assert not path.exists(), f"the temporary output {path} was left behind"
            continue
        # the system's own files (/etc/os-release for the report's machine line, locales)
        system = ("/proc/", "/sys/", "/dev/", "/etc/", "/usr/", private_temp)
        if resolved.startswith(system) or "__pycache__" in resolved:
            continue
        found.add(resolved)
    return found


@pytest.fixture
def model_with_data(tmp_path: Path) -> Path:
    """mlp.onnx with its weights in mlp.onnx.data, and a secret file beside it."""
    path = tmp_path / "mlp.onnx"
    save_with_external_data(mlp_model(), path)
    assert (tmp_path / "mlp.onnx.data").exists()
    (tmp_path / "secret.txt").write_text("AKIA-not-for-graphmem")
    return path


@pytest.mark.parametrize("argv", [
    ["analyze", "{model}", "--batch", "4", "--json", "{out}/r.json", "--html", "{out}/r.html"],
    ["analyze", "{model}", "--batch", "4", "--gpu", "t4", "--no-html"],
    ["analyze", "{model}", "--no-html"],
    ["check", "{model}", "--batch", "4", "--gpu", "t4", "--max-params", "1M"],
], ids=["analyze-outputs", "analyze-gpu", "analyze-free-dims", "check"])
@pytest.mark.ort
def test_only_the_model_file_is_opened(model_with_data: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                       opened: list[str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)
    words = [w.format(model=model_with_data, out=out) for w in argv]
    code = main(words)
    assert code in (0, 1), capsys.readouterr().err
    outputs = {Path(w) for w in words if w.startswith(str(out))}
    assert _users_files(opened, tmp_path, outputs) == {str(model_with_data.resolve())}


def test_the_hook_sees_what_the_process_opens(tmp_path: Path, opened: list[str]) -> None:
    # the check above can only fail if the hook records opens: prove it does
    probe = tmp_path / "probe.txt"
    probe.write_text("x")
    probe.read_text()
    assert str(probe) in opened


@pytest.mark.ort
def test_the_model_file_is_read_once_with_a_runtime_model(model_with_data: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          opened: list[str]) -> None:
    # --gpu: the importer's graph and onnxruntime's view (the runtime model, probed at several
    # batches by the max-batch search) come from one read of the file; it was read twice
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", str(model_with_data), "--gpu", "t4", "--no-html"]) == 0
    model = str(model_with_data.resolve())
    assert [p for p in opened if str(Path(p).resolve()) == model] == [str(model_with_data)]
