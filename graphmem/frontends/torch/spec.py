"""Is a model argument a PyTorch model (`file.py:fn`, `pkg.mod:fn`)? Answered without torch."""

from __future__ import annotations

import os


def is_model_spec(text: str) -> bool:
    """`file.py:fn` or `pkg.mod:fn`, not a file such as `model.onnx`."""
    return ":" in text and not _exists(text) and not text.endswith(".onnx")


def _exists(text: str) -> bool:
    """Path.exists that says False, never raises, for a NUL byte or a name too long."""
    try:
        os.stat(text)
    except (OSError, ValueError):
        return False
    return True
