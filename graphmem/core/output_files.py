"""Writing an output file so that no link can redirect it.

A downloaded model folder may ship `model.graphmem.html -> ~/.bashrc` (or a hard link to a file
the user owns); opening the default report path for writing would then overwrite that file.
So an output is never opened where it stands: the text goes to a new temporary file in the
same folder, which is then renamed over the path. A rename replaces the directory entry
itself: a symlink is replaced, not followed, and a hard link's other names keep their
contents. The command line refuses links up front with one line (graphmem/cli/inputs.py);
the writers refuse them again (the Python API has no command line in front of it), and the
rename is the guarantee under both checks: a link made between the check and the write is
replaced, not followed.

A character device (`--json /dev/null`) cannot be renamed over; it is written in place,
opened with O_NOFOLLOW so that a link to one is refused.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path
from typing import TypeGuard

_TEMP_PREFIX = ".graphmem-"  # short: the folder's name limit applies to the temporary name
_TEMP_SUFFIX = ".tmp"
_NEW_FILE_MODE = 0o666  # as open() creates a file: less the process's umask


def link_kind(path: Path) -> str | None:
    """'a symbolic link' or 'a hard link' when writing `path` in place would write to a file
    that has another name too; None for a plain file, a device or a path not there yet."""
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return None
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        return "a hard link"
    return None


def refuse_link(path: Path) -> None:
    """OSError(ELOOP) when `path` is a link (see link_kind): for writers called without the
    command line's checks in front of them."""
    kind = link_kind(path)
    if kind is not None:
        raise OSError(errno.ELOOP, f"{path} is {kind}: graphmem does not write through links")


def write_output_text(path: Path | str, chunks: Iterable[str]) -> None:
    """Write `chunks` (UTF-8) as the file `path`, through a temporary file and a rename, so
    that a link at `path` is never written through. Raises OSError on failure (ELOOP for a
    link), leaving no temporary file and the old file (if any) as it was."""
    path = Path(path)
    refuse_link(path)
    info = _lstat(path)
    if info is not None and stat.S_ISCHR(info.st_mode):
        _write_device(path, chunks)
        return
    mode = stat.S_IMODE(info.st_mode) if _is_plain_file(info) else _NEW_FILE_MODE & ~_umask()
    descriptor, temporary = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX,
                                             dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.writelines(chunks)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary)
        raise


def _write_device(path: Path, chunks: Iterable[str]) -> None:
    flags = os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    with os.fdopen(os.open(path, flags), "w", encoding="utf-8") as out:
        out.writelines(chunks)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _is_plain_file(info: os.stat_result | None) -> TypeGuard[os.stat_result]:
    return info is not None and stat.S_ISREG(info.st_mode) and info.st_nlink == 1


def _umask() -> int:
    current = os.umask(0)  # the only portable way to read it is to set it
    os.umask(current)
    return current
