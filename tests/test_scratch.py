"""graphmem/core/scratch.py: a library's cache folder pointed at a private folder for one
command, and removed with what the library wrote there."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from graphmem.core.scratch import private_folder_for, remove_tree

VARIABLE = "GRAPHMEM_TEST_CACHE_DIR"


def test_the_variable_names_a_private_folder_gone_with_its_contents(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv(VARIABLE, raising=False)
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    with private_folder_for(VARIABLE):
        folder = Path(os.environ[VARIABLE])
        assert folder.parent == tmp_path
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # mkdtemp's: no other user's
        (folder / "dynamo" / "deep").mkdir(parents=True)  # as torch's caches nest
        (folder / "dynamo" / "deep" / "entry").write_bytes(b"x")
    assert VARIABLE not in os.environ
    assert list(tmp_path.iterdir()) == []


def test_a_folder_the_user_named_is_left_as_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "my-cache"
    mine.mkdir()
    monkeypatch.setenv(VARIABLE, str(mine))
    with private_folder_for(VARIABLE):
        assert os.environ[VARIABLE] == str(mine)
        (mine / "kept").write_bytes(b"x")
    assert os.environ[VARIABLE] == str(mine)
    assert (mine / "kept").exists()


def test_removed_even_when_the_command_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VARIABLE, raising=False)
    with pytest.raises(RuntimeError), private_folder_for(VARIABLE):
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
