"""Untrusted input: which files Python opens meanwhile, and ONNX tensors whose data would be
read from another file."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from onnx import TensorProto


class _OpenRecorder:
    """An audit hook (hooks cannot be removed: it records only while a test holds the list)."""

    def __init__(self) -> None:
        self.paths: list[str] | None = None

    def __call__(self, event: str, args: tuple) -> None:
        if event == "open" and self.paths is not None and args and isinstance(
                args[0], str | bytes):
            self.paths.append(os.fsdecode(args[0]))


_RECORDER = _OpenRecorder()
_HOOKED: list[bool] = []


@contextmanager
def recorded_opens() -> Iterator[list[str]]:
    """Every path Python opens meanwhile (onnxruntime's C++ reads are not seen)."""
    if not _HOOKED:
        sys.addaudithook(_RECORDER)
        _HOOKED.append(True)
    _RECORDER.paths = []
    try:
        yield _RECORDER.paths
    finally:
        _RECORDER.paths = None


def opened(paths: list[str], name: str) -> list[str]:
    return [p for p in paths if Path(p).name == name]


def external(tensor: TensorProto, location: str, length: int) -> TensorProto:
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor
