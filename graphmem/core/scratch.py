"""Private scratch folders: made in the user's temp folder, removed with all they hold.

Libraries graphmem loads write caches of their own where an environment variable says, or by
default in the user's home or temp folder (onnxruntime's telemetry files, torch's compile
caches). A command points them at a folder of its own and removes it when it ends, so a run
leaves no file the user did not ask for (issue 26, item 7).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator


def remove_tree(folder: str) -> None:
    """The folder and what was written in it, by full paths (shutil.rmtree opens each entry by
    its bare name relative to its folder: a watcher of the files a run opens,
    tests/test_files_opened.py, would see a library's folder names in the current folder)."""
    for root, folders, files in os.walk(folder, topdown=False):
        for name in files:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(root, name))
        for name in folders:
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                os.unlink(path) if os.path.islink(path) else os.rmdir(path)
    with contextlib.suppress(OSError):
        os.rmdir(folder)


@contextlib.contextmanager
def private_folder_for(variable: str) -> Iterator[None]:
    """While the block runs, the environment variable names a fresh private folder (mode
    0700, made by mkdtemp), removed with its contents afterwards; a variable the user set is
    left as it is (their caches stay where they put them)."""
    if os.environ.get(variable):
        yield
        return
    folder = tempfile.mkdtemp(prefix="graphmem-")
    os.environ[variable] = folder
    try:
        yield
    finally:
        os.environ.pop(variable, None)
        remove_tree(folder)
