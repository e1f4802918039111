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


class PrivateFolders:
    """Folders made on first need for libraries' caches while a command of the command line
    runs, each removed with its contents when the command ends. Made only where a library
    that writes one is loaded (a command on an ONNX model makes none, so a SIGKILL, which
    no cleanup survives, leaves nothing of graphmem's behind); outside a command (the Python
    API, in the caller's process) nothing is redirected."""

    def __init__(self) -> None:
        self._active = False
        self._made: dict[str, str] = {}  # variable -> folder

    def claim(self, variable: str) -> None:
        """Within a command, the environment variable names a fresh private folder (mode
        0700, made by mkdtemp); a variable the user set is left as it is (their caches stay
        where they put them)."""
        if not self._active or variable in self._made or os.environ.get(variable):
            return
        folder = tempfile.mkdtemp(prefix="graphmem-")
        os.environ[variable] = folder
        self._made[variable] = folder

    @contextlib.contextmanager
    def command(self) -> Iterator[None]:
        """The block a command runs in; the folders claimed in it go when it ends."""
        self._active = True
        try:
            yield
        finally:
            self._active = False
            for variable, folder in self._made.items():
                os.environ.pop(variable, None)
                remove_tree(folder)
            self._made.clear()


PRIVATE_FOLDERS = PrivateFolders()
# torch makes `$TMPDIR/torchinductor_<user>` (its compile caches' root) when its compiler's
# modules load, which tracing a model and loading transformers' models do
TORCH_CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"  # torch._inductor.runtime.cache_dir_utils
