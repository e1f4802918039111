"""graphmem: static GPU memory and compute analysis of deep-learning models.

    import graphmem
    result = graphmem.analyze(model, [x], train=True, optimizer="adam", gpu="a100-80gb")
    result = graphmem.analyze_onnx("model.onnx", batch=8, gpu="t4")
    result = graphmem.analyze(graphmem.Request("model.onnx", batch=8))

See graphmem/api.py for every option; the result is a `graphmem.Result`. The API is loaded
on first use: importing any graphmem module runs this file, and most need none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphmem.core.version import __version__

if TYPE_CHECKING:
    from graphmem.api import Result, analyze, analyze_onnx, analyze_torch
    from graphmem.pipeline.request import Request

__all__ = ["Request", "Result", "__version__", "analyze", "analyze_onnx", "analyze_torch"]
_API = frozenset({"Result", "analyze", "analyze_onnx", "analyze_torch"})


def __getattr__(name: str) -> Any:
    if name in _API:
        from graphmem import api

        return getattr(api, name)
    if name == "Request":
        from graphmem.pipeline.request import Request

        return Request
    raise AttributeError(f"module 'graphmem' has no attribute {name!r}")
