"""onnxruntime, imported so that it writes no file of the user's.

Importing onnxruntime (1.2x-1.31) creates `$XDG_CACHE_HOME/Microsoft/DeveloperTools/
.onnxruntime/{deviceid,onnxruntime.db}` (`~/.cache` when XDG_CACHE_HOME is unset) and
`$TMPDIR/.ses`, whatever `disable_telemetry_events` says later: a run of graphmem on a model
would leave files in the user's home. It writes them while the module loads and never reads
the variables again, so the import runs with both pointed at a private scratch folder, which
is removed as soon as the import is done. Every graphmem module takes onnxruntime from here.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from types import ModuleType

_REDIRECTED = ("XDG_CACHE_HOME", "TMPDIR")


def _import_onnxruntime() -> ModuleType:
    loaded = sys.modules.get("onnxruntime")
    if loaded is not None:  # imported before graphmem (by the caller's process): as it is
        return loaded
    scratch = tempfile.mkdtemp(prefix="graphmem-ort-")  # in the user's temp folder, as set
    saved = {name: os.environ.get(name) for name in _REDIRECTED}
    try:
        os.environ.update(dict.fromkeys(_REDIRECTED, scratch))
        import onnxruntime
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _remove(scratch)
    return onnxruntime


def _remove(folder: str) -> None:
    """The scratch folder and what onnxruntime wrote in it, by full paths (shutil.rmtree
    opens each entry by its bare name relative to its folder: a watcher of the files a run
    opens, tests/test_files_opened.py, would see `Microsoft` in the current folder)."""
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


ort = _import_onnxruntime()
