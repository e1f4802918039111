"""onnxruntime, imported so that it writes no file of the user's.

Importing onnxruntime (1.2x-1.31) creates `$XDG_CACHE_HOME/Microsoft/DeveloperTools/
.onnxruntime/{deviceid,onnxruntime.db}` (`~/.cache` when XDG_CACHE_HOME is unset) and
`$TMPDIR/.ses`, whatever `disable_telemetry_events` says later: a run of graphmem on a model
would leave files in the user's home. It writes them while the module loads and never reads
the variables again, so the import runs with both pointed at a private scratch folder, which
is removed as soon as the import is done. Every graphmem module takes onnxruntime from here.
"""

from __future__ import annotations

import os
import sys
import tempfile
from types import ModuleType

from graphmem.core.scratch import remove_tree

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
        remove_tree(scratch)
    return onnxruntime


ort = _import_onnxruntime()
