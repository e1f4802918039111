"""Output paths and outputs over inputs: refused at the boundary, before any analysis, with one
error line and exit 2 (graphmem/cli/inputs.py); nothing the user gave is modified."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.cli import Run
from tests.onnx_builders import mlp_model, save_with_external_data


def refused_early(result: tuple[int, str, str], calls: list[str], *fragments: str) -> None:
    code, _, err = result
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphmem: error: "), err
    assert "internal error" not in err and "Traceback" not in err
    assert calls == []  # refused before any analysis
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# ----- output paths ----------------------------------------------------------------------------
def _commands(model: Path, flag: str, target: str) -> list[str]:
    """The command line writing `flag target`, for each command that has that flag."""
    return {
        "analyze --json": ["analyze", str(model), "--batch", "2", "--no-html", "--json", target],
        "analyze --html": ["analyze", str(model), "--batch", "2", "--html", target],
        "check --json": ["check", str(model), "--batch", "2", "--max-params", "1M", "--json",
                         target],
        "check --junit": ["check", str(model), "--batch", "2", "--max-params", "1M", "--junit",
                          target],
        "verify --json": ["verify", str(model), "--batch", "2", "--json", target],
    }[flag]


OUTPUT_FLAGS = ["analyze --json", "analyze --html", "check --json", "check --junit",
                "verify --json"]


def _long_name(d: Path) -> str:
    return str(d / ("a" * 300 + ".json"))


def _file_as_folder(d: Path) -> str:
    (d / "plain.txt").write_text("a file")
    return str(d / "plain.txt" / "out.json")


def _fifo(d: Path) -> str:
    os.mkfifo(d / "pipe")
    return str(d / "pipe")


@pytest.mark.parametrize("flag", OUTPUT_FLAGS)
@pytest.mark.parametrize(("make", "fragment"), [
    (lambda d: str(d / "missing" / "out.json"), "does not exist"),
    # writing a FIFO would wait for a reader forever (a character device such as /dev/null is
    # written in place: tests/test_output_links.py)
    (_fifo, "not a regular file"),
    (_file_as_folder, "used as a folder"),
    (_long_name, "file name is 305 bytes long"),
    (lambda d: str(d), "is a directory"),
    (lambda d: str(d / "new") + "/", "names a folder"),
    (lambda d: "", "is not a file name"),
])
def test_bad_output_paths_are_refused_before_the_analysis(
        mlp: Path, tmp_path: Path, work: list[str], run: Run, flag: str,
        make: Callable[[Path], str], fragment: str) -> None:
    if make is _fifo and not hasattr(os, "mkfifo"):
        pytest.skip("FIFOs are POSIX")
    target = make(tmp_path)
    before = mlp.read_bytes()
    refused_early(run(*_commands(mlp, flag, target)), work, fragment)
    assert mlp.read_bytes() == before
    assert not (tmp_path / "missing").exists() and not (tmp_path / "new").exists()


@pytest.mark.parametrize("flag", ["analyze --html", "check --junit"])
def test_stdout_only_where_the_flag_takes_it(mlp: Path, work: list[str], run: Run,
                                             flag: str) -> None:
    refused_early(run(*_commands(mlp, flag, "-")), work, "not stdout")


@pytest.mark.parametrize("flag", OUTPUT_FLAGS)
def test_a_read_only_folder_is_refused(mlp: Path, tmp_path: Path, work: list[str], run: Run,
                                       monkeypatch: pytest.MonkeyPatch, flag: str) -> None:
    folder = tmp_path / "readonly"
    folder.mkdir()
    real_access = os.access

    def access(path: object, mode: int, **kwargs: object) -> bool:
        # what access(2) says for a read-only mount or a folder without write permission
        if Path(str(path)) == folder and mode & os.W_OK:
            return False
        return real_access(path, mode, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "access", access)
    refused_early(run(*_commands(mlp, flag, str(folder / "out.xml"))), work, "not writable")
    assert list(folder.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root writes into read-only folders")
def test_a_folder_without_write_permission_is_refused(mlp: Path, tmp_path: Path,
                                                      work: list[str], run: Run) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        refused_early(run(*_commands(mlp, "analyze --json", str(folder / "x.json"))), work,
                      "not writable")
    finally:
        folder.chmod(0o700)


def test_an_existing_output_that_cannot_be_written_is_refused(
        mlp: Path, tmp_path: Path, work: list[str], run: Run,
        monkeypatch: pytest.MonkeyPatch) -> None:
    output = tmp_path / "old.json"
    output.write_text("{}")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (
        False if Path(str(path)) == output else real_access(path, mode, **kw)))
    refused_early(run(*_commands(mlp, "analyze --json", str(output))), work, "not writable")
    assert output.read_text() == "{}"


def test_the_default_html_path_is_checked_too(mlp: Path, tmp_path: Path, work: list[str],
                                              run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mlp.graphmem.html").mkdir()  # where the default report would go
    monkeypatch.chdir(tmp_path)
    refused_early(run("analyze", mlp, "--batch", "2"), work, "is a directory")


def test_html_and_no_html_together_are_refused(mlp: Path, work: list[str], run: Run) -> None:
    refused_early(run("analyze", mlp, "--html", "x.html", "--no-html"), work, "--no-html")


@pytest.mark.ort
def test_a_write_error_at_the_end_is_one_line(mlp: Path, tmp_path: Path, run: Run,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def disk_full(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("graphmem.report.json.report.write_json", disk_full)
    code, out, err = run("analyze", mlp, "--batch", "2", "--no-html", "--json",
                         tmp_path / "out.json")
    refused_early((code, out, err), [], "writing --json", "No space left on device")
    assert "live tensors at the peak" in out  # the analysis ran; only the write failed


def test_a_junit_write_error_at_the_end_is_one_line(mlp: Path, tmp_path: Path, run: Run,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(*args: object) -> None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))

    monkeypatch.setattr("graphmem.report.junit.write_junit", gone)
    result = run("check", mlp, "--batch", "2", "--max-params", "1M", "--junit",
                 tmp_path / "out.xml")
    refused_early(result, [], "writing --junit", "No such file or directory")


# ----- outputs never overwrite inputs ---------------------------------------------------------
@pytest.mark.parametrize("flag", OUTPUT_FLAGS)
@pytest.mark.parametrize("link", ["symlink", "hardlink", "same path"])
def test_an_output_that_is_the_model_is_refused(mlp: Path, tmp_path: Path, work: list[str],
                                                run: Run, flag: str, link: str) -> None:
    target = tmp_path / "report.out"
    if link == "symlink":
        target.symlink_to(mlp)
    elif link == "hardlink":
        os.link(mlp, target)
    else:
        target = mlp
    before = mlp.read_bytes()
    fragment = "is an input of the check" if flag.startswith("check") else "is the model itself"
    refused_early(run(*_commands(mlp, flag, str(target))), work, fragment)
    assert mlp.read_bytes() == before


@pytest.mark.parametrize("flag", OUTPUT_FLAGS)
def test_an_output_over_external_data_is_refused(tmp_path: Path, work: list[str], run: Run,
                                                 flag: str) -> None:
    model = tmp_path / "ext.onnx"
    data = save_with_external_data(mlp_model(), model)
    before = data.read_bytes()
    refused_early(run(*_commands(model, flag, str(data))), work, "external data of")
    assert data.read_bytes() == before
    alias = tmp_path / "alias.json"
    os.link(data, alias)  # a hard link elsewhere is the same file
    refused_early(run(*_commands(model, flag, str(alias))), work, "external data of")
    assert data.read_bytes() == before


def test_two_outputs_on_one_file_are_refused(mlp: Path, tmp_path: Path, work: list[str],
                                             run: Run) -> None:
    same = tmp_path / "both.out"
    refused_early(run("analyze", mlp, "--json", same, "--html", same), work, "--json and --html")
    refused_early(run("check", mlp, "--batch", "2", "--max-params", "1M", "--json", same,
                      "--junit", tmp_path / "." / "both.out"), work, "the same file")
    assert not same.exists()


def _budgets_file(folder: Path, model: Path, extra: str = "") -> Path:
    path = folder / "graphmem.toml"
    path.write_text(f'[[model]]\npath = "{model.name}"\nbatch = 2\nmax_params = "1M"\n{extra}')
    return path


@pytest.mark.parametrize("flag", ["--junit", "--json"])
def test_check_never_writes_over_its_budgets_file(mlp: Path, tmp_path: Path, work: list[str],
                                                  run: Run, flag: str) -> None:
    budgets = _budgets_file(tmp_path, mlp)
    before = budgets.read_bytes()
    refused_early(run("check", "--budgets", budgets, flag, budgets), work,
                  "is an input of the check", "budgets file")
    hard = tmp_path / "hard.xml"
    os.link(budgets, hard)
    refused_early(run("check", "--budgets", budgets, flag, hard), work, "budgets file")
    assert budgets.read_bytes() == before


def test_check_never_writes_over_its_baseline(mlp: Path, tmp_path: Path, work: list[str],
                                              run: Run) -> None:
    baseline = tmp_path / "base.json"
    baseline.write_text("{}")
    refused_early(run("check", mlp, "--batch", "2", "--baseline", baseline, "--max-growth",
                      "5%", "--json", baseline), work, "the baseline")
    budgets = _budgets_file(tmp_path, mlp, 'baseline = "base.json"\nmax_growth = "5%"\n')
    refused_early(run("check", "--budgets", budgets, "--junit", baseline), work, "the baseline")
    assert baseline.read_text() == "{}"


def test_a_budgets_file_that_is_a_fifo_is_refused_not_waited_on(
        tmp_path: Path, work: list[str], run: Run) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("FIFOs are POSIX")
    os.mkfifo(tmp_path / "budgets.toml")
    refused_early(run("check", "--budgets", tmp_path / "budgets.toml"), work,
                  "not a regular file")


@pytest.mark.ort
def test_the_analysis_still_writes_its_outputs(mlp: Path, tmp_path: Path, run: Run) -> None:
    # the checks let a good command through: both outputs written, an old one replaced
    (tmp_path / "out.json").write_text("old")
    code, _, err = run("analyze", mlp, "--batch", "2", "--json", tmp_path / "out.json",
                       "--html", tmp_path / "out.html")
    assert code == 0, err
    assert (tmp_path / "out.json").read_text().startswith("{")
    assert (tmp_path / "out.html").stat().st_size > 0


# ----- what the terminal shows ----------------------------------------------------------------
@pytest.mark.parametrize("dim", ["batch\ngraphmem: error: forged=3", "\x1b[2J\x1b[31mred=3"])
def test_an_error_line_quoting_the_user_stays_one_inert_line(mlp: Path, run: Run,
                                                             dim: str) -> None:
    code, _, err = run("analyze", mlp, "--no-html", "--dim", dim)
    assert code == 2 and err.count("\n") == 1 and err.startswith("graphmem: error: ")
    assert "\x1b" not in err and ("\\n" in err or "\\x1b" in err)


@pytest.mark.ort
def test_an_output_path_is_shown_as_written(mlp: Path, tmp_path: Path, run: Run) -> None:
    # rich would take '[bold]' as markup and ':warning:' as an emoji; \x1b would reach the tty
    name = "[bold]:warning:\x1b[31m.json"
    code, out, err = run("analyze", mlp, "--batch", "2", "--no-html", "--json", tmp_path / name)
    assert code == 0, err
    assert f"JSON written to {tmp_path}/[bold]:warning:\\x1b[31m.json" in out
    assert (tmp_path / name).exists()


def test_outputs_never_overwrite_the_python_files(tmp_path: Path, work: list[str],
                                                  run: Run) -> None:
    model = tmp_path / "net.py"
    model.write_text("import torch\n\ndef build():\n    return torch.nn.Linear(4, 4)\n")
    loss = tmp_path / "loss.py"
    loss.write_text("def loss(output):\n    return output.sum()\n")
    spec = f"{model}:build"
    refused_early(run("analyze", spec, "--input", "2x4", "--html", model), work,
                  "a Python file graphmem imports")
    refused_early(run("analyze", spec, "--input", "2x4", "--train", "--loss", f"{loss}:loss",
                      "--no-html", "--json", loss), work, "a Python file graphmem imports")
    refused_early(run("verify", spec, "--input", "2x4", "--json", model), work, "Python file")
    assert model.read_text().startswith("import torch") and loss.read_text().startswith("def")
