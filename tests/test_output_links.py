"""No output is written through a link (issue: a downloaded model folder overwrites files
outside it). A folder that ships `model.graphmem.html -> ../secret.txt` (or a hard link, or a
dangling link) must not make any command write there, at the default report path or at an
explicit one: refused with one line and exit 2 before any analysis, the target unchanged and
a dangling target not created. Under the check, graphmem/core/output_files.py writes through
a temporary file and a rename, which replaces a link made after the check instead of
following it."""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from graphmem.core import output_files
from graphmem.core.output_files import link_kind, write_output_text
from tests.helpers.cli import Run
from tests.helpers.llm_configs import TINY_LLAMA
from tests.onnx_builders import mlp_model

SECRET = b"the user's key\n"
TINY_TORCH = "import torch\n\ndef build():\n    return torch.nn.Linear(4, 2)\n"


def _symlink(target: Path, link: Path) -> None:
    link.symlink_to(os.path.relpath(target, link.parent))


def _hardlink(target: Path, link: Path) -> None:
    os.link(target, link)


def _dangling(target: Path, link: Path) -> None:
    _symlink(target.with_name("gone.txt"), link)


LINKS: dict[str, Callable[[Path, Path], None]] = {
    "symlink": _symlink, "hardlink": _hardlink, "dangling": _dangling}


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A downloaded model folder, the current directory, beside the user's secret file; it
    holds an ONNX model and a Hugging Face config (in hf/)."""
    (tmp_path / "secret.txt").write_bytes(SECRET)
    downloaded = tmp_path / "download"
    (downloaded / "hf").mkdir(parents=True)
    onnx.save(mlp_model(), downloaded / "model.onnx")
    (downloaded / "hf" / "config.json").write_text(json.dumps(TINY_LLAMA))
    (downloaded / "net.py").write_text(TINY_TORCH)
    monkeypatch.chdir(downloaded)
    return downloaded


def _assert_refused(result: tuple[int, str, str], calls: list[str], folder: Path) -> None:
    code, _, err = result
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("graphmem: error: ") and "link" in lines[0], lines[0]
    assert "Traceback" not in err
    assert calls == []  # refused before any analysis
    assert (folder.parent / "secret.txt").read_bytes() == SECRET
    assert not (folder.parent / "gone.txt").exists()


# (the link the folder ships, the command line run inside it)
DEFAULT_PATHS = {
    "analyze": ("model.graphmem.html", ["analyze", "model.onnx", "--batch", "2"]),
    "analyze --train": ("model.graphmem.html", ["analyze", "model.onnx", "--batch", "2",
                                                 "--train"]),
    "analyze --sweep": ("model.graphmem.html", ["analyze", "model.onnx", "--sweep",
                                                 "batch=1,2"]),
    "analyze hf folder": ("hf.graphmem.html", ["analyze", "hf", "--input", "1x8:int64"]),
    "analyze hf config": ("hf.graphmem.html", ["analyze", "hf/config.json", "--input",
                                                "1x8:int64"]),
    "analyze --suggest": ("model.graphmem.html", ["analyze", "model.onnx", "--batch", "2",
                                                   "--suggest"]),
    "analyze --gpus": ("model.graphmem.html", ["analyze", "model.onnx", "--batch", "2",
                                                "--train", "--gpus", "2"]),
    "analyze pytorch": ("net.build.graphmem.html", ["analyze", "net.py:build", "--input",
                                                  "2x4"]),
}


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("command", DEFAULT_PATHS)
def test_a_link_at_the_default_report_path_is_refused(folder: Path, work: list[str], run: Run,
                                                      command: str, link: str) -> None:
    name, args = DEFAULT_PATHS[command]
    LINKS[link](folder.parent / "secret.txt", folder / name)
    _assert_refused(run(*args), work, folder)


EXPLICIT_OUTPUTS = {
    "analyze --json": ["analyze", "model.onnx", "--batch", "2", "--no-html", "--json"],
    "analyze --html": ["analyze", "model.onnx", "--batch", "2", "--html"],
    "check --json": ["check", "model.onnx", "--batch", "2", "--max-params", "1M", "--json"],
    "check --junit": ["check", "model.onnx", "--batch", "2", "--max-params", "1M", "--junit"],
    "check hf --junit": ["check", "hf", "--gpu", "t4", "--junit"],
    "verify --json": ["verify", "model.onnx", "--batch", "2", "--json"],
    "analyze --train --json": ["analyze", "model.onnx", "--batch", "2", "--train",
                               "--no-html", "--json"],
    "analyze --sweep --json": ["analyze", "model.onnx", "--sweep", "batch=1,2", "--no-html",
                               "--json"],
    "analyze hf --json": ["analyze", "hf", "--input", "1x8:int64", "--no-html", "--json"],
    "analyze pytorch --html": ["analyze", "net.py:build", "--input", "2x4", "--html"],
    "check hf --json": ["check", "hf", "--gpu", "t4", "--json"],
    "verify pytorch --json": ["verify", "net.py:build", "--input", "2x4", "--json"],
}


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("command", EXPLICIT_OUTPUTS)
def test_a_link_at_an_explicit_output_is_refused(folder: Path, work: list[str], run: Run,
                                                 command: str, link: str) -> None:
    LINKS[link](folder.parent / "secret.txt", folder / "out.x")
    _assert_refused(run(*EXPLICIT_OUTPUTS[command], "out.x"), work, folder)


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
@pytest.mark.parametrize("flag", ["--json", "--junit"])
def test_check_never_writes_over_the_config_it_reads(folder: Path, work: list[str], run: Run,
                                                     flag: str, link: str) -> None:
    config = folder / "hf" / "config.json"
    before = config.read_bytes()
    LINKS[link](config, folder / "j.xml")
    code, _, err = run("check", "hf", "--gpu", "t4", flag, "j.xml")
    assert code == 2 and work == [], err
    assert "the model's config" in err  # named as the input it is, not only as a link
    assert config.read_bytes() == before


def test_the_report_is_written_as_a_new_file(folder: Path, run: Run) -> None:
    """The unattacked path: the default report and a JSON are written, no temporary is left,
    and a second run replaces them."""
    for _ in range(2):
        code, _, err = run("analyze", "model.onnx", "--batch", "2", "--json", "out.json")
        assert code == 0, err
    assert json.loads((folder / "out.json").read_text())["schema_version"]
    assert "<html" in (folder / "model.graphmem.html").read_text()
    assert not [p for p in os.listdir(folder) if p.startswith(".graphmem-")]


# ----- the writer under the check ------------------------------------------------------------
def test_the_writer_refuses_a_link_itself(tmp_path: Path) -> None:
    """The Python API (Result.write_html) has no command line in front of it."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    for make in LINKS.values():
        out = tmp_path / "out.html"
        make(secret, out)
        assert link_kind(out) is not None
        with pytest.raises(OSError) as raised:
            write_output_text(out, ["<html>"])
        assert raised.value.errno == errno.ELOOP
        out.unlink()
    assert secret.read_bytes() == SECRET and not (tmp_path / "gone.txt").exists()


@pytest.mark.parametrize("link", LINKS)
def test_a_link_made_after_the_check_is_replaced_not_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, link: str) -> None:
    """The race: a link appears between the check and the write. The rename replaces the
    link itself; the file it named keeps its bytes."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    out = tmp_path / "out.html"
    LINKS[link](secret, out)
    monkeypatch.setattr(output_files, "refuse_link", lambda path: None)  # the check is past
    write_output_text(out, ["<html>", "</html>"])
    assert out.read_text() == "<html></html>" and not out.is_symlink()
    assert secret.read_bytes() == SECRET and not (tmp_path / "gone.txt").exists()


def test_the_writer_keeps_the_mode_and_leaves_nothing_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    out.write_text("old")
    out.chmod(0o640)
    write_output_text(out, ["new"])
    assert out.read_text() == "new" and stat.S_IMODE(out.stat().st_mode) == 0o640

    def failing() -> Callable[[], None]:
        yield "half"
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError):
        write_output_text(out, failing())
    assert out.read_text() == "new"  # the old file stays whole
    assert os.listdir(tmp_path) == ["report.json"]  # no temporary file left


def test_a_new_file_gets_the_umask_mode(tmp_path: Path) -> None:
    umask = os.umask(0o027)
    try:
        write_output_text(tmp_path / "new.json", ["{}"])
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640  # 0o666 & ~0o027


def test_a_character_device_is_written_in_place(mlp: Path, run: Run) -> None:
    """/dev/null takes output (it cannot be renamed over); /dev/full fails with one line."""
    code, out, err = run("analyze", mlp, "--batch", "2", "--no-html", "--json", "/dev/null")
    assert code == 0 and "JSON written to /dev/null" in out + err, err
    code, _, err = run("analyze", mlp, "--batch", "2", "--no-html", "--json", "/dev/full")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "No space left on device" in lines[0], err
