"""graphmem/core/scratch.py: a library's cache folder pointed at a private folder for one
command, made only where the library is loaded, and removed with what the library wrote."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from graphmem.core.scratch import PrivateFolders, remove_tree

VARIABLE = "GRAPHMEM_TEST_CACHE_DIR"


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    monkeypatch.delenv(VARIABLE, raising=False)
    return tmp_path


def test_a_claim_in_a_command_is_a_private_folder_gone_with_its_contents(temp: Path) -> None:
    folders = PrivateFolders()
    with folders.command():
        folders.claim(VARIABLE)
        folder = Path(os.environ[VARIABLE])
        assert folder.parent == temp
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # mkdtemp's: no other user's
        folders.claim(VARIABLE)  # claimed again (another import): the same folder
        assert os.environ[VARIABLE] == str(folder)
        (folder / "dynamo" / "deep").mkdir(parents=True)  # as torch's caches nest
        (folder / "dynamo" / "deep" / "entry").write_bytes(b"x")
    assert VARIABLE not in os.environ
    assert list(temp.iterdir()) == []


def test_nothing_is_made_where_nothing_is_claimed(temp: Path) -> None:
    # a command on an ONNX model loads no torch: a SIGKILL then leaves nothing of graphmem's
    with PrivateFolders().command():
        assert list(temp.iterdir()) == []
    assert VARIABLE not in os.environ


def test_outside_a_command_nothing_is_redirected(temp: Path) -> None:
    PrivateFolders().claim(VARIABLE)  # the Python API: the caller's process, torch's own way
    assert VARIABLE not in os.environ
    assert list(temp.iterdir()) == []


def test_a_folder_the_user_named_is_left_as_it_is(temp: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    mine = temp / "my-cache"
    mine.mkdir()
    monkeypatch.setenv(VARIABLE, str(mine))
    folders = PrivateFolders()
    with folders.command():
        folders.claim(VARIABLE)
        assert os.environ[VARIABLE] == str(mine)
        (mine / "kept").write_bytes(b"x")
    assert os.environ[VARIABLE] == str(mine)
    assert (mine / "kept").exists()


def test_removed_even_when_the_command_fails(temp: Path) -> None:
    folders = PrivateFolders()
    with pytest.raises(RuntimeError), folders.command():
        folders.claim(VARIABLE)
        folder = Path(os.environ[VARIABLE])
        raise RuntimeError("the command failed")
    assert not folder.exists()
    assert VARIABLE not in os.environ


def test_remove_tree_removes_a_link_not_what_it_points_to(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "user-file").write_bytes(b"keep")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "link").symlink_to(outside, target_is_directory=True)
    remove_tree(str(scratch))
    assert not scratch.exists()
    assert (outside / "user-file").read_bytes() == b"keep"
