"""graphmem: static GPU memory and compute analysis of deep-learning models."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphmem.pipeline.analysis import Analysis

__version__ = "0.1.0"
__all__ = ["__version__", "analyze", "analyze_onnx"]


def analyze(model: Any, example_inputs: Any, **options: Any) -> Analysis:
    """Analyze a PyTorch model: `graphmem.analyze(model, [x], train=True, optimizer="adam")`.

    Options: train, optimizer (sgd|momentum|adam|adamw), amp (fp16|bf16), grad_accum, loss,
    gpu, cuda_reserve_bytes, module_depth. Weights are never read: only shapes and dtypes.
    """
    from graphmem.frontends.torch.analyze import analyze_torch

    return analyze_torch(model, example_inputs, **options)


def analyze_onnx(path: Any, **options: Any) -> Analysis:
    """Analyze an ONNX file: `graphmem.analyze_onnx("model.onnx", batch=8, gpu="t4")`."""
    from graphmem.pipeline.analysis import analyze_onnx as run

    return run(path, **options)
