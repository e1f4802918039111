"""graphmem: static GPU memory and compute analysis of deep-learning models.

    import graphmem
    result = graphmem.analyze(model, [x], train=True, optimizer="adam", gpu="a100-80gb")
    result = graphmem.analyze_onnx("model.onnx", batch=8, gpu="t4")
    result = graphmem.analyze(graphmem.Request("model.onnx", batch=8))
    rows = graphmem.gpu_fits("model.onnx", batch=8)      # graphmem gpus --fits
    check = graphmem.verify_model("model.onnx", batch=8)  # graphmem verify: a real run
    report = graphmem.check_model("model.onnx", gpu="t4", batch=8, max_memory="90%")

See graphmem/api.py for every option; the result is a `graphmem.Result`. The API is loaded
on first use: importing any graphmem module runs this file, and most need none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphmem.core.version import __version__

if TYPE_CHECKING:
    from graphmem.api import (
        Result,
        analyze,
        analyze_onnx,
        analyze_torch,
        check_model,
        gpu_fits,
        verify_model,
    )
    from graphmem.pipeline.request import Request

__all__ = ["Request", "Result", "__version__", "analyze", "analyze_onnx", "analyze_torch",
           "check_model", "gpu_fits", "verify_model"]
_API = frozenset({"Result", "analyze", "analyze_onnx", "analyze_torch", "check_model",
                  "gpu_fits", "verify_model"})


def __getattr__(name: str) -> Any:
    if name in _API:
        from graphmem import api

        return getattr(api, name)
    if name == "Request":
        from graphmem.pipeline.request import Request

        return Request
    raise AttributeError(f"module 'graphmem' has no attribute {name!r}")
